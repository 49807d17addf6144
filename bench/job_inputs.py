"""What the job benchmarks (recovery_bench.py, failover_bench.py) share: the
main job's corpus and rank 0's completed steps from its --metrics file."""
import random
import re


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
