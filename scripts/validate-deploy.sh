#!/usr/bin/env bash
# Offline checks of deploy/ (no Docker engine, no cluster needed):
#   1. shell syntax of the deploy scripts
#   2. docker-compose config -q of deploy/compose/docker-compose.yml and docker-compose.nodes.yml
#   3. kubectl kustomize of deploy/k8s/base and every overlay, then structural
#      checks of the rendered objects (probes, ports, token, policies, one pod
#      per node: psync-launch --nnodes/--nproc, node rank = completion index,
#      completions == parallelism == NNODES, WORLD_SIZE == NNODES * NPROC_PER_NODE,
#      the headless Service, GPU requests == --nproc, NCCL settings, /dev/shm,
#      $(VAR) refs, restarts: coordinator --max-restarts == Job backoffLimit and
#      the pod failure policy, checkpoints on a PersistentVolumeClaim, the data
#      volume read-only)
#   4. Dockerfiles: COPY sources exist and are not excluded by .dockerignore,
#      a non-root USER, the tini + entrypoint ENTRYPOINT
#   With the built binaries (arguments: binaries or directories holding
#   psync-coordinator, psync-worker, psyncctl[, psync-launch]):
#   5. every flag (and psyncctl command) that Dockerfiles, compose, k8s
#      manifests and deploy scripts pass to a psync binary is one that binary's
#      --help lists
#   6. the entrypoint dispatches to the binaries; the runtime package list of
#      the images covers the binaries' shared libraries (ldd + dpkg -S)
#   7. metrics: the coordinator is annotated for Prometheus and serves
#      /metrics on the port the annotations, the container, the Service, the
#      NetworkPolicy and compose name; every psync_* metric the Grafana
#      dashboard (deploy/grafana/) queries is one the coordinator serves
#      (read from a coordinator started here, given the binaries)
# Prints "validate-deploy: N passed, N failed, N skipped"; exits 1 on any
# failure, 77 when nothing failed but a check was skipped (a tool or the
# binaries missing: ctest reports the test as skipped, never as passed), 0 when
# every check ran and passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

passed=0 failed=0 skipped=0
ok()   { echo "PASS: $*"; passed=$((passed + 1)); }
bad()  { echo "FAIL: $*"; failed=$((failed + 1)); }
skip() { echo "SKIP: $*"; skipped=$((skipped + 1)); }
finish() {
  echo "validate-deploy: $passed passed, $failed failed, $skipped skipped"
  if ((failed)); then exit 1; elif ((skipped)); then exit 77; else exit 0; fi
}

