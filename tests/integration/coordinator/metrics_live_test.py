#!/usr/bin/env python3
"""GET /metrics of a live job, read with a real parser (Debian's
python3-prometheus-client): psync-coordinator --metrics-port=0 and two
psync-worker processes on 127.0.0.1, scraped while they train (with a client
that never finishes its request holding a connection), then stopped with
`psyncctl shutdown` and scraped once more.

Checks: the text parses; every series is unique and named psync_*; ranks are
labelled; iterations advance between scrapes; step time, loss and tokens/s
are there and positive; the straggler measure, generation, restarts and
lost ranks are what the job did; histogram buckets are cumulative and end in
+Inf == _count; at the end each rank's reports, the plans and the histogram's
count equal the steps the workers say they completed; the job id (quotes
and a backslash in it) comes back unescaped; a wrong path is 404.

Usage: metrics_live_test.py COORDINATOR WORKER PSYNCCTL
Exit 0 pass, 1 fail, 77 skipped (no prometheus_client: scripts/install-deps.sh
installs python3-prometheus-client).
"""
import json
import re
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

try:
    from prometheus_client.parser import text_string_to_metric_families
except ImportError:
    print("SKIP: python3 has no prometheus_client (apt-get install python3-prometheus-client; "
          "scripts/install-deps.sh installs it)")
    sys.exit(77)

from live_job import check, fail, procs, run_main, start, wait_for  # noqa: E402

COORDINATOR, WORKER, PSYNCCTL = sys.argv[1:4]
JOB_ID = 'metrics "live" \\ test'
WORLD = 2


def scrape(url):
    with urllib.request.urlopen(url, timeout=20) as r:
        check(r.status == 200, f"GET {url}: {r.status}")
        ctype = r.headers.get("Content-Type", "")
        check(ctype.startswith("text/plain; version=0.0.4"), f"Content-Type {ctype}")
        return r.read().decode("utf-8")


def parse(text):
    """{(sample name, frozenset(labels)): value}, with the format's rules checked."""
    samples, types = {}, {}
    for fam in text_string_to_metric_families(text):
        check(fam.name.startswith("psync_"), f"family {fam.name} is not psync_*")
        types[fam.name] = fam.type
        for s in fam.samples:
            key = (s.name, frozenset(s.labels.items()))
            check(key not in samples, f"series {s.name}{s.labels} twice")
            samples[key] = s.value
    return samples, types


def value(samples, name, **labels):
    key = (name, frozenset((k, str(v)) for k, v in labels.items()))
    check(key in samples, f"no sample {name}{labels}")
    return samples[key]


def by_rank(samples, name):
    return {dict(k[1]).get("rank"): v for k, v in samples.items() if k[0] == name}


def check_histogram(samples, name):
    buckets = sorted(((float(dict(k[1])["le"]), v) for k, v in samples.items() if k[0] == name + "_bucket"))
    check(buckets and buckets[-1][0] == float("inf"), f"{name}: no le=+Inf bucket")
    counts = [v for _, v in buckets]
    check(counts == sorted(counts), f"{name}: buckets not cumulative: {buckets}")
    check(counts[-1] == value(samples, name + "_count"), f"{name}: +Inf bucket != _count")
    return counts[-1]


def check_running(samples, types):
    check(types.get("psync_plan_latency_seconds") == "histogram", "plan latency is not a histogram")
    check(types.get("psync_plans") == "counter", f"psync_plans_total is {types.get('psync_plans')}")
    check(types.get("psync_rank_iteration") == "gauge", "rank iteration is not a gauge")
    check(value(samples, "psync_job_state", state="running") == 1, "job is not running")
    check(value(samples, "psync_world_size") == WORLD, "world size")
    check(value(samples, "psync_generation") == 1, "generation")
    check(value(samples, "psync_restarts_total") == 0, "restarts")
    check(value(samples, "psync_ranks", state="training") == WORLD, "ranks training")
    check(by_rank(samples, "psync_rank_lost_total") == {"0": 0, "1": 0}, "lost ranks")
    for name in ("psync_rank_step_seconds", "psync_rank_tokens_per_second", "psync_rank_loss"):
        v = by_rank(samples, name)
        check(set(v) == {"0", "1"}, f"{name}: ranks {sorted(v)}")
        check(all(x > 0 and x < float("inf") for x in v.values()), f"{name}: {v}")
    ages = by_rank(samples, "psync_rank_last_report_age_seconds")
    check(set(ages) == {"0", "1"} and all(a >= 0 for a in ages.values()), f"report ages {ages}")
    check(value(samples, "psync_step_slowest_rank") in (0, 1), "slowest rank")
    check(value(samples, "psync_step_slowest_vs_median_ratio") >= 0, "straggler ratio")
    check(value(samples, "psync_step_slowest_seconds") >= value(samples, "psync_step_median_seconds"),
          "slowest < median")
    check_histogram(samples, "psync_plan_latency_seconds")


