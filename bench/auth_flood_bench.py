#!/usr/bin/env python3
"""Unauthenticated calls cost the coordinator nothing (issue 25 item 1),
measured from outside with a real gRPC client (Debian's python3-grpcio:
PSYNC_WITH_BENCH_TOOLS=1 scripts/install-deps.sh).

  bench/auth_flood_bench.py [--build=build] [--coordinator-bin=PATH] [--rounds=3] [--calls=32]
                            [--mib=15] [--steps=20000]

A psync-coordinator with a token (world 2) runs a job of two psync-workers
(tiny MLP, --steps). While it runs, round after round (at least --rounds,
until the job ends): --calls concurrent unauthenticated --mib MiB calls to
Control/Status and as many to Coordinator/StoreSet at once (one connection
each), and in every round a token holder's Status, timed. Reported: the coordinator's peak RSS (VmHWM,
/proc), the token holder's worst latency, the job's median step (its
--summary) and wall time; then the same job without the flood (A/B, twice),
and an authenticated Join of 1.1M manifest entries (refused): RSS before
and after. --coordinator-bin runs another build's coordinator (e.g. main's).
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import grpc

TOKEN = "flood-bench-token"


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def unknown_fields(n):
    chunk = bytes([0xA2, 0x06, 98]) + b"x" * 98  # field 100, 98 bytes: decodes to ~6x its size
    return chunk * (n // len(chunk))


def channel(port, tag):
    return grpc.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_send_message_length", 64 << 20), ("grpc.use_local_subchannel_pool", 1), ("psync.bench", tag)])


def call(ch, method, payload, token=None, timeout=60):
    f = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
    md = [("authorization", "Bearer " + token)] if token else None
    try:
        f(payload, timeout=timeout, metadata=md)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def run_job(a, tmp, flood):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    env = dict(os.environ, PSYNC_TOKEN=TOKEN)
    coord = subprocess.Popen([a.coordinator_bin, "--world-size=2", "--host=127.0.0.1", "--port=0",
                              f"--port-file={port_file}", "--exit-when-done"], env=env,
                             stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "coord.log"), "w"))
    while not os.path.exists(port_file):
        time.sleep(0.01)
    port = open(port_file).read().strip()
    workers = [subprocess.Popen([f"{a.build}/worker/runtime/psync-worker", f"--coordinator=127.0.0.1:{port}",
                                 f"--rank={r}", "--world-size=2", f"--steps={a.steps}", "--widths=8,8,4",
                                 "--global-batch=8", "--quiet", f"--summary={tmp}/sum_{r}.json"], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(2)]
    t0 = time.monotonic()
    peak_kb, coord_cpu = [0], [0.0]
    done = threading.Event()

    def sample_rss():  # the coordinator exits with the job: sample while it runs
        while not done.is_set():
            try:
                peak_kb[0] = max(peak_kb[0], status_kb(coord.pid, "VmHWM"))
                coord_cpu[0] = cpu_s(coord.pid)
            except (OSError, ValueError, IndexError):
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample_rss)
    sampler.start()
    worst_ms, codes, rounds, last = 0.0, set(), 0, []
    # The attacker runs here, on the job's cores: at the lowest priority, as
    # if it were elsewhere (the coordinator's own CPU is reported too).
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    payload = unknown_fields(a.mib << 20)
    chans = [channel(port, i) for i in range(2 * a.calls)] if flood else []
    mine = channel(port, "token-holder")
    call(mine, "/psync.v1.Control/Status", b"", TOKEN)  # connected
    # Rounds back to back for as long as the job runs (at least --rounds
    # with the flood); without it, the token holder's calls alone.
    while (flood and rounds < a.rounds) or all(w.poll() is None for w in workers):
        with cf.ThreadPoolExecutor(max(1, len(chans))) as ex:
            futs = [ex.submit(call, chans[i], "/psync.v1.Control/Status" if i % 2 else
                              "/psync.v1.Coordinator/StoreSet", payload) for i in range(len(chans))]
            time.sleep(0.2)  # the flood is in flight
            t = time.monotonic()
            ok = call(mine, "/psync.v1.Control/Status", b"", TOKEN, timeout=30)
            worst_ms = max(worst_ms, (time.monotonic() - t) * 1000)
            results = [f.result() for f in futs] + ([] if ok == "OK" else ["token holder: " + ok])
        # The last round may be cut short by the job's end (the coordinator
        # exits with it): only the rounds before it count.
        codes.update(last)
        last = results
        rounds += 1
    os.setpriority(os.PRIO_PROCESS, 0, 0)
    for w in workers:
        w.wait()
    wall = time.monotonic() - t0
    done.set()
    sampler.join()
    peak_mb = peak_kb[0] / 1024
    coord.wait(timeout=30)
    median = json.load(open(f"{tmp}/sum_0.json"))["median_step_ms"]
    return wall, median, peak_mb, worst_ms, codes, rounds, coord_cpu[0]


def join_rss(a, tmp):
    port_file = os.path.join(tmp, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    coord = subprocess.Popen([a.coordinator_bin, "--world-size=2", "--host=127.0.0.1", "--port=0",
                              f"--port-file={port_file}"], env=dict(os.environ, PSYNC_TOKEN=TOKEN),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(port_file):
        time.sleep(0.01)
    port = open(port_file).read().strip()
    ch = channel(port, "join")
    call(ch, "/psync.v1.Control/Status", b"", TOKEN)
    entry = b"\x3a\x03\x0a\x01p"  # manifest (field 7) { name: "p" }
    req = b"\x0a\x05psync" + b"\x32\x04gloo" + entry * 1100000
    before = status_kb(coord.pid, "VmRSS") / 1024
    code = call(ch, "/psync.v1.Coordinator/Join", req, TOKEN)
    after = status_kb(coord.pid, "VmRSS") / 1024
    coord.terminate()
    coord.wait(timeout=30)
    return len(req), code, before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--coordinator-bin", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=32)
    ap.add_argument("--mib", type=int, default=15)
    ap.add_argument("--steps", type=int, default=20000)
    a = ap.parse_args()
    a.coordinator_bin = a.coordinator_bin or f"{a.build}/server/psync-coordinator"
    with tempfile.TemporaryDirectory() as tmp:
        print(f"coordinator {a.coordinator_bin}; load average {os.getloadavg()[0]:.2f}")
        for flood in (False, True, False, True):
            wall, median, peak, worst, codes, rounds, cpu = run_job(a, tmp, flood)
            what = (f"flood {rounds} rounds x ({a.calls} Status + {a.calls} StoreSet) of {a.mib} MiB" if flood
                    else "no flood")
            extra = f", token holder's Status worst {worst:.1f} ms" + (f", refused: {sorted(codes)}" if flood else "")
            print(f"RESULT {what}: job wall {wall:.2f} s ({a.steps / wall:.0f} it/s), median step {median:.3f} ms, "
                  f"coordinator peak RSS {peak:.1f} MB, CPU {cpu:.2f} s{extra}; load average {os.getloadavg()[0]:.2f}")
        size, code, before, after = join_rss(a, tmp)
        print(f"RESULT authenticated Join of 1.1M entries ({size / 1e6:.1f} MB): {code}; coordinator RSS "
              f"{before:.1f} MB before, {after:.1f} MB after")


if __name__ == "__main__":
    main()
