#!/usr/bin/env python3
"""A real Prometheus server (Debian's prometheus 2.42) scrapes a live job's
/metrics and the series are read back through its HTTP API; promtool checks
a scrape.

psync-coordinator --metrics-port=0 and two psync-worker processes train on
127.0.0.1; prometheus scrapes the coordinator every second into a
throw-away TSDB. Checks: the target is up; psync_job_state{state="running"}
is 1; the per-rank iteration series exist for both ranks and advance
between two queries; psync_world_size is 2; a rate() over the plans
counter is positive (a counter Prometheus understands as one); `promtool
check metrics` accepts a scrape (no format errors, no lint findings).
Then psyncctl shutdown stops the job and prometheus is stopped.

Usage: prometheus_server_test.py COORDINATOR WORKER PSYNCCTL
Exit 0 pass, 1 fail, 77 skipped (no prometheus / promtool:
scripts/install-deps.sh installs the prometheus package with
PSYNC_WITH_DEPLOY_TOOLS=1, which scripts/test.sh sets).
"""
import json
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
if not PROMETHEUS or not PROMTOOL:
    print("SKIP: no prometheus / promtool (apt-get install prometheus; scripts/install-deps.sh with "
          "PSYNC_WITH_DEPLOY_TOOLS=1 installs it)")
    sys.exit(77)

from live_job import check, procs, run_main, start, wait_for  # noqa: E402

COORDINATOR, WORKER, PSYNCCTL = sys.argv[1:4]
WORLD = 2


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except OSError:
        return None  # not up yet


def query(api, expr):
    """The instant vector of `expr`: [(labels, float value)], [] while empty or unreachable."""
    out = get_json(f"{api}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    if not out or out.get("status") != "success":
        return []
    return [(r["metric"], float(r["value"][1])) for r in out["data"]["result"]]


def main():
    tmp = tempfile.mkdtemp(prefix="psync-prom-")
    start([COORDINATOR, "--host=127.0.0.1", "--port=0", f"--port-file={tmp}/port", f"--world-size={WORLD}",
           "--job-id=prom", "--metrics-port=0"], f"{tmp}/coordinator.log")
    out = wait_for(lambda: (lambda t: t if "listening on" in t else None)(open(f"{tmp}/coordinator.log").read()),
                   "the coordinator to listen", timeout=30)
    url = re.search(r"psync-coordinator metrics on (http://\S+/metrics)", out).group(1)
    metrics_target = url.split("//", 1)[1].split("/", 1)[0]
    target = "127.0.0.1:" + open(f"{tmp}/port").read().strip()
    for r in range(WORLD):
        start([WORKER, f"--coordinator={target}", f"--rank={r}", f"--world-size={WORLD}", "--job-id=prom",
               "--steps=100000000", "--widths=8,16,4", "--global-batch=8", "--quiet"], f"{tmp}/w{r}.log",
              {"OPENBLAS_NUM_THREADS": "1"})

    with open(f"{tmp}/prometheus.yml", "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                "scrape_configs:\n  - job_name: psync\n    static_configs:\n"
                f"      - targets: ['{metrics_target}']\n")
    check(subprocess.run([PROMTOOL, "check", "config", f"{tmp}/prometheus.yml"], capture_output=True).returncode == 0,
          "promtool rejects the test's config")
    api = f"http://127.0.0.1:{free_port()}"
    start([PROMETHEUS, f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/tsdb",
           f"--web.listen-address={api.split('//')[1]}", "--log.level=warn"], f"{tmp}/prometheus.log")

    wait_for(lambda: query(api, 'up{job="psync"} == 1'), "prometheus to scrape the coordinator (up == 1)")
    running = wait_for(lambda: query(api, 'psync_job_state{state="running"} == 1'), "the running job in prometheus")
    check(running[0][0].get("instance") == metrics_target, f"instance label {running[0][0]}")
    world = wait_for(lambda: query(api, "psync_world_size"), "psync_world_size")
    check(world[0][1] == WORLD, f"psync_world_size {world}")

    def iterations():
        it = {m.get("rank"): v for m, v in query(api, "psync_rank_iteration")}
        return it if len(it) == WORLD else None
    it1 = wait_for(iterations, "psync_rank_iteration of both ranks")
    it2 = wait_for(lambda: (lambda it: it if it and all(it[r] > it1[r] for r in it1) else None)(iterations()),
                   "the ranks' iterations to advance in prometheus")
    rate = wait_for(lambda: [v for _, v in query(api, "rate(psync_plans_total[5s])") if v > 0],
                    "a positive rate of psync_plans_total")

    with urllib.request.urlopen(url, timeout=20) as r:
        scrape = r.read()
    lint = subprocess.run([PROMTOOL, "check", "metrics"], input=scrape, capture_output=True, timeout=60)
    check(lint.returncode == 0 and not lint.stdout.strip() and not lint.stderr.strip(),
          f"promtool check metrics: exit {lint.returncode}: {lint.stdout.decode()} {lint.stderr.decode()}")

    subprocess.run([PSYNCCTL, f"--coordinator={target}", "shutdown"], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    for p, log in procs[1:1 + WORLD]:
        check(p.wait(timeout=120) == 0, f"worker exited {p.returncode}: {open(log).read()[-2000:]}")
    for p, _ in procs[1 + WORLD:]:  # prometheus: stopped before its TSDB goes
        p.terminate()
        p.wait(timeout=30)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"PASS: prometheus scraped {metrics_target}: iterations {it1} -> {it2}, "
          f"rate(psync_plans_total[5s]) = {rate[0]:.1f}/s; promtool check metrics clean ({len(scrape)} bytes)")


if __name__ == "__main__":
    run_main(main)