def slow_client(port):
    """A client that sends half a request and holds its connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(b"GET /metr")
    return s


def main():
    tmp = tempfile.mkdtemp(prefix="psync-metrics-")
    start([COORDINATOR, "--host=127.0.0.1", "--port=0", f"--port-file={tmp}/port", f"--world-size={WORLD}",
           f"--job-id={JOB_ID}", "--metrics-port=0"], f"{tmp}/coordinator.log")
    out = wait_for(lambda: (lambda t: t if "listening on" in t else None)(open(f"{tmp}/coordinator.log").read()),
                   "the coordinator to listen", timeout=30)
    url = re.search(r"psync-coordinator metrics on (http://\S+/metrics)", out).group(1)
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    target = "127.0.0.1:" + open(f"{tmp}/port").read().strip()

    samples, _ = parse(scrape(url))
    check(value(samples, "psync_job_state", state="waiting") == 1, "job is not waiting before the workers")
    info = [dict(k[1]) for k in samples if k[0] == "psync_job_info"]
    check(info == [{"job_id": JOB_ID}], f"job_info {info}")
    try:
        urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=20)
        fail("GET /other did not fail")
    except urllib.error.HTTPError as e:
        check(e.code == 404, f"GET /other: {e.code}")

    held = slow_client(port)  # held until the server gives up on it (408): nothing may wait for it
    for r in range(WORLD):
        start([WORKER, f"--coordinator={target}", f"--rank={r}", f"--world-size={WORLD}", f"--job-id={JOB_ID}",
               "--steps=100000000", "--widths=8,16,4", "--global-batch=8", "--quiet",
               f"--summary={tmp}/sum_{{rank}}.json"], f"{tmp}/w{r}.log", {"OPENBLAS_NUM_THREADS": "1"})

    def iterations():
        s, t = parse(scrape(url))
        it = by_rank(s, "psync_rank_iteration")
        return (s, t, it) if len(it) == WORLD and min(it.values()) >= 5 else None
    first, types, it1 = wait_for(iterations, "both ranks past iteration 5")
    check_running(first, types)
    later, types, it2 = wait_for(lambda: (lambda x: x if x and all(x[2][r] > it1[r] + 5 for r in it1) else None)(
        iterations()), "the iterations to advance")
    check_running(later, types)
    check(value(later, "psync_plans_total") > value(first, "psync_plans_total"), "plans did not advance")

    subprocess.run([PSYNCCTL, f"--coordinator={target}", "shutdown"], check=True, timeout=60,
                   stdout=subprocess.DEVNULL)
    for p, log in procs[1:]:
        check(p.wait(timeout=120) == 0, f"worker exited {p.returncode}: {open(log).read()[-2000:]}")
    held.close()

    # Why wait: a worker exits once it has sent Done, which the coordinator
    # may not have read yet; the job finishes when the last rank's Done is in.
    def settled():
        s, _ = parse(scrape(url))
        finished = s.get(("psync_job_state", frozenset({("state", "finished")}))) == 1
        done = s.get(("psync_ranks", frozenset({("state", "done")}))) == WORLD
        return s if finished and done else None
    final = wait_for(settled, "the job to finish with every rank done", timeout=30)
    steps = {str(r): json.load(open(f"{tmp}/sum_{r}.json"))["steps_completed"] for r in range(WORLD)}
    check(len(set(steps.values())) == 1, f"ranks completed different numbers of steps: {steps}")
    n = steps["0"]
    check(value(final, "psync_job_state", state="finished") == 1, "job did not finish")
    check(value(final, "psync_ranks", state="done") == WORLD, "ranks not done")
    check(by_rank(final, "psync_rank_reports_total") == {r: n for r in steps},
          f"reports {by_rank(final, 'psync_rank_reports_total')} != steps {steps}")
    check(value(final, "psync_plans_total") == n, f"plans {value(final, 'psync_plans_total')} != steps {n}")
    check(value(final, "psync_iteration") == n - 1, "last plan's iteration")
    check(by_rank(final, "psync_rank_iteration") == {r: n - 1 for r in steps}, "last reported iterations")
    count = check_histogram(final, "psync_plan_latency_seconds")
    check(count == WORLD * n, f"plan latency count {count} != reports {WORLD * n}")
    check(value(final, "psync_plan_latency_seconds_sum") >= 0, "plan latency sum")
    print(f"PASS: {n} steps on {WORLD} ranks; iterations {it1} -> {it2}; "
          f"plan latency count {count:.0f}, sum {value(final, 'psync_plan_latency_seconds_sum'):.3f} s")


if __name__ == "__main__":
    run_main(main)