work=$(mktemp -d /tmp/psync-validate.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---------------------------------------------------------------- binaries
bindirs=()
for a in "$@"; do
  if [[ -d "$a" ]]; then bindirs+=("$(cd "$a" && pwd)"); elif [[ -e "$a" ]]; then bindirs+=("$(cd "$(dirname "$a")" && pwd)"); else
    bad "argument $a: no such binary or directory"; fi
done
if ((${#bindirs[@]})); then PATH="$(IFS=:; echo "${bindirs[*]}"):$PATH"; fi
find_bin() {  # only from the directories given, never a stray one on $PATH
  local d
  for d in "${bindirs[@]}"; do [[ -x "$d/$1" ]] && { echo "$d/$1"; return 0; }; done
  return 1
}

# A python3 with PyYAML (Debian's python3-yaml comes with docker-compose).
py=""
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import yaml' 2>/dev/null; then py=$p; break; fi
done

# ---------------------------------------------------------------- 1. shell syntax
for f in deploy/docker/entrypoint.sh deploy/compose/check-job.sh; do
  if sh -n "$f" 2>"$work/sh.err"; then ok "sh -n $f"; else bad "sh -n $f: $(cat "$work/sh.err")"; fi
done
for f in scripts/validate-deploy.sh scripts/compose-test.sh tests/integration/netns/netns_test.sh; do
  if bash -n "$f" 2>"$work/sh.err"; then ok "bash -n $f"; else bad "bash -n $f: $(cat "$work/sh.err")"; fi
done

# ---------------------------------------------------------------- 2. compose
compose_file=deploy/compose/docker-compose.yml
if command -v docker-compose >/dev/null; then
  if docker-compose -f "$compose_file" config -q 2>"$work/compose.err"; then ok "docker-compose config -q"
  else bad "docker-compose config -q: $(cat "$work/compose.err")"; fi
  docker-compose -f "$compose_file" config >"$work/compose.yaml" 2>/dev/null || cp "$compose_file" "$work/compose.yaml"
else
  skip "docker-compose not installed (scripts/test.sh installs it with PSYNC_WITH_DEPLOY_TOOLS=1)"
  cp "$compose_file" "$work/compose.yaml"
fi
# The two-node shape (compose-test.sh's nodes-worker-killed runs it for real).
if command -v docker-compose >/dev/null; then
  if docker-compose -f deploy/compose/docker-compose.nodes.yml config -q 2>"$work/compose-nodes.err"; then
    ok "docker-compose config -q (docker-compose.nodes.yml)"
  else bad "docker-compose config -q (docker-compose.nodes.yml): $(cat "$work/compose-nodes.err")"; fi
fi

# ---------------------------------------------------------------- 3. kustomize
k8s_dirs=(deploy/k8s/base)
for d in deploy/k8s/overlays/*/; do k8s_dirs+=("${d%/}"); done
rendered=()
if command -v kubectl >/dev/null; then
  for d in "${k8s_dirs[@]}"; do
    out="$work/k8s-$(basename "$d").yaml"
    if kubectl kustomize "$d" >"$out" 2>"$work/kz.err"; then ok "kubectl kustomize $d"; rendered+=("$d=$out")
    else bad "kubectl kustomize $d: $(cat "$work/kz.err")"; fi
  done
else
  skip "kubectl not installed: kustomize renders not checked"
fi

if [[ -z "$py" ]]; then
  skip "no python3 with PyYAML (apt-get install python3-yaml): manifest, Dockerfile and flag checks skipped"
  finish
fi

# ---------------------------------------------------------------- 4-5. python checks
helpdir="$work/help"; mkdir -p "$helpdir"
have_bins=1
for b in psync-coordinator psync-worker psyncctl psync-launch; do
  if f=$(find_bin "$b"); then
    timeout 20 "$f" --help >"$helpdir/$b" 2>&1
    timeout 20 "$f" --helpfull >>"$helpdir/$b" 2>&1
    if ! grep -q -- '--' "$helpdir/$b"; then bad "$b --help printed no flags"; rm -f "$helpdir/$b"; fi
  elif [[ "$b" != psync-launch ]]; then
    have_bins=0
  fi
done
((have_bins)) || skip "binaries not given (or incomplete): flags are not checked against --help"

# The metric families a coordinator serves (with a token, so the refusal
# counters are there too): what the Grafana dashboard may query.
if f=$(find_bin psync-coordinator); then
  PSYNC_TOKEN=validate-deploy timeout 60 "$f" --host=127.0.0.1 --port=0 --world-size=1 --metrics-port=0 \
    >"$work/coordinator.out" 2>&1 &
  cpid=$!
  for _ in $(seq 1 200); do grep -q "listening on" "$work/coordinator.out" && break; sleep 0.1; done
  url=$(sed -n 's/^psync-coordinator metrics on \(http:[^ ]*\)$/\1/p' "$work/coordinator.out")
  if [[ -n "$url" ]]; then
    "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode())' \
      "$url" >"$helpdir/metrics.txt" 2>"$work/scrape.err" || bad "GET $url: $(cat "$work/scrape.err")"
  else
    bad "psync-coordinator --metrics-port=0 printed no metrics line: $(head -c 500 "$work/coordinator.out")"
  fi
  kill "$cpid" 2>/dev/null; wait "$cpid" 2>/dev/null
fi

"$py" - "$root" "$work/compose.yaml" "$helpdir" "$work/pycount" "${rendered[@]}" <<'PYEOF'
import glob, json, os, re, shlex, sys, fnmatch
import yaml

root, compose_path, helpdir, countfile = sys.argv[1:5]
renders = [a.split("=", 1) for a in sys.argv[5:]]
failures = passes = skips = 0

def ok(msg):
    global passes
    passes += 1
    print("PASS: " + msg)
def bad(msg):
    global failures
    failures += 1
    print("FAIL: " + msg)

BINARIES = ["psync-coordinator", "psync-worker", "psyncctl", "psync-launch"]
ALIASES = {"coordinator": "psync-coordinator", "worker": "psync-worker", "ctl": "psyncctl", "launch": "psync-launch"}
SEPARATORS = {";", "&&", "||", "|", "(", ")", "&", "then", "do", "else", "if", "until", "while", "!", "`", "$"}

# ------------------------------------------------ invocations: (where, binary, [args])
invocations = []

def scan_tokens(where, tokens, entrypoint_words=True):
    """Finds psync binaries in a token list (argv or shell words) and the flags after them."""
    cur, args = None, []
    def flush():
        if cur: invocations.append((where, cur, list(args)))
    for i, t in enumerate(tokens):
        base = os.path.basename(t)
        is_bin = base in BINARIES or (entrypoint_words and i == 0 and t in ALIASES)
        if is_bin:
            flush(); cur, args = ALIASES.get(base, base), []
        elif t in SEPARATORS:
            flush(); cur, args = None, []
        elif cur == "psync-launch" and t == "--":
            flush(); cur, args = "psync-worker", []
        elif cur:
            args.append(t)
    flush()

def scan_shell(where, text):
    lines, acc = [], ""
    for line in text.splitlines():
        if line.rstrip().endswith("\\"):
            acc += line.rstrip()[:-1] + " "; continue
        lines.append(acc + line); acc = ""
    for n, line in enumerate(lines, 1):
        if not any(b in line for b in BINARIES): continue
        try:
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|()`")
            lex.whitespace_split = True
            lex.commenters = "#"
            toks = list(lex)
        except ValueError:
            toks = line.split()
        # split "$(" style tokens like "status=$(" -> treat "$" remains as separators
        scan_tokens(f"{where}:{n}", [t for t in toks], entrypoint_words=False)

def scan_argv(where, argv):
    if not argv: return
    argv = [str(a) for a in argv]
    # sh -c / bash -c SCRIPT
    for i, a in enumerate(argv[:-1]):
        if os.path.basename(a) in ("sh", "bash") and argv[i + 1] == "-c" and i + 2 < len(argv):
            scan_shell(where, argv[i + 2]); return
    scan_tokens(where, argv)

# Dockerfiles: exec-form CMD/ENTRYPOINT/HEALTHCHECK and shell-form RUN lines
dockerfiles = sorted(glob.glob(os.path.join(root, "deploy/docker/Dockerfile*")))
for df in dockerfiles:
    rel = os.path.relpath(df, root)
    text = open(df).read().replace("\\\n", " ")
    for line in text.splitlines():
        m = re.match(r"\s*(CMD|ENTRYPOINT|HEALTHCHECK\s+.*?CMD)\s+(.*)", line)
        if not m: continue
        body = m.group(2).strip()
        if body.startswith("["):
            scan_argv(rel, [t for t in json.loads(body) if t not in ("/usr/bin/tini", "--")][1:]
                      if "psync-entrypoint" in body else json.loads(body))
        else:
            scan_shell(rel, body)

# compose: command / entrypoint / healthcheck.test of every service
compose = yaml.safe_load(open(compose_path))
for name, svc in (compose.get("services") or {}).items():
    where = f"docker-compose.yml:{name}"
    for key in ("command", "entrypoint"):
        v = svc.get(key)
        if isinstance(v, str): scan_shell(where, v)
        elif v: scan_argv(where, v)
    hc = (svc.get("healthcheck") or {}).get("test")
    if isinstance(hc, list) and hc:
        argv = hc[1:]
        if hc[0] == "CMD-SHELL": scan_shell(where + ":healthcheck", " ".join(argv))
        else:
            argv = argv[1:] if argv and argv[0].endswith("psync-entrypoint") else argv
            scan_argv(where + ":healthcheck", argv)
    elif isinstance(hc, str): scan_shell(where + ":healthcheck", hc)

# deploy scripts run inside the images
for sh in glob.glob(os.path.join(root, "deploy/**/*.sh"), recursive=True):
    if sh.endswith("entrypoint.sh"): continue
    scan_shell(os.path.relpath(sh, root), open(sh).read())

# ------------------------------------------------ k8s structural checks
def containers(pod):
    return (pod.get("initContainers") or []) + (pod.get("containers") or [])

def arg_value(args, flag):
    for a in args or []:
        if str(a).startswith(flag + "="): return str(a).split("=", 1)[1]
    return None

def metrics_errors(dep, cc, svc, pols, worker_labels):
    """The coordinator serves /metrics where Prometheus is told to look, and only Prometheus may look."""
    errs = []
    ann = dep["spec"]["template"]["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true": errs.append("coordinator pod: no prometheus.io/scrape: \"true\"")
    if ann.get("prometheus.io/path", "/metrics") != "/metrics": errs.append("coordinator pod: prometheus.io/path is not /metrics")
    port = str(ann.get("prometheus.io/port"))
    if arg_value(cc.get("args"), "--metrics-port") != port:
        errs.append(f"coordinator: --metrics-port={arg_value(cc.get('args'), '--metrics-port')} is not the annotated port {port}")
    if arg_value(cc.get("args"), "--metrics-host") not in ("0.0.0.0", "::"):
        errs.append("coordinator: --metrics-host is not 0.0.0.0 (Prometheus scrapes the pod IP)")
    cports = {str(p.get("containerPort")): p.get("name") for p in cc.get("ports") or []}
    if cports.get(port) != "metrics": errs.append(f"coordinator: no containerPort {port} named metrics")
    if not any(str(p.get("port")) == port and p.get("targetPort") in ("metrics", int(port) if port.isdigit() else None)
               for p in svc["spec"].get("ports", [])):
        errs.append(f"Service has no port {port} -> metrics")
    rule_ports = [(r, {str(p.get("port")) for p in r.get("ports") or []}) for p in pols for r in p["spec"].get("ingress") or []]
    if not any(port in ps for _, ps in rule_ports): errs.append(f"NetworkPolicy admits nobody to the metrics port {port}")
    for r, ps in rule_ports:
        if port in ps and "29500" in ps: errs.append("NetworkPolicy: the metrics and gRPC ports share a rule (Prometheus would reach gRPC)")
    return errs

for rdir, path in renders:
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by = {}
    for d in docs:
        for f in ("apiVersion", "kind"):
            if f not in d: bad(f"{rdir}: object without {f}: {d.get('metadata')}")
        if not (d.get("metadata") or {}).get("name"): bad(f"{rdir}: {d.get('kind')} without metadata.name")
        by.setdefault(d.get("kind"), []).append(d)
    tag = rdir
    cms = {c["metadata"]["name"]: c.get("data") or {} for c in by.get("ConfigMap", [])}
    secrets = {s["metadata"]["name"]: set((s.get("data") or {}).keys()) | set((s.get("stringData") or {}).keys())
               for s in by.get("Secret", [])}
    svcs = by.get("Service", [])
    deps = [d for d in by.get("Deployment", []) if "coordinator" in d["metadata"]["name"]]
    jobs = by.get("Job", [])
    if len(deps) != 1 or len(jobs) != 1 or not svcs:
        bad(f"{tag}: want 1 coordinator Deployment, 1 worker Job, a Service; got {len(deps)}/{len(jobs)}/{len(svcs)}")
        continue
    dep, job = deps[0], jobs[0]
    cpod = dep["spec"]["template"]["spec"]; cl = dep["spec"]["template"]["metadata"].get("labels", {})
    wpod = job["spec"]["template"]["spec"]; wl = job["spec"]["template"]["metadata"].get("labels", {})
    errs = []
    def selects(service, labels):
        sel = service["spec"].get("selector") or {}
        return bool(sel) and all(labels.get(k) == v for k, v in sel.items())
    # The coordinator's Service (ClusterIP, port 29500) and the node pods'
    # headless Service (stable names: the pod template's subdomain).
    csvcs = [x for x in svcs if selects(x, cl) and x["spec"].get("clusterIP") != "None"]
    hsvcs = [x for x in svcs if selects(x, wl) and x["spec"].get("clusterIP") == "None"]
    svc = csvcs[0] if csvcs else svcs[0]
    if len(csvcs) != 1: errs.append(f"want 1 ClusterIP Service selecting the coordinator, got {len(csvcs)}")
    if len(hsvcs) != 1: errs.append(f"want 1 headless Service (clusterIP: None) selecting the node pods, got {len(hsvcs)}")
    elif wpod.get("subdomain") != hsvcs[0]["metadata"]["name"]:
        errs.append(f"node pods' subdomain {wpod.get('subdomain')} is not the headless Service {hsvcs[0]['metadata']['name']}")
    elif not hsvcs[0]["spec"].get("publishNotReadyAddresses"):
        errs.append("headless Service: publishNotReadyAddresses is not true (node names would resolve only once ready)")

    def env_of(c):
        names, vals, refs = set(), {}, []
        for ef in c.get("envFrom") or []:
            cmn = (ef.get("configMapRef") or {}).get("name")
            if cmn is not None:
                if cmn not in cms: errs.append(f"{c['name']}: envFrom ConfigMap {cmn} not in the render")
                names |= set(cms.get(cmn, {})); vals.update(cms.get(cmn, {}))
        for e in c.get("env") or []:
            names.add(e["name"])
            if "value" in e: vals[e["name"]] = e["value"]
            skr = ((e.get("valueFrom") or {}).get("secretKeyRef"))
            if skr:
                refs.append((e["name"], skr))
                if skr["name"] not in secrets: errs.append(f"{c['name']}: Secret {skr['name']} not in the render")
                elif skr["key"] not in secrets[skr["name"]]: errs.append(f"{c['name']}: Secret {skr['name']} has no key {skr['key']}")
        return names, vals, refs

    for pod, kind in ((cpod, "coordinator"), (wpod, "worker")):
        sc = pod.get("securityContext") or {}
        if not sc.get("runAsNonRoot"): errs.append(f"{kind} pod: runAsNonRoot not set")
        for c in containers(pod):
            names, vals, refs = env_of(c)
            for a in (c.get("command") or []) + (c.get("args") or []):
                for v in re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(a)):
                    if v not in names: errs.append(f"{kind}/{c['name']}: $({v}) in args is not defined in its env")
            if not any(n == "PSYNC_TOKEN" for n, _ in refs):
                errs.append(f"{kind}/{c['name']}: PSYNC_TOKEN not from a secretKeyRef")
            scan_argv(f"{tag}:{kind}/{c['name']}", (c.get("command") or []) + (c.get("args") or []))
    # coordinator: port + gRPC probes
    cc = cpod["containers"][0]
    ports = [p.get("containerPort") for p in cc.get("ports") or []]
    if 29500 not in ports: errs.append("coordinator: containerPort 29500 missing")
    for probe in ("readinessProbe", "livenessProbe"):
        g = (cc.get(probe) or {}).get("grpc")
        if not g or g.get("port") != 29500: errs.append(f"coordinator: {probe} is not a grpc probe on 29500")
    # Service selects the coordinator, port 29500
    sel = svc["spec"].get("selector") or {}
    if not sel or any(cl.get(k) != v for k, v in sel.items()): errs.append("Service selector does not match the coordinator pod")
    if not any(p.get("port") == 29500 for p in svc["spec"].get("ports", [])): errs.append("Service has no port 29500")
    # Job: indexed, one pod per node running psync-launch in node mode against
    # the coordinator's Service; the node rank from the completion index; the
    # sizes agree: completions == parallelism == NNODES, WORLD_SIZE == NNODES * NPROC_PER_NODE.
    js = job["spec"]
    if js.get("completionMode") != "Indexed": errs.append("node Job is not Indexed")
    wc = wpod["containers"][0]
    names, vals, _ = env_of(wc)
    def expand(v, env):
        return re.sub(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: str(env.get(m.group(1), m.group(0))), str(v))
    wargs = [expand(a, vals) for a in (wc.get("command") or []) + (wc.get("args") or [])]
    if "psync-launch" not in [os.path.basename(a) for a in wargs[:2]]:
        errs.append(f"node pods do not run psync-launch (args {wargs[:2]})")
    sep = wargs.index("--") if "--" in wargs else len(wargs)
    largs, wkargs = wargs[:sep], wargs[sep + 1:]
    nnodes, nproc, ws = arg_value(largs, "--nnodes"), arg_value(largs, "--nproc"), vals.get("WORLD_SIZE")
    if not (nnodes and nproc and nnodes.isdigit() and nproc.isdigit()):
        errs.append(f"psync-launch: --nnodes={nnodes} --nproc={nproc} are not numbers after $(VAR) expansion")
        nnodes = nproc = "0"
    if not (str(js.get("completions")) == str(js.get("parallelism")) == nnodes):
        errs.append(f"node Job completions={js.get('completions')} parallelism={js.get('parallelism')} differ from --nnodes={nnodes}")
    if str(ws) != str(int(nnodes) * int(nproc)):
        errs.append(f"WORLD_SIZE={ws} is not --nnodes={nnodes} x --nproc={nproc}")
    node_rank_env = [e for e in wc.get("env") or [] if e["name"] == "NODE_RANK"]
    fp = ((node_rank_env[0].get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "") if node_rank_env else ""
    if "job-completion-index" not in fp: errs.append("node pods' NODE_RANK is not taken from the job completion index")
    if arg_value(wc.get("args"), "--node-rank") != "$(NODE_RANK)": errs.append("psync-launch is not given --node-rank=$(NODE_RANK)")
    if vals.get("MASTER_ADDR") != svc["metadata"]["name"]: errs.append(f"MASTER_ADDR={vals.get('MASTER_ADDR')} is not the Service {svc['metadata']['name']}")
    if str(vals.get("MASTER_PORT")) != "29500": errs.append(f"MASTER_PORT={vals.get('MASTER_PORT')} is not 29500")
    if arg_value(largs, "--coordinator") != f"{vals.get('MASTER_ADDR')}:{vals.get('MASTER_PORT')}":
        errs.append(f"psync-launch --coordinator={arg_value(largs, '--coordinator')} is not MASTER_ADDR:MASTER_PORT")
    if any(a.startswith("--start-coordinator") for a in largs):
        errs.append("psync-launch --start-coordinator: the coordinator is its own workload here")
    for f in ("--rank", "--world-size", "--coordinator", "--local-rank"):
        if any(a == f or a.startswith(f + "=") for a in wkargs):
            errs.append(f"worker flags after -- set {f}, which psync-launch sets for each worker")
    cws = arg_value([expand(a, env_of(cpod["containers"][0])[1]) for a in cpod["containers"][0].get("args") or []], "--world-size")
    if cws != str(ws): errs.append(f"coordinator --world-size={cws} is not WORLD_SIZE={ws}")
    # restarts: the coordinator's --max-restarts equals the Job's backoffLimit
    # (and the launchers'); exit 4 (no restart followed, from a node's view)
    # and disruptions get a new pod without counting, exit 2 and 3 fail the
    # Job; checkpoints live on a PersistentVolumeClaim mounted at
    # PSYNC_CHECKPOINT_DIR.
    _, cvals, _ = env_of(cc)
    max_restarts = None
    for a in cc.get("args") or []:
        if str(a).startswith("--max-restarts="):
            v = str(a).split("=", 1)[1]
            m = re.fullmatch(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", v)
            max_restarts = cvals.get(m.group(1)) if m else v
    if max_restarts is None: errs.append("coordinator: no --max-restarts (dead workers would end the job)")
    elif str(js.get("backoffLimit")) != str(max_restarts):
        errs.append(f"node Job backoffLimit={js.get('backoffLimit')} differs from the coordinator's --max-restarts={max_restarts}")
    elif arg_value(largs, "--max-restarts") != str(max_restarts):
        errs.append(f"psync-launch --max-restarts={arg_value(largs, '--max-restarts')} differs from the coordinator's {max_restarts}")
    # Elastic: the coordinator's --min-world-size is the launchers'
    # --min-nodes x --nproc (both 0, or both the full world: not elastic).
    cmin = arg_value([expand(a, cvals) for a in cc.get("args") or []], "--min-world-size") or "0"
    lmin = arg_value(largs, "--min-nodes") or "0"
    if cmin.isdigit() and lmin.isdigit() and str(ws).isdigit():
        lmin_ws = (int(lmin) or int(nnodes)) * int(nproc)
        if (int(cmin) or int(ws)) != lmin_ws:
            errs.append(f"coordinator --min-world-size={cmin} is not psync-launch --min-nodes={lmin} x --nproc={nproc}")
    rules = (js.get("podFailurePolicy") or {}).get("rules") or []
    def action_for(code):
        for r in rules:
            oe = r.get("onExitCodes") or {}
            if oe.get("containerName") not in (None, wc["name"]): continue
            if oe.get("operator") == "In" and code in (oe.get("values") or []): return r.get("action")
        return "Count"
    for cn in sorted({(r.get("onExitCodes") or {}).get("containerName") for r in rules} - {None}):
        if cn not in [c["name"] for c in containers(wpod)]:
            errs.append(f"podFailurePolicy names container {cn}, which the node pods do not have")
    if action_for(4) != "Ignore": errs.append(f"podFailurePolicy: exit 4 (peer lost) is {action_for(4)}, want Ignore (replace the pod)")
    if action_for(2) != "FailJob": errs.append(f"podFailurePolicy: exit 2 (bad flags) is {action_for(2)}, want FailJob")
    if action_for(3) != "FailJob": errs.append(f"podFailurePolicy: exit 3 (rendezvous failed, job over) is {action_for(3)}, want FailJob")
    for code in (0, 1, 5, 137):
        if action_for(code) != "Count": errs.append(f"podFailurePolicy: exit {code} is {action_for(code)}, want it counted")
    if not any(r.get("action") == "Ignore" and any(c.get("type") == "DisruptionTarget" for c in r.get("onPodConditions") or [])
               for r in rules):
        errs.append("podFailurePolicy: evicted/preempted pods (DisruptionTarget) are not Ignored")
    if wpod.get("restartPolicy") != "Never": errs.append("worker pods: podFailurePolicy needs restartPolicy: Never")
    ckdir = vals.get("PSYNC_CHECKPOINT_DIR")
    mounts = {m["mountPath"]: m["name"] for m in wc.get("volumeMounts") or []}
    vols = {v["name"]: v for v in wpod.get("volumes") or []}
    pvcs = {p["metadata"]["name"] for p in by.get("PersistentVolumeClaim", [])}
    if not ckdir: errs.append("PSYNC_CHECKPOINT_DIR is not set for the workers")
    elif ckdir not in mounts: errs.append(f"workers mount nothing at PSYNC_CHECKPOINT_DIR={ckdir}")
    else:
        claim = (vols.get(mounts[ckdir], {}).get("persistentVolumeClaim") or {}).get("claimName")
        if claim not in pvcs: errs.append(f"the volume at {ckdir} is not a PersistentVolumeClaim of the render (claim {claim})")
    for a in wc.get("args") or []:
        if str(a).startswith("--checkpoint-dir=") and str(a).split("=", 1)[1] not in (ckdir, "$(PSYNC_CHECKPOINT_DIR)"):
            errs.append(f"worker {a} is not the mounted PSYNC_CHECKPOINT_DIR={ckdir}")
    # the dataset: mounted read-only at PSYNC_DATA_DIR
    ddir = vals.get("PSYNC_DATA_DIR")
    dmount = [m for m in wc.get("volumeMounts") or [] if m["mountPath"] == ddir]
    if not ddir: errs.append("PSYNC_DATA_DIR is not set for the node pods")
    elif not dmount: errs.append(f"node pods mount nothing at PSYNC_DATA_DIR={ddir}")
    elif not dmount[0].get("readOnly"): errs.append(f"the data volume at {ddir} is not mounted readOnly")
    else:
        dclaim = (vols.get(dmount[0]["name"], {}).get("persistentVolumeClaim") or {}).get("claimName")
        if dclaim is not None and dclaim not in pvcs: errs.append(f"the data volume's claim {dclaim} is not in the render")
    # /dev/shm: memory-backed, sized (the node's ranks share memory; NCCL's shm transport)
    shm = vols.get(mounts.get("/dev/shm"), {}).get("emptyDir") if mounts.get("/dev/shm") else None
    if not shm or shm.get("medium") != "Memory" or not shm.get("sizeLimit"):
        errs.append("node pods: /dev/shm is not a memory-backed emptyDir with a sizeLimit")
    # device and GPUs: one GPU per local rank
    gpu = "gpu" in os.path.basename(rdir)
    res = wc.get("resources") or {}
    lim, req = res.get("limits") or {}, res.get("requests") or {}
    if gpu:
        if "--device=cuda" not in wkargs: errs.append("gpu: worker flags lack --device=cuda")
        if str(lim.get("nvidia.com/gpu")) != nproc: errs.append(f"gpu: limits nvidia.com/gpu={lim.get('nvidia.com/gpu')} is not --nproc={nproc}")
        if "nvidia.com/gpu" in req and str(req["nvidia.com/gpu"]) != nproc:
            errs.append(f"gpu: requests nvidia.com/gpu={req['nvidia.com/gpu']} is not --nproc={nproc}")
        if "cuda" not in wc.get("image", ""): errs.append(f"gpu: node image {wc.get('image')} is not the CUDA image")
        for k in ("NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "NCCL_DEBUG"):
            if k not in vals: errs.append(f"gpu: {k} is not set")
    else:
        if "--device=cuda" in wkargs or "nvidia.com/gpu" in lim: errs.append("cpu: worker asks for CUDA")
    # NetworkPolicy: selects the coordinator, admits the workers on 29500 only
    pols = [p for p in by.get("NetworkPolicy", []) if all(cl.get(k) == v for k, v in
            (p["spec"].get("podSelector", {}).get("matchLabels") or {}).items()) and p["spec"].get("podSelector", {}).get("matchLabels")]
    def sel_match(selector, labels):
        for k, v in (selector.get("matchLabels") or {}).items():
            if labels.get(k) != v: return False
        for e in selector.get("matchExpressions") or []:
            has = e["key"] in labels
            if e["operator"] == "In" and (not has or labels[e["key"]] not in e["values"]): return False
            if e["operator"] == "NotIn" and has and labels[e["key"]] in e["values"]: return False
            if e["operator"] == "Exists" and not has: return False
            if e["operator"] == "DoesNotExist" and has: return False
        return True
    if not pols: errs.append("no NetworkPolicy selects the coordinator")
    else:
        admits_workers = admits_coordinator_self = admits_all = False
        for p in pols:
            for rule in p["spec"].get("ingress") or []:
                frm = rule.get("from")
                if not frm: admits_all = True
                for f in frm or []:
                    ps = f.get("podSelector")
                    if ps is not None and sel_match(ps, wl): admits_workers = True
                    if ps == {} or "ipBlock" in f: admits_all = True
        if not admits_workers: errs.append("NetworkPolicy does not admit the worker pods")
        if admits_all: errs.append("NetworkPolicy admits every pod / address")
    errs += metrics_errors(dep, cc, svc, pols, wl)
    # the node pods accept traffic (Gloo/NCCL, any port) from the other node pods only
    npols = [p for p in by.get("NetworkPolicy", []) if p["spec"].get("podSelector", {}).get("matchLabels")
             and sel_match(p["spec"]["podSelector"], wl)]
    if not npols: errs.append("no NetworkPolicy selects the node pods")
    else:
        peer_ok = False
        for p in npols:
            for rule in p["spec"].get("ingress") or []:
                if not rule.get("from"): errs.append(f"NetworkPolicy {p['metadata']['name']}: a rule admits every source")
                for f in rule.get("from") or []:
                    ps = f.get("podSelector")
                    if ps == {} or "ipBlock" in f or "namespaceSelector" in f:
                        errs.append(f"NetworkPolicy {p['metadata']['name']}: admits more than the node pods")
                    elif ps is not None and sel_match(ps, wl) and not rule.get("ports"): peer_ok = True
        if not peer_ok: errs.append("NetworkPolicy: node pods do not admit each other on every port (Gloo/NCCL)")
    if errs:
        for e in errs: bad(f"{tag}: {e}")
    else:
        ok(f"{tag}: coordinator probes/Service, one pod per node ({nnodes} x psync-launch --nproc={nproc} = WORLD_SIZE {ws}, node rank = completion index, headless Service), restarts (--max-restarts={max_restarts} = backoffLimit, exit 4 replaced, 2/3 fail), checkpoints PVC at {ckdir}, data at {ddir}, token Secret, NetworkPolicies, {'GPU' if gpu else 'CPU'} settings, /metrics annotated for Prometheus")

# ------------------------------------------------ metrics: compose and the Grafana dashboard
coord = (compose.get("services") or {}).get("coordinator") or {}
cargs = [str(a) for a in coord.get("command") or []]
cport = arg_value(cargs, "--metrics-port")
if cport is None or arg_value(cargs, "--metrics-host") != "0.0.0.0" or cport not in [str(e) for e in coord.get("expose") or []]:
    bad(f"docker-compose.yml: the coordinator does not serve /metrics on 0.0.0.0 and expose its port ({cport})")
else:
    ok(f"docker-compose.yml: coordinator serves and exposes /metrics on {cport}")
served = None
mpath = os.path.join(helpdir, "metrics.txt")
if os.path.exists(mpath):
    served = set()
    for name, typ in re.findall(r"(?m)^# TYPE (\S+) (\S+)$", open(mpath).read()):
        served |= {name + s for s in ("_bucket", "_sum", "_count")} if typ == "histogram" else {name}
dashboards = sorted(glob.glob(os.path.join(root, "deploy/grafana/*.json")))
if not dashboards: bad("deploy/grafana/ holds no dashboard")
WANTED = {"psync_plans_total", "psync_rank_step_seconds", "psync_rank_loss", "psync_rank_tokens_per_second",
          "psync_step_slowest_vs_median_ratio", "psync_restarts_total", "psync_rank_lost_total",
          "psync_plan_latency_seconds_bucket", "psync_refused_calls_total"}
for db in dashboards:
    rel = os.path.relpath(db, root)
    try:
        d = json.load(open(db))
    except ValueError as e:
        bad(f"{rel}: not JSON: {e}"); continue
    exprs = [t.get("expr", "") for p in d.get("panels") or [] for t in p.get("targets") or []]
    used = {m for e in exprs for m in re.findall(r"\bpsync_[a-z0-9_]+", e)}
    errs = [f"no panel queries {m}" for m in sorted(WANTED - used)]
    if any(not e for e in exprs) or not exprs: errs.append("a panel target without expr")
    ids = [p.get("id") for p in d.get("panels") or []]
    if len(ids) != len(set(ids)): errs.append("panel ids repeat")
    if served is not None: errs += [f"queries {m}, which the coordinator does not serve" for m in sorted(used - served)]
    if errs:
        for e in errs: bad(f"{rel}: {e}")
    else:
        ok(f"{rel}: {len(exprs)} queries over {len(used)} psync metrics" +
           (", all served by the coordinator" if served is not None else " (not checked against a coordinator: binaries not given)"))
    if served is None:
        print(f"SKIP: {rel}: metric names not checked against a running coordinator (binaries not given)"); skips += 1

# ------------------------------------------------ Dockerfiles
ignores = []
if os.path.exists(os.path.join(root, ".dockerignore")):
    ignores = [l.strip() for l in open(os.path.join(root, ".dockerignore")) if l.strip() and not l.startswith("#")]
def ignored(rel):
    hit = False
    parts = rel.split("/")
    for pat in ignores:
        neg = pat.startswith("!"); pat = pat.lstrip("!").rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:])):
                hit = not neg; break
    return hit
for df in dockerfiles:
    rel = os.path.relpath(df, root)
    text = open(df).read().replace("\\\n", " ")
    errs = []
    stages = re.split(r"(?m)^FROM\s", text)
    final = stages[-1]
    # ARG defaults stand in for ${NAME} in COPY sources.
    argdefs = dict(re.findall(r"(?m)^ARG\s+(\w+)=(\S*)", text))
    for m in re.finditer(r"(?m)^COPY\s+(?!--from)(.*)$", text):
        srcs = [s for s in m.group(1).split() if not s.startswith("--")][:-1]
        for s in srcs:
            s = re.sub(r"\$\{(\w+)\}", lambda a: argdefs.get(a.group(1), a.group(0)), s)
            s = s.rstrip("/") or "."
            if s != "." and not os.path.exists(os.path.join(root, s)): errs.append(f"COPY source {s} does not exist")
            elif s != "." and ignored(s): errs.append(f"COPY source {s} is excluded by .dockerignore")
    # An image on top of psync's (Dockerfile.your-model: FROM ${PSYNC_IMAGE}) inherits its
    # user, entrypoint, runtime packages and programs; it must not undo them.
    if re.match(r"\$\{PSYNC_IMAGE\}", final.strip()):
        users = re.findall(r"(?m)^USER\s+(\S+)", final)
        if users and users[-1].split(":")[0] in ("root", "0"): errs.append("final stage switches to root")
        if re.search(r"(?m)^ENTRYPOINT", final): errs.append("final stage replaces psync's entrypoint")
        if "PSYNC_WORKER_BIN" not in final: errs.append("final stage does not set PSYNC_WORKER_BIN")
        if errs:
            for e in errs: bad(f"{rel}: {e}")
        else:
            ok(f"{rel}: on psync's image: its user and entrypoint kept, PSYNC_WORKER_BIN set, COPY sources present")
        continue
    users = re.findall(r"(?m)^USER\s+(\S+)", final)
    if not users or users[-1].split(":")[0] in ("root", "0"): errs.append("final stage does not run as a non-root USER")
    if not re.search(r'(?m)^ENTRYPOINT\s+\["/usr/bin/tini",\s*"--",\s*"/usr/local/bin/psync-entrypoint"\]', final):
        errs.append("final stage ENTRYPOINT is not tini + psync-entrypoint")
    if "runtime-packages.txt" not in final: errs.append("runtime stage does not install deploy/docker/runtime-packages.txt")
    # psync-launch (the Kubernetes node pods) runs psync-worker, psyncctl and,
    # with --nproc > 1, psync-relay from the same image.
    built = re.search(r"cmake --build [^\n]*?--target\s+([^\n&]*)", text)
    installed = re.search(r"for b in ([^;]*);", text)
    for b in ("psync-coordinator", "psync-worker", "psyncctl", "psync-launch", "psync-relay"):
        if not built or b not in built.group(1).split() or not installed or b not in installed.group(1).split():
            errs.append(f"does not build and install {b}")
    # BuildKit pulls a `# syntax=` frontend from a registry; the images must
    # build from the Debian bases alone (scripts/compose-test.sh builds offline).
    if re.search(r"(?m)\A(#.*\n)*#\s*syntax\s*=", open(df).read()): errs.append("has a '# syntax=' directive (a frontend image pull)")
    if errs:
        for e in errs: bad(f"{rel}: {e}")
    else:
        ok(f"{rel}: COPY sources present and not dockerignored, non-root USER, tini entrypoint, no syntax directive")
for needed in ("scripts/install-deps.sh", "deploy/docker/entrypoint.sh", "deploy/docker/runtime-packages.txt", "CMakeLists.txt"):
    if ignored(needed): bad(f".dockerignore excludes {needed}, which the image build needs")

# ------------------------------------------------ flags against --help
helps = {}
def norm(n): return n.replace("-", "_")
for b in BINARIES:
    p = os.path.join(helpdir, b)
    if os.path.exists(p): helps[b] = open(p, errors="replace").read()
if not invocations:
    bad("no psync invocations found in deploy/ (scanner broken?)")
by_bin = {}
for where, b, args in invocations:
    by_bin.setdefault(b, []).append((where, args))
print(f"INFO: psync invocations found: " + ", ".join(f"{b} x{len(v)}" for b, v in sorted(by_bin.items())))
for b, uses in sorted(by_bin.items()):
    if b not in helps:
        print(f"SKIP: flags of {b} ({len(uses)} uses) not checked: binary not given")
        skips += 1
        continue
    # The contract spells flags with dashes (--world-size); Abseil registers
    # world_size and the binaries accept both, so the names are compared with
    # '-' == '_'. (That the dashed spelling really parses is exercised by the
    # netns test, which runs the binaries with the same spellings.)
    known = {norm(m) for m in re.findall(r"--([A-Za-z][A-Za-z0-9_-]*)", helps[b])}
    words = set(re.findall(r"[A-Za-z][A-Za-z0-9_-]*", helps[b]))
    errs, nflags = [], 0
    for where, args in uses:
        positional_ok = b == "psyncctl"
        for a in args:
            if a.startswith("--") and len(a) > 2:
                nflags += 1
                name = norm(a[2:].split("=", 1)[0])
                if name in known or (name.startswith("no") and name[2:] in known): continue
                errs.append(f"{where}: {b} does not accept --{a[2:].split('=', 1)[0]}")
            elif positional_ok and re.fullmatch(r"[a-z]+", a):
                if a not in words: errs.append(f"{where}: psyncctl has no command '{a}'")
                positional_ok = False   # only the first positional is the command
    if errs:
        for e in errs: bad(e)
    else:
        ok(f"{b}: all {nflags} flags in {len(uses)} invocations are in its --help")
open(countfile, "w").write(f"{passes} {failures} {skips}\n")
PYEOF
pyrc=$?
if read -r p f s <"$work/pycount" 2>/dev/null; then
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
else
  bad "manifest/flag checker crashed (rc=$pyrc)"
fi

# ---------------------------------------------------------------- 6. entrypoint + runtime libraries
if ((have_bins)); then
  ep=deploy/docker/entrypoint.sh
  # (Abseil's --help exits 1: judge by the output, which must be psyncctl's usage.)
  out=$(timeout 20 sh "$ep" psyncctl --help 2>&1)
  if grep -q -- '--coordinator' <<<"$out" && grep -q 'shutdown' <<<"$out"; then ok "entrypoint dispatches psyncctl"
  else bad "entrypoint: psyncctl --help through $ep failed: $(head -n3 <<<"$out")"; fi
  if [[ $(env -u RANK JOB_COMPLETION_INDEX=3 sh "$ep" sh -c 'echo "$RANK"') == 3 ]]; then ok "entrypoint: RANK from JOB_COMPLETION_INDEX"
  else bad "entrypoint does not set RANK from JOB_COMPLETION_INDEX"; fi
  if [[ $(env -u PSYNC_COORDINATOR MASTER_ADDR=c MASTER_PORT=1 sh "$ep" sh -c 'echo "$PSYNC_COORDINATOR"') == c:1 ]]; then
    ok "entrypoint: PSYNC_COORDINATOR from MASTER_ADDR:MASTER_PORT"
  else bad "entrypoint does not set PSYNC_COORDINATOR from MASTER_ADDR/MASTER_PORT"; fi

  if command -v dpkg >/dev/null && command -v apt-cache >/dev/null && command -v ldd >/dev/null; then
    listed=$(grep -v '^#' deploy/docker/runtime-packages.txt | tr -s ' \n' ' ')
    # shellcheck disable=SC2086
    closure=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
      --no-replaces --no-enhances $listed 2>/dev/null | grep -v '^ ' | sed 's/:.*//' | sort -u)
    unknown=()
    for p in $listed; do apt-cache show "$p" >/dev/null 2>&1 || unknown+=("$p"); done
    if ((${#unknown[@]})); then bad "runtime-packages.txt names packages apt does not know: ${unknown[*]}"; fi
    base="libc6 libstdc++6 libgcc-s1 zlib1g libgomp1"
    missing=() notdeb=()
    bins=()
    for b in psync-coordinator psync-worker psyncctl psync-launch; do f=$(find_bin "$b") && bins+=("$f"); done
    libs=$(for f in "${bins[@]}"; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u)
    # One dpkg -S for all of them, each under its /lib and /usr/lib spelling (usrmerge).
    declare -A owner=()
    cands=()
    while read -r lib; do
      [[ -n "$lib" ]] || continue
      cands+=("$lib" "$(readlink -f "$lib")")
      case "$lib" in /lib/*) cands+=("/usr$lib") ;; /usr/lib/*) cands+=("${lib#/usr}") ;; esac
    done <<<"$libs"
    while IFS= read -r line; do
      owner["${line##*: }"]=$(cut -d: -f1 <<<"${line%%,*}")
    done < <(dpkg -S "${cands[@]}" 2>/dev/null)
    while read -r lib; do
      [[ -n "$lib" ]] || continue
      case "$lib" in /usr/local/cuda*|/opt/nccl/*) continue ;; esac   # copied by Dockerfile.cuda
      case "$lib" in */libpsync.so*) continue ;; esac   # psync's own library, copied with the programs
      real=$(readlink -f "$lib")
      pkg=${owner[$lib]:-${owner[/usr$lib]:-${owner[${lib#/usr}]:-${owner[$real]:-}}}}
      if [[ -z "$pkg" ]]; then notdeb+=("$lib"); continue; fi
      if ! grep -qxF "$pkg" <<<"$closure" && ! grep -qw -- "$pkg" <<<"$base"; then missing+=("$pkg ($lib)"); fi
    done <<<"$libs"
    if ((${#notdeb[@]})); then bad "libraries from no Debian package and not CUDA: ${notdeb[*]}"; fi
    if ((${#missing[@]})); then bad "deploy/docker/runtime-packages.txt misses: ${missing[*]}"
    else ok "runtime-packages.txt covers the $(wc -l <<<"$libs") shared libraries of the binaries (ldd + dpkg -S)"; fi
  else
    skip "dpkg/apt-cache/ldd missing: runtime package list not checked"
  fi
fi

finish
