"""What the job benchmarks (recovery_bench.py, failover_bench.py) share: the
main job's corpus, rank 0's completed steps from its --metrics file, and
psync-launch run with its output in a log and never left behind."""
import contextlib
import random
import re
import subprocess


def corpus(path):
    """Seeded text-like bytes at `path`: the same data every run, no download."""
    rnd = random.Random(7)
    words = [bytes(rnd.randrange(97, 123) for _ in range(rnd.randrange(2, 9))) for _ in range(2000)]
    with open(path, "wb") as f:
        f.write(b" ".join(rnd.choice(words) for _ in range(400000)))


def metrics_steps(path):
    """The steps in a worker's --metrics file (one flushed line per completed step); [] before the file."""
    try:
        with open(path) as f:
            return [int(m.group(1)) for m in re.finditer(r'"step": (\d+)', f.read())]
    except FileNotFoundError:
        return []


@contextlib.contextmanager
def launched(argv, log_path):
    """Runs `argv` (psync-launch ...) with stdout and stderr in `log_path`;
    kills it on the way out if it still runs (a benchmark that failed)."""
    log = open(log_path, "w")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield p
    finally:
        if p.poll() is None:
            p.kill()
        log.close()


def add_kill_flags(ap):
    """The flags both benchmarks take: the build, the world and the kills (every --spacing steps)."""
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--spacing", type=int, default=150, help="steps between kills")
