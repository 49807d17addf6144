#!/usr/bin/env bash
# The docker-compose integration test (ctest compose_integration): builds the
# CPU image from deploy/docker/Dockerfile and runs deploy/compose/docker-compose.yml
# for real, in these scenarios:
#   shutdown            the runner (check-job.sh) checks status with psyncctl and
#                       shuts the job down: every worker exits 0 after the same
#                       iteration, the coordinator reports FINISHED, rank 0's
#                       weights, its final checkpoint and both summaries are on
#                       the psync-data volume
#   worker-killed       psync-worker in worker-1 killed (SIGKILL) mid-run: Docker
#                       starts worker-1 again, worker-0 stays up and rejoins
#                       generation 2 in place (live recovery, restarts 1/N),
#                       worker-1 is healed from it; the runner then shuts the
#                       job down and it ends FINISHED as in `shutdown`
#   worker-killed-restart  the same with PSYNC_RECOVERY=restart: worker-0 exits 4
#                       and is started again too, generation 2 runs from rank
#                       0's checkpoint
#   worker-killed-no-restart  the same without restarts (PSYNC_MAX_RESTARTS=0
#                       PSYNC_WORKER_RESTART=no), `docker kill` of worker-1:
#                       worker-0 exits 4 naming rank 1, the coordinator reports
#                       ABORTED with rank 1 LOST, no weights are saved
#   coordinator-killed  `docker kill` of the coordinator mid-run, `docker start` once
#                       both workers lost it: they ride through and re-register (no
#                       worker restarted), status counts 1 coordinator restart; the
#                       runner then shuts the job down as in `shutdown`
#   coordinator-restarted  psync-coordinator killed (SIGKILL) inside its container:
#                       Docker starts it again, both workers re-register with it
#                       (no worker restarted), generation 1 runs on and status counts
#                       1 coordinator restart (its --state-dir journal); the runner
#                       then shuts the job down as in `shutdown`
#   nodes-worker-killed docker-compose.nodes.yml (two node containers, psync-launch
#                       --nnodes=2 --nproc=2 each, world 4): psync-worker in node-1
#                       killed; node-1's launcher replaces it alone, the three other
#                       ranks rejoin generation 2 in place; the runner then
#                       shuts the job down: both launchers exit 0, four summaries agree
#   deb                 psync's Debian package (cpack, made in the image's build stage)
#                       installed with apt into a clean debian:bookworm-slim container:
#                       psync-worker --help, and examples/ built against it with
#                       examples/custom_loop run on 2 ranks to a shutdown
#                       (tests/integration/package/deb_smoke.sh); then
#                       deploy/docker/Dockerfile.your-model builds examples/your_model
#                       on top of the image, and its `psync-worker` is that program
# Every scenario ends with `docker-compose down -v` and a check that none of its
# containers, networks or volumes is left. The scenarios may use the whole
# budget less a teardown margin (scenario_bound); deb, which needs about 150 s,
# is left out when less is left, and then the test says SKIP, never PASS.
#
# Usage (as root, or as a user of a running dockerd once the base images exist):
#   scripts/compose-test.sh [shutdown|worker-killed|worker-killed-restart|worker-killed-no-restart|coordinator-killed|coordinator-restarted|nodes-worker-killed|deb ...]
#   (default: all of them)
# Exit: 0 passed, 1 failed, 77 skipped (Docker cannot run here, or the image was
# not ready within the time budget: the reason is printed).
#
# What it sets up, and undoes:
#   * dockerd: used if it answers; otherwise, as root, started here and stopped at
#     the end, and the host's iptables/ip6tables rules, IP forwarding and bridge
#     netfilter sysctls and docker0 link are put back as they were before it.
#   * Base images debian:bookworm and debian:bookworm-slim (the Dockerfile's FROM):
#     used if present; otherwise made without a registry by
#     `debootstrap --variant=minbase bookworm` + `docker import`. The root
#     filesystem tarballs are kept in $PSYNC_DOCKER_CACHE (default
#     /var/cache/psync/docker) so a pruned image is re-imported in seconds.
#     Delete them and the two images to refresh the base.
#   * The image ${PSYNC_IMAGE:-psync:cpu} (classic builder, DOCKER_BUILDKIT=0), and
#     its build stage as ${PSYNC_IMAGE}-build so the dependency and compile
#     layers stay cached; superseded psync layers are pruned (label io.psync.stage).
#     Images stay; containers, networks and volumes do not.
# Network: a container first tries a TCP connection to the mirror (or to
# $http_proxy): over Docker's default bridge (apt-get inside then reaches the
# mirror through the host's DNS), else with --network=host, which the build
# then uses; http(s)_proxy/no_proxy are passed on as build args. Where neither
# reaches it and the build needs apt, the test skips.
# Environment: PSYNC_IMAGE, PSYNC_DOCKER_CACHE, PSYNC_DEBIAN_MIRROR
# (default http://deb.debian.org/debian), PSYNC_DEBIAN_SECURITY_MIRROR
# (default http://deb.debian.org/debian-security), PSYNC_BUILD_JOBS (the
# Dockerfile's PSYNC_JOBS; default: Ninja's), PSYNC_COMPOSE_TEST_BUDGET_S (the
# whole run's time budget, default 2700 s) and PSYNC_COMPOSE_TEST_RESERVE_S (the
# part kept for the scenarios, default 300 s).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

SKIP=77
image=${PSYNC_IMAGE:-psync:cpu}
cache=${PSYNC_DOCKER_CACHE:-/var/cache/psync/docker}
mirror=${PSYNC_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${PSYNC_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
compose_file=deploy/compose/docker-compose.yml
py=/usr/bin/python3
t_start=$SECONDS

# The whole run is bounded by a budget (ctest sets one that keeps CI within
# its time; ctest's TIMEOUT is a little more). The slow preparation steps
# (debootstrap, the image build) get what the budget has left after $reserve
# seconds kept for the scenarios and the teardown. A preparation that does not
# fit (a cold run on a slow or loaded host) is a SKIP that says so, never a
# PASS; the base image tarballs and the build steps finished so far are kept
# (a cut-off step, e.g. the compile, starts over), so the next run goes on
# from there. The daemon cancels a build whose client is gone, and
# --force-rm removes its container.
budget=${PSYNC_COMPOSE_TEST_BUDGET_S:-2700}
reserve=${PSYNC_COMPOSE_TEST_RESERVE_S:-300}
bound() {  # bound N: N seconds, or what the budget has left for this step (fails when nothing)
  local left=$((budget - (SECONDS - t_start) - reserve))
  ((left > 0)) || return 1
  echo $((left < $1 ? left : $1))
}
# scenario_bound N: the same for a step of a scenario, which may use the
# reserve itself (less a teardown margin): the reserve is kept *for* them.
teardown_margin=30
scenario_bound() {
  local left=$((budget - (SECONDS - t_start) - teardown_margin))
  ((left > 0)) || return 1
  echo $((left < $1 ? left : $1))
}
out_of_time() {  # out_of_time WHAT
  skip "$1 did not finish within the ${budget} s budget (PSYNC_COMPOSE_TEST_BUDGET_S, ${reserve} s of it kept for the scenarios): a cold run (no images) or a recompile of psync needs more time on this host. The steps finished so far are cached (the cut-off one starts over); to finish, run scripts/compose-test.sh by itself (default budget 2700 s) or with a larger PSYNC_COMPOSE_TEST_BUDGET_S"
}

# Removes a debootstrap target: first whatever an interrupted debootstrap left
# mounted below it (proc, sys, a bind-mounted /dev), then the files, never
# crossing into another file system.
remove_rootfs() {
  local m
  for m in $(awk -v r="$1/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do umount -l "$m"; done
  rm -rf --one-file-system "$1"
}

log()  { printf 'compose-test: [%4ds] %s\n' $((SECONDS - t_start)) "$*"; }
skip() { log "SKIP: $*"; exit "$SKIP"; }
die()  { log "FAIL: $*"; exit 1; }

all_scenarios=(shutdown worker-killed worker-killed-restart worker-killed-no-restart coordinator-killed coordinator-restarted nodes-worker-killed deb)
scenarios=()
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    shutdown|worker-killed|worker-killed-restart|worker-killed-no-restart|coordinator-killed|coordinator-restarted|nodes-worker-killed|deb) scenarios+=("$a") ;;
    *) echo "compose-test: unknown scenario '$a' (want: ${all_scenarios[*]})" >&2; exit 2 ;;
  esac
done
((${#scenarios[@]})) || scenarios=("${all_scenarios[@]}")

work=$(mktemp -d /tmp/psync-compose-test.XXXXXX)
dockerd_pid=""        # set when this script started dockerd (then it stops it)
c_coord="" c_w0="" c_w1=""   # container ids of the running scenario (up_job)
project=""            # the compose project of the running scenario
projects_up=()        # projects not torn down yet (the EXIT trap tears these down)

# ---------------------------------------------------------------- teardown
# compose SECONDS ARGS...: docker-compose on the current project, bounded.
compose() {
  timeout "$1" "${compose_cmd[@]}" -f "$compose_file" -p "$project" "${@:2}"
}

# Everything a compose project left (containers, networks, volumes), one per line.
leftovers() {
  local f="label=com.docker.compose.project=$1"
  { docker ps -aq --filter "$f" | sed 's/^/container /'
    docker network ls -q --filter "$f" | sed 's/^/network /'
    docker volume ls -q --filter "$f" | sed 's/^/volume /'; } 2>/dev/null
}

teardown_project() {  # down -v, then remove by label whatever down missed
  local p=$1
  project=$p compose 120 down -v --remove-orphans -t 5 >>"$work/teardown.log" 2>&1
  local f="label=com.docker.compose.project=$p" ids
  ids=$(docker ps -aq --filter "$f" 2>/dev/null); [[ -z "$ids" ]] || docker rm -f $ids >/dev/null 2>&1
  ids=$(docker network ls -q --filter "$f" 2>/dev/null); [[ -z "$ids" ]] || docker network rm $ids >/dev/null 2>&1
  ids=$(docker volume ls -q --filter "$f" 2>/dev/null); [[ -z "$ids" ]] || docker volume rm -f $ids >/dev/null 2>&1
}

stop_dockerd() {
  [[ -n "$dockerd_pid" ]] || return 0
  log "stopping the dockerd this test started (pid $dockerd_pid)"
  kill -TERM "$dockerd_pid" 2>/dev/null
  local i
  for ((i = 0; i < 60; i++)); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$dockerd_pid" 2>/dev/null; then
    log "dockerd did not stop within 30 s: SIGKILL"; kill -KILL "$dockerd_pid" 2>/dev/null
    for ((i = 0; i < 20; i++)); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
  fi
  dockerd_pid=""
  restore_host_net
}

# ---------------------------------------------------------------- host network state
# A dockerd started here adds its chains and NAT rules, may set the FORWARD
# policy to DROP, turns on IP forwarding and bridge netfilter, and creates
# docker0; it leaves all of that behind when it stops. So before starting it
# the script saves the iptables/ip6tables rules, those sysctls and whether
# docker0 exists, and after stopping it puts them back (what another program
# changed in them meanwhile is undone too). A dockerd that was running already
# is left alone, and so is the firewall then.
net_saved=0 had_docker0=1
save_host_net() {
  if ! command -v iptables-save >/dev/null || ! command -v iptables-restore >/dev/null; then
    log "no iptables-save/iptables-restore: the firewall rules dockerd adds stay after the test"
  elif iptables-save >"$work/iptables.before" 2>/dev/null; then
    command -v ip6tables-save >/dev/null && ip6tables-save >"$work/ip6tables.before" 2>/dev/null \
      || rm -f "$work/ip6tables.before"
  else
    rm -f "$work/iptables.before"
  fi
  local k
  for k in net/ipv4/ip_forward net/bridge/bridge-nf-call-iptables net/bridge/bridge-nf-call-ip6tables; do
    [[ -r /proc/sys/$k ]] && echo "$k $(cat "/proc/sys/$k")"
  done >"$work/sysctl.before"
  ip link show docker0 >/dev/null 2>&1 && had_docker0=1 || had_docker0=0
  net_saved=1
}

# restore_rules FAMILY SAVED: FAMILY-restore of the saved rules; a table that
# did not exist then (dockerd created it) is restored empty.
restore_rules() {
  local fam=$1 saved=$2 t
  [[ -f "$saved" ]] || return 0
  { cat "$saved"
    for t in $("$fam-save" 2>/dev/null | sed -n 's/^\*//p'); do
      grep -qx "\*$t" "$saved" && continue
      echo "*$t"
      "$fam" -t "$t" -S 2>/dev/null | awk '$1 == "-P" {printf ":%s ACCEPT [0:0]\n", $2}'
      echo COMMIT
    done; } >"$work/$fam.restore"
  "$fam-restore" <"$work/$fam.restore" 2>>"$work/restore.log"
}

restore_host_net() {
  ((net_saved)) || return 0
  net_saved=0
  local ok=1 k v
  restore_rules iptables "$work/iptables.before" || ok=0
  restore_rules ip6tables "$work/ip6tables.before" || ok=0
  while read -r k v; do
    [[ $(cat "/proc/sys/$k" 2>/dev/null) == "$v" ]] || echo "$v" >"/proc/sys/$k" 2>>"$work/restore.log" || ok=0
  done <"$work/sysctl.before"
  if ((had_docker0 == 0)) && ip link show docker0 >/dev/null 2>&1; then
    ip link del docker0 2>>"$work/restore.log" || ok=0
  fi
  if ((ok)); then log "host firewall rules, forwarding/bridge-netfilter sysctls and links restored as before dockerd"
  else log "could not restore all of the host's network state:"; sed 's/^/  restore: /' "$work/restore.log"; fi
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if ((${#projects_up[@]})) && docker info >/dev/null 2>&1; then
    local p; for p in "${projects_up[@]}"; do teardown_project "$p"; done
  fi
  stop_dockerd
  if ((rc == 0 || rc == SKIP)); then rm -rf "$work"; else echo "compose-test: logs kept in $work" >&2; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- docker
command -v docker >/dev/null || skip "no docker CLI (Debian: apt-get install docker.io)"
if command -v docker-compose >/dev/null; then compose_cmd=(docker-compose)
elif docker compose version >/dev/null 2>&1; then compose_cmd=(docker compose)
else skip "neither docker-compose nor the docker compose plugin is installed (Debian: apt-get install docker-compose)"; fi
[[ -x "$py" ]] || skip "$py is needed to read the job's JSON and safetensors output"

if ! timeout 20 docker info >/dev/null 2>&1; then
  [[ $(id -u) -eq 0 ]] || skip "no Docker daemon answers and starting one needs root"
  command -v dockerd >/dev/null || skip "no Docker daemon answers and dockerd is not installed (apt-get install docker.io)"
  log "starting dockerd (log: $work/dockerd.log)"
  save_host_net
  # Its own session, so a Ctrl-C meant for this script does not stop it
  # before the teardown has run. setsid forks when it leads a process group,
  # so the daemon's pid comes from its pid file, not from $!.
  setsid dockerd --pidfile "$work/dockerd.pid" >"$work/dockerd.log" 2>&1 &
  launcher=$!
  for ((i = 0; i < 120; i++)); do
    [[ -z "$dockerd_pid" && -s "$work/dockerd.pid" ]] && dockerd_pid=$(cat "$work/dockerd.pid")
    timeout 5 docker info >/dev/null 2>&1 && break
    if [[ -n "$dockerd_pid" ]]; then kill -0 "$dockerd_pid" 2>/dev/null || break; fi
    sleep 0.5
  done
  [[ -z "$dockerd_pid" && -s "$work/dockerd.pid" ]] && dockerd_pid=$(cat "$work/dockerd.pid")
  if ! timeout 5 docker info >/dev/null 2>&1; then
    tail -n 15 "$work/dockerd.log" | sed 's/^/  dockerd: /'
    [[ -n "$dockerd_pid" ]] || dockerd_pid=$launcher
    stop_dockerd
    skip "dockerd did not start here (see its log above)"
  fi
fi
log "docker $(docker version --format '{{.Server.Version}}' 2>/dev/null), ${compose_cmd[*]} $("${compose_cmd[@]}" version --short 2>/dev/null)"

# ---------------------------------------------------------------- base images
# Writes the files the official Debian images carry for apt (no translations,
# compressed indexes, no package cache kept) and the full Debian sources.
configure_rootfs() {
  local r=$1
  rm -f "$r/etc/apt/sources.list"
  cat >"$r/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  echo 'Acquire::Languages "none";' >"$r/etc/apt/apt.conf.d/docker-no-languages"
  echo 'Acquire::GzipIndexes "true";' >"$r/etc/apt/apt.conf.d/docker-gzip-indexes"
  cat >"$r/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$r"/var/lib/apt/lists/* "$r"/var/cache/apt/archives/*.deb "$r"/var/cache/apt/*.bin "$r"/var/log/*.log
  : >"$r/etc/resolv.conf"; : >"$r/etc/hostname"   # Docker mounts its own
}

# The -slim flavour: documentation, man pages and locales left out, now and
# for packages installed later (dpkg path excludes), as in debian:*-slim.
slim_rootfs() {
  local r=$1
  cat >"$r/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
EOF
  find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null
  rm -rf "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/usr/share/man/* "$r"/usr/share/groff/* "$r"/usr/share/lintian/*
}

# import_base TAG SOURCE: docker import of a root filesystem tarball (a file,
# or - for stdin) as debian:TAG, unless that image exists already.
import_base() {
  docker image inspect "debian:$1" >/dev/null 2>&1 && { [[ "$2" != - ]] || cat >/dev/null; return 0; }
  docker import --change 'CMD ["bash"]' --change 'LABEL io.psync.base=debootstrap-minbase' \
    "$2" "debian:$1" >/dev/null || return 1
  log "imported debian:$1 ($(docker image inspect -f '{{.Size}}' "debian:$1" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# debootstrap, then both images imported while their tarballs are written.
make_base_images() {
  [[ $(id -u) -eq 0 ]] || skip "base images debian:bookworm(-slim) are missing and debootstrap needs root"
  command -v debootstrap >/dev/null || skip "base images are missing and debootstrap is not installed (apt-get install debootstrap)"
  mkdir -p "$cache" || skip "cannot create the cache directory $cache"
  local r="$cache/rootfs.$$" limit t0=$SECONDS tag
  remove_rootfs "$r"
  limit=$(bound 1200) || out_of_time "debootstrap of the base images"
  log "debootstrap --variant=minbase bookworm from $mirror (log: $work/debootstrap.log)"
  timeout "$limit" debootstrap --variant=minbase bookworm "$r" "$mirror" >"$work/debootstrap.log" 2>&1
  local drc=$?
  if ((drc != 0)); then
    tail -n 15 "$work/debootstrap.log" | sed 's/^/  debootstrap: /'
    remove_rootfs "$r"
    ((drc == 124)) && out_of_time "debootstrap of the base images"
    skip "debootstrap of Debian bookworm from $mirror failed (see above): no base image can be made here"
  fi
  log "debootstrap done in $((SECONDS - t0)) s"
  configure_rootfs "$r"
  for tag in bookworm bookworm-slim; do
    [[ $tag == bookworm-slim ]] && slim_rootfs "$r"
    tar -C "$r" --numeric-owner -cf - . | tee "$cache/$tag.tar.tmp" | import_base "$tag" - \
      && mv "$cache/$tag.tar.tmp" "$cache/$tag.tar" \
      || { remove_rootfs "$r"; rm -f "$cache/$tag.tar.tmp"; die "cannot import or keep debian:$tag"; }
  done
  remove_rootfs "$r"
  log "base images and their tarballs in $cache made in $((SECONDS - t0)) s"
}

ensure_base_images() {
  local tag missing=0
  for tag in debian:bookworm debian:bookworm-slim; do docker image inspect "$tag" >/dev/null 2>&1 || missing=1; done
  if ((missing == 0)); then log "base images debian:bookworm, debian:bookworm-slim present"; return; fi
  if [[ -s "$cache/bookworm.tar" && -s "$cache/bookworm-slim.tar" ]]; then
    for tag in bookworm bookworm-slim; do
      import_base "$tag" "$cache/$tag.tar" || die "docker import $cache/$tag.tar failed"
    done
  else
    make_base_images
  fi
}


# ---------------------------------------------------------------- image build
# One `docker build`; its output (with seconds since the start) goes to $2.
docker_build() {
  local out=$1; shift
  local t0=$SECONDS limit
  # No cap of its own: a compile on a loaded host may take most of the budget.
  limit=$(bound "$budget") || return 124
  # --force-rm: a failed or cut-off step leaves no intermediate container.
  DOCKER_BUILDKIT=0 timeout "$limit" docker build --force-rm "$@" . 2>&1 \
    | while IFS= read -r line; do printf '[%4ds] %s\n' $((SECONDS - t0)) "$line"; done >>"$out"
  return "${PIPESTATUS[0]}"
}

# Prints the Dockerfile steps of build log $1 that took 2 s or more.
step_times() {
  awk -v what="$2" '
    match($0, /^\[ *[0-9]+s\]/) { t = substr($0, 2, RLENGTH - 3) + 0
      if ($0 ~ /^\[ *[0-9]+s\] Step [0-9]+\/[0-9]+ :/) { flush(); step = substr($0, RLENGTH + 2); t0 = t } }
    function flush() { if (step != "" && t - t0 >= 2) printf "  %s: %4d s  %s\n", what, t - t0, substr(step, 1, 90) }
    END { flush() }' "$1"
}

network_failure() {
  grep -Eq 'Temporary failure resolving|Could not resolve|Failed to fetch|Unable to connect|Could not connect|Connection timed out|Network is unreachable' "$1"
}

# Where apt in a build container must connect: the proxy if one is set, else
# the mirror. Prints "HOST PORT".
apt_endpoint() {
  local u=${http_proxy:-${HTTP_PROXY:-$mirror}} port=80
  [[ $u == https://* ]] && port=443
  u=${u#*://}; u=${u#*@}; u=${u%%/*}
  [[ $u == *:* ]] && port=${u##*:} && u=${u%:*}
  echo "$u $port"
}

# Picks the network for the build: Docker's bridge if a container there
# reaches the apt endpoint (a TCP connect, a few seconds), else the host's
# network if that does; else the bridge, and the build can only succeed if
# its apt layers are cached. Sets build_net and net_ok.
choose_build_network() {
  local host port net
  read -r host port < <(apt_endpoint)
  for net in bridge host; do
    if timeout 30 docker run --rm --network="$net" debian:bookworm \
        timeout 15 bash -c 'exec 3<>"/dev/tcp/$0/$1"' "$host" "$port" >/dev/null 2>&1; then
      build_net=$net net_ok=1
      [[ $net == bridge ]] || log "a container on Docker's bridge cannot reach $host:$port (DNS or NAT); building with --network=host"
      return
    fi
  done
  build_net=bridge net_ok=0
  log "no container reaches $host:$port (bridge or host network): the build works only where its apt steps are cached"
}

# After a cut-off build: waits (60 s at most) until the daemon has removed the
# container of the cancelled step, then removes what is left. A build step's
# container is one created since the build began (not in $1, the ids before)
# that runs `/bin/sh -c` (how the classic builder runs RUN). Stopping dockerd
# at once would leave it behind, Dead.
reap_build_containers() {
  local before=$1 id i left=()
  for ((i = 0; i < 60; i++)); do
    left=()
    for id in $(docker ps -aq --no-trunc 2>/dev/null); do
      grep -qx "$id" <<<"$before" && continue
      [[ $(docker inspect -f '{{.Path}} {{index .Args 0}}' "$id" 2>/dev/null) == "/bin/sh -c" ]] && left+=("$id")
    done
    ((${#left[@]})) || return 0
    sleep 1
  done
  docker rm -f "${left[@]}" >/dev/null 2>&1
  log "removed ${#left[@]} container(s) of the cut-off build step"
}

build_image() {
  local args=(-f deploy/docker/Dockerfile) v
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n "${!v:-}" ]] && args+=(--build-arg "$v=${!v}")
  done
  [[ -n "${PSYNC_BUILD_JOBS:-}" ]] && args+=(--build-arg "PSYNC_JOBS=$PSYNC_BUILD_JOBS")
  local before build_net net_ok t0=$SECONDS blog="$work/build.log" slog="$work/build-stage.log" ilog="$work/image.log"
  : >"$slog"; : >"$ilog"
  local containers_before; containers_before=$(docker ps -aq --no-trunc 2>/dev/null)
  choose_build_network
  args+=(--network="$build_net")
  before=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)
  log "docker build -f deploy/docker/Dockerfile -t $image (network $build_net; logs: $slog, $ilog)"
  # The build stage gets its own tag so that its cached layers (dependencies,
  # compiled binaries) survive the prune below; the second build reuses them.
  local brc
  docker_build "$slog" "${args[@]}" --target build -t "$image-build"; brc=$?
  ((brc == 0)) && { docker_build "$ilog" "${args[@]}" -t "$image"; brc=$?; }
  if ((brc != 0)); then
    cat "$slog" "$ilog" >"$blog"
    grep -E '^\[ *[0-9]+s\] Step ' "$blog" | tail -n 3 | sed 's/^/  /'
    if ((brc == 124)); then
      reap_build_containers "$containers_before"
      step_times "$slog" "build stage"; step_times "$ilog" "image"
      out_of_time "the image build (at $(grep -E '^\[ *[0-9]+s\] Step ' "$blog" | tail -n 1 | sed 's/^\[ *[0-9]*s\] //' | cut -c1-80))"
    fi
    tail -n 40 "$blog" | sed 's/^/  build: /'
    if ((net_ok == 0)) && network_failure "$blog"; then
      skip "apt-get inside the image build cannot reach the Debian mirror (neither over Docker's bridge nor the host network)"
    fi
    die "docker build of deploy/docker/Dockerfile failed (see above)"
  fi
  local secs=$((SECONDS - t0)) after
  after=$(docker image inspect -f '{{.Id}}' "$image")
  step_times "$slog" "build stage"; step_times "$ilog" "image"
  log "image $image built in ${secs} s ($([[ "$before" == "$after" ]] && echo 'same image id as before' || echo 'new image id'))," \
      "$(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1/1e6}')"
  # Superseded psync layers (the previous image and build stage) are dangling now.
  docker image prune -f --filter label=io.psync.stage >/dev/null 2>&1
}

# ---------------------------------------------------------------- job helpers
# Container id of service $1 in the current project (docker ps: much faster
# than docker-compose ps on a loaded machine).
cid() {
  docker ps -aq --filter "label=com.docker.compose.project=$project" \
    --filter "label=com.docker.compose.service=$1" | head -n1
}

# psyncctl inside the coordinator container (its PSYNC_TOKEN), JSON out.
ctl_json() { timeout 20 docker exec "$c_coord" psync-entrypoint psyncctl --coordinator=127.0.0.1:29500 --json "$@"; }

# Seconds from container $1's start of death ($2: a date) to container $3's exit.
secs_between() {
  local end
  end=$(docker inspect -f '{{.State.FinishedAt}}' "$2")
  "$py" -c 'import sys; from datetime import datetime as D
f = lambda s: D.fromisoformat(s.rstrip("Z")[:26])
print(f"{(f(sys.argv[2]) - f(sys.argv[1])).total_seconds():.1f}")' "$1" "$end"
}

# jq-like: prints the Python expression $1 evaluated on the JSON on stdin (as d).
json() { "$py" -c 'import json,sys; d=json.load(sys.stdin); v=eval(sys.argv[1]); print(v if not isinstance(v,(dict,list)) else json.dumps(v))' "$1"; }

# up_job [SERVICE0 SERVICE1 [WHAT]]: the coordinator and the job's two
# worker (or node) services, by default worker-0 and worker-1.
up_job() {
  local s0=${1:-worker-0} s1=${2:-worker-1} what=${3:-}
  log "$project: up coordinator $s0 $s1$what"
  compose 240 up -d --no-build coordinator "$s0" "$s1" >"$work/$project.up.log" 2>&1 \
    || { sed 's/^/  up: /' "$work/$project.up.log"; return 1; }
  c_coord=$(cid coordinator); c_w0=$(cid "$s0"); c_w1=$(cid "$s1")
  [[ -n "$c_coord" && -n "$c_w0" && -n "$c_w1" ]] || { log "$project: up left no coordinator/$s0/$s1 containers"; return 1; }
}

# Waits until the job is RUNNING, both ranks joined, at iteration >= $1.
wait_running() {
  local min=$1 deadline=$((SECONDS + 180)) s state iter joined
  while :; do
    if s=$(ctl_json status 2>/dev/null); then
      state=$(json 'd.get("state","")' <<<"$s"); iter=$(json 'int(d.get("iteration",-1))' <<<"$s")
      joined=$(json 'd.get("joined",0) == d.get("world_size",-1)' <<<"$s")
      if [[ $state == *RUNNING && $joined == True ]] && ((iter >= min)); then
        log "$project: job running: $state, iteration $iter, every rank joined"; return 0
      fi
    fi
    ((SECONDS < deadline)) || { log "$project: job not RUNNING past iteration $min within 180 s: ${s:-no status}"; return 1; }
    sleep 0.5
  done
}

# Exit code of container $1 once it exits, or "timeout" after $2 s.
wait_exit() {
  local rc
  rc=$(timeout "$2" docker wait "$1" 2>/dev/null) || rc=timeout
  echo "${rc:-timeout}"
}

# The psync-data volume's files, copied to $1 (through a throw-away container).
fetch_volume() {
  local vol
  vol=$(docker volume ls -q --filter "label=com.docker.compose.project=$project" \
        --filter label=com.docker.compose.volume=psync-data | head -n1)
  [[ -n "$vol" ]] || { log "$project: no psync-data volume"; return 1; }
  mkdir -p "$1"
  timeout 60 docker run --rm --network=none -v "$vol":/data:ro "$image" tar -C /data -cf - . | tar -C "$1" -xf - \
    || { log "$project: cannot read volume $vol"; return 1; }
  log "$project: volume $vol holds: $(cd "$1" && ls | tr '\n' ' ')"
}

# Checks the per-rank summaries in $1 ($world ranks): every rank's exit_code is $2; for exit 0
# also the same steps_completed everywhere. Prints steps_completed (rank 0).
check_summaries() {
  "$py" - "$1" "$2" "$world" <<'EOF'
import json, os, sys
d, want, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = {r: json.load(open(os.path.join(d, f"summary-rank{r}.json"))) for r in range(world)}
for r, j in s.items():
    assert j["rank"] == r and j["world_size"] == world, f"summary-rank{r}.json: rank/world {j['rank']}/{j['world_size']}"
    assert j["exit_code"] == want, f"rank {r}: summary exit_code {j['exit_code']} ({j['exit_reason']}), want {want}"
steps = {r: j["steps_completed"] for r, j in s.items()}
if want == 0:
    assert len(set(steps.values())) == 1, f"ranks stopped after different iterations: {steps}"
print(steps[0])
EOF
}

# Checks that $1 is a complete safetensors file (header, F32 tensors covering
# the data exactly), a weights-only checkpoint (--save) whose manifest says
# step=$2.
check_safetensors() {
  "$py" - "$1" "$2" <<'EOF'
import json, struct, sys
path, steps = sys.argv[1], sys.argv[2]
data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
head = json.loads(data[8:8 + n])
meta = head.pop("__metadata__", {})
assert meta.get("format") == "psync-checkpoint", f"{path}: format {meta.get('format')!r}, want psync-checkpoint"
assert meta.get("optimizer") == "", f"{path}: optimizer {meta.get('optimizer')!r}, want \"\" (weights only)"
assert meta.get("step") == steps, f"{path}: manifest step={meta.get('step')}, want {steps}"
assert head, f"{path}: no tensors"
end = 0
for name, t in head.items():
    assert t["dtype"] == "F32", f"{path}: {name} is {t['dtype']}"
    b, e = t["data_offsets"]
    count = 1
    for x in t["shape"]: count *= x
    assert e - b == 4 * count, f"{path}: {name} size {e - b} != 4*{count}"
    end = max(end, e)
assert 8 + n + end == len(data), f"{path}: {len(data)} bytes, header covers {8 + n + end}"
print(f"{len(head)} tensors, {len(data)} bytes")
EOF
}

# The compose file gives the workers --checkpoint-dir (on the volume),
# --checkpoint-every and --resume; the scenarios check the checkpoints there.
ckpt_dir=/var/lib/psync/checkpoints

# check_checkpoint DIR STEPS: DIR (the volume's checkpoints) holds complete
# checkpoints only (ckpt-<step>.safetensors, no temporary file of a write),
# the newest of step STEPS (psyncctl shutdown writes a final one); it is a
# complete safetensors file whose manifest says format psync-checkpoint and
# step STEPS. Prints what it found.
check_checkpoint() {
  "$py" - "$1" "$2" <<'EOF'
import json, os, re, struct, sys
d, steps = sys.argv[1], int(sys.argv[2])
assert os.path.isdir(d), f"no checkpoint directory {d} on the volume"
names = sorted(os.listdir(d))
tmp = [n for n in names if ".tmp" in n]
assert not tmp, f"temporary files of a checkpoint write left: {tmp}"
ck = {int(m.group(1)): n for n in names if (m := re.fullmatch(r"ckpt-(\d{8,})\.safetensors", n))}
assert ck, f"no ckpt-<step>.safetensors in {d}: {names}"
last = max(ck)
assert last == steps, f"newest checkpoint {ck[last]} is of step {last}, the job stopped after {steps}"
path = os.path.join(d, ck[last])
data = open(path, "rb").read()
(n,) = struct.unpack("<Q", data[:8])
head = json.loads(data[8:8 + n])
meta = head.pop("__metadata__", {})
assert meta.get("format") == "psync-checkpoint", f"{path}: format {meta.get('format')!r}"
assert meta.get("step") == str(steps), f"{path}: manifest step {meta.get('step')!r}, want {steps}"
size = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
end = 0
for name, t in head.items():
    b, e = t["data_offsets"]
    count = 1
    for x in t["shape"]: count *= x
    assert e - b == size[t["dtype"]] * count, f"{path}: {name} size {e - b} != {t['dtype']} x {count}"
    end = max(end, e)
assert head and 8 + n + end == len(data), f"{path}: {len(data)} bytes, header covers {8 + n + end}"
print(f"{ck[last]}: {len(head)} tensors, {len(data)} bytes, step {steps} ({len(ck)} checkpoint(s) in the directory)")
EOF
}

# ---------------------------------------------------------------- scenarios
# Each returns 0 when every check held; it logs the first that did not.

# Last line of container $1's output that is not a progress line.
last_line() { docker logs "$1" 2>&1 | grep -v '^step ' | tail -n1; }

scenario_shutdown() {
  up_job || return 1
  runner_shutdown_checks
}

# The runner shuts the job down; then: both workers exit 0, the coordinator
# reports FINISHED, both summaries say exit 0 after the same number of steps,
# rank 0's weights and final checkpoint are on the volume.
runner_shutdown_checks() {
  local out rc rc0 rc1 s state steps
  log "$project: runner: check-job.sh (psyncctl status/workers, shutdown --wait)"
  out=$(compose 300 run --rm -T runner 2>&1); rc=$?
  grep -v '^Creating\|^Starting' <<<"$out" | sed 's/^/  runner: /'
  ((rc == 0)) || { log "$project: runner exited $rc, want 0"; return 1; }
  rc0=$(wait_exit "$c_w0" 60); rc1=$(wait_exit "$c_w1" 60)
  [[ $rc0 == 0 && $rc1 == 0 ]] || { log "$project: worker exit codes rank0=$rc0 rank1=$rc1, want 0 0"; return 1; }
  log "$project: worker-0 exit 0, worker-1 exit 0"
  s=$(ctl_json status) || { log "$project: psyncctl status after the job failed"; return 1; }
  state=$(json 'd.get("state","")' <<<"$s")
  [[ $state == *FINISHED ]] || { log "$project: coordinator state $state, want FINISHED: $s"; return 1; }
  log "$project: coordinator reports $state ($(json 'd.get("reason","")' <<<"$s"))"
  fetch_volume "$work/$project.data" || return 1
  steps=$(check_summaries "$work/$project.data" 0) || { log "$project: summaries do not match"; return 1; }
  ((steps >= 20)) || { log "$project: only $steps steps completed, want >= 20 (the runner's minimum)"; return 1; }
  log "$project: all $world ranks completed $steps steps (summary-rank*.json)"
  out=$(check_safetensors "$work/$project.data/weights.safetensors" "$steps") \
    || { log "$project: weights.safetensors is not rank 0's final weights"; return 1; }
  log "$project: weights.safetensors: $out, steps_completed=$steps"
  out=$(check_checkpoint "$work/$project.data/checkpoints" "$steps" 2>&1) \
    || { log "$project: final checkpoint: $(tail -n1 <<<"$out")"; return 1; }
  log "$project: final checkpoint $out"
}

# Kills the process of executable $2 (default: psync-worker) inside container
# $1 (SIGKILL): the container exits 137 and, unlike after `docker kill` (a
# manual stop to Docker), its restart policy applies. POSIX sh and coreutils
# in the image: no pgrep. The kill's own `docker exec` dies with the
# container, so its exit status says nothing.
kill_process() {
  local pid
  # By its executable: its comm is "exe" once it re-executed itself (/proc/self/exe).
  pid=$(timeout 20 docker exec "$1" sh -c 'for p in /proc/[0-9]*; do
    [ "$(readlink "$p/exe" 2>/dev/null)" = "$0" ] && echo "${p#/proc/}"; done' "${2:-/usr/local/bin/psync-worker}" | head -n1)
  [[ -n "$pid" ]] || return 1
  timeout 20 docker exec "$1" sh -c "kill -9 $pid" >/dev/null 2>&1
  return 0
}

# Waits until the coordinator runs generation $1 with every rank joined, at
# least $2 iterations past the generation's start; prints the status JSON.
wait_generation() {
  local gen=$1 past=$2 deadline=$((SECONDS + 180)) s=""
  while :; do
    if s=$(ctl_json status 2>/dev/null) && [[ $(json 'int(d.get("generation",0)) == '"$gen"' and d.get("state","").endswith("RUNNING") and d.get("joined",0) == d.get("world_size",-1) and int(d.get("iteration",-1)) >= int(d.get("start_iteration",0)) + '"$past" <<<"$s") == True ]]; then
      echo "$s"; return 0
    fi
    ((SECONDS < deadline)) || { log "$project: generation $gen not RUNNING with every rank within 180 s: ${s:-no status}"; return 1; }
    sleep 0.5
  done
}

# With the compose file's defaults (restart: on-failure:3, --max-restarts=3,
# --checkpoint-every=20, --resume): a worker that dies is started again and
# the job goes on from rank 0's newest checkpoint as generation 2.
scenario_worker_killed() {
  up_job || return 1
  # Past iteration 30 rank 0 has written ckpt-20 (--checkpoint-every=20).
  wait_running 30 || return 1
  local s start restarts n0 n1 line
  log "$project: SIGKILL psync-worker in worker-1 (docker exec; Docker restarts the container)"
  kill_process "$c_w1" || { log "$project: found no psync-worker process in worker-1 to kill"; return 1; }
  s=$(wait_generation 2 5) || return 1
  start=$(json 'int(d.get("start_iteration",0))' <<<"$s"); restarts=$(json 'd.get("restarts",0)' <<<"$s")
  log "$project: generation 2 RUNNING from iteration $start (restarts $restarts/$(json 'd.get("max_restarts",0)' <<<"$s"), recovery $(json 'd.get("recovery","")' <<<"$s")): $(json 'd.get("last_restart_reason","")' <<<"$s")"
  ((restarts == 1)) || { log "$project: coordinator counts $restarts restarts, want 1"; return 1; }
  ((start >= 20)) || { log "$project: generation 2 starts at iteration $start, want >= 20 (ckpt-20 was written)"; return 1; }
  [[ $(json 'd.get("last_restart_reason","")' <<<"$s") == *"rank 1"* ]] \
    || { log "$project: last restart reason does not name rank 1: $s"; return 1; }
  n0=$(docker inspect -f '{{.RestartCount}}' "$c_w0"); n1=$(docker inspect -f '{{.RestartCount}}' "$c_w1")
  if [[ ${PSYNC_RECOVERY:-live} == live ]]; then
    # Live: worker-0 kept its process and state, worker-1's new container
    # was healed from it (no checkpoint read).
    [[ $n0 == 0 && $n1 == 1 ]] || { log "$project: Docker restarted worker-0 $n0 and worker-1 $n1 times, want 0 and 1"; return 1; }
    grep_log "$c_w0" 'rejoining generation 2 with the state of step' || return 1
    grep_log "$c_w1" 'healed from rank 0 at step' || return 1
    log "$project: worker-0 stayed up and rejoined in place, worker-1 restarted by Docker and healed ($line)"
  else
    [[ $n0 == 1 && $n1 == 1 ]] || { log "$project: Docker restarted worker-0 $n0 and worker-1 $n1 times, want 1 and 1"; return 1; }
    # Each worker logs "resumed from" before its Join, so it is there once
    # generation 2 runs.
    grep_log "$c_w0" 'resumed from' || return 1
    grep_log "$c_w1" 'resumed from' || return 1
    log "$project: Docker restarted each worker once; both resumed ($line)"
  fi
  runner_shutdown_checks
}

# The same with --recovery=restart: every worker restarts, from the checkpoint.
scenario_worker_killed_restart() {
  local -x PSYNC_RECOVERY=restart
  scenario_worker_killed
}

# grep_log CONTAINER PATTERN: sets `line` to the first line of the
# container's log that matches. The whole log first, then grep: `docker logs
# | grep -m1` fails under pipefail when grep stops reading a long log early
# (docker logs gets SIGPIPE); a few tries cover the log driver's delay.
grep_log() {
  local logs tries
  line=""
  for ((tries = 0; tries < 10; tries++)); do
    logs=$(docker logs "$1" 2>&1)
    line=$(grep -m1 -- "$2" <<<"$logs") && return 0
    sleep 0.5
  done
  log "$project: container $1 did not log '$2'"
  return 1
}

scenario_worker_killed_no_restart() {
  # The compose file's restarts turned off: a dead worker ends the job.
  local -x PSYNC_MAX_RESTARTS=0 PSYNC_WORKER_RESTART=no
  up_job || return 1
  wait_running 20 || return 1
  local rc0 s line
  log "$project: docker kill worker-1"
  docker kill "$c_w1" >/dev/null || { log "$project: docker kill failed"; return 1; }
  rc0=$(wait_exit "$c_w0" 60)
  line=$(last_line "$c_w0")
  [[ $rc0 == 4 ]] || { log "$project: worker-0 exit $rc0, want 4 (peer lost): $line"; return 1; }
  grep -q 'rank 1\b' <<<"$line" || { log "$project: worker-0's last line does not name rank 1: $line"; return 1; }
  log "$project: worker-0 exit 4, $(secs_between "$(docker inspect -f '{{.State.FinishedAt}}' "$c_w1")" "$c_w0") s after worker-1 died: $line"
  s=$(ctl_json status) || { log "$project: psyncctl status failed"; return 1; }
  [[ $(json 'd.get("state","")' <<<"$s") == *ABORTED ]] || { log "$project: coordinator state is not ABORTED: $s"; return 1; }
  [[ $(json '[w.get("state","") for w in d.get("workers",[]) if w.get("rank",0) == 1]' <<<"$s") == *LOST* ]] \
    || { log "$project: coordinator does not report rank 1 LOST: $s"; return 1; }
  log "$project: coordinator: ABORTED, rank 1 LOST ($(json 'd.get("reason","")' <<<"$s"))"
  fetch_volume "$work/$project.data" || return 1
  "$py" -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["exit_code"]==4, j' \
    "$work/$project.data/summary-rank0.json" || { log "$project: summary-rank0.json does not record exit 4"; return 1; }
  [[ ! -e "$work/$project.data/weights.safetensors" ]] || { log "$project: weights were saved by an aborted job"; return 1; }
  log "$project: summary-rank0.json records exit 4; no weights saved"
}

# The coordinator's container killed (docker kill, which Docker takes for a
# manual stop: no restart) and started again by hand with the same command
# (docker start; its --state-dir journal is on the volume) once both workers
# said they lost it: they ride through (--coordinator-grace), re-register,
# generation 1 runs on with no worker restarted, and the runner then shuts
# the job down as in `shutdown`. (A coordinator that never comes back: the
# workers exit 5 after their grace, worker_it.kill_coordinator.)
scenario_coordinator_killed() {
  up_job || return 1
  wait_running 20 || return 1
  log "$project: docker kill coordinator"
  docker kill "$c_coord" >/dev/null || { log "$project: docker kill failed"; return 1; }
  # A killed container may leave no TCP reset behind: the workers' keepalive
  # (about 5 s) finds the loss then.
  local c deadline=$((SECONDS + 30))
  for c in "$c_w0" "$c_w1"; do
    until docker logs "$c" 2>&1 | grep -q 'lost (.*); training on while the plans last'; do
      ((SECONDS < deadline)) || { log "$project: container $c did not say it lost the coordinator within 30 s"; return 1; }
      sleep 0.5
    done
  done
  log "$project: the workers ride through; docker start coordinator"
  docker start "$c_coord" >/dev/null || { log "$project: docker start failed"; return 1; }
  coordinator_back_checks "coordinator started again"
}

# After the coordinator came back: both workers re-registered and generation
# 1 runs on, its journal (--state-dir on the volume) counts one coordinator
# restart, Docker restarted no worker; then the runner's shutdown as in
# `shutdown`. $1: how it came back (for the log).
coordinator_back_checks() {
  local how=$1 s n
  s=$(wait_generation 1 5) || return 1
  grep_log "$c_w0" 're-registered with the coordinator' || return 1
  grep_log "$c_w1" 're-registered with the coordinator' || return 1
  log "$project: $how; generation 1 runs on at iteration $(json 'd.get("iteration","")' <<<"$s") ($line)"
  [[ $(json 'd.get("coordinator_restarts",0)' <<<"$s") == 1 ]] \
    || { log "$project: status counts $(json 'd.get("coordinator_restarts",0)' <<<"$s") coordinator restarts, want 1"; return 1; }
  n="$(docker inspect -f '{{.RestartCount}}' "$c_w0") $(docker inspect -f '{{.RestartCount}}' "$c_w1")"
  [[ $n == "0 0" ]] || { log "$project: Docker restarted the workers ($n times), want 0 0"; return 1; }
  runner_shutdown_checks
}

# The coordinator's process killed inside its container (SIGKILL): Docker
# starts the container again (restart: on-failure), the workers ride through
# (--coordinator-grace) and re-register with it, and it runs generation 1 on
# with no worker restarted; the runner then shuts the job down as in
# `shutdown`.
scenario_coordinator_restarted() {
  up_job || return 1
  wait_running 20 || return 1
  log "$project: SIGKILL psync-coordinator in its container (docker exec; Docker starts it again)"
  kill_process "$c_coord" /usr/local/bin/psync-coordinator \
    || { log "$project: found no psync-coordinator process to kill"; return 1; }
  local deadline=$((SECONDS + 60))
  until [[ $(docker inspect -f '{{.RestartCount}}' "$c_coord") == 1 ]]; do
    ((SECONDS < deadline)) || { log "$project: Docker did not start the coordinator again within 60 s"; return 1; }
    sleep 0.5
  done
  coordinator_back_checks "coordinator restarted by Docker"
}

# The two-node shape (docker-compose.nodes.yml): psync-worker killed in
# node-1; node-1's launcher restarts its ranks, node-0's restarts its own when
# the coordinator opens generation 2, every rank resumes from the newest
# checkpoint all of them can load, and the job then shuts down cleanly
# (both launchers exit 0, all four summaries agree).
scenario_nodes_worker_killed() {
  up_job node-0 node-1 " (psync-launch --nnodes=2 --nproc=2 in each)" || return 1
  wait_running 30 || return 1
  local s start restarts
  log "$project: SIGKILL one psync-worker in node-1 (docker exec)"
  kill_process "$c_w1" || { log "$project: found no psync-worker process in node-1 to kill"; return 1; }
  s=$(wait_generation 2 5) || return 1
  start=$(json 'int(d.get("start_iteration",0))' <<<"$s"); restarts=$(json 'd.get("restarts",0)' <<<"$s")
  log "$project: generation 2 RUNNING from iteration $start (restarts $restarts): $(json 'd.get("last_restart_reason","")' <<<"$s")"
  ((restarts == 1)) || { log "$project: coordinator counts $restarts restarts, want 1"; return 1; }
  ((start >= 20)) || { log "$project: generation 2 starts at iteration $start, want >= 20 (ckpt-20 was written)"; return 1; }
  [[ $(docker inspect -f '{{.RestartCount}}' "$c_w1") == 0 ]] \
    || { log "$project: Docker restarted node-1: the launcher should have replaced its rank"; return 1; }
  # Live recovery: node-1's launcher replaced the dead rank alone, node-0's
  # kept both of its workers.
  grep_log "$c_w1" 'died; starting a replacement' || return 1
  log "$project: node-1: $line"
  grep_log "$c_w0" "this node's running workers stay" || return 1
  runner_shutdown_checks
}

# The Debian package from the build stage, installed with apt in a clean
# container (no compose project): deb_smoke.sh says what it checks.
scenario_deb() {
  local cid build_net net_ok envs=() v left
  # A cold CI run spends most of the budget on the image build; apt, the
  # examples' build and Dockerfile.your-model need about two minutes more.
  left=$(scenario_bound 900) || left=0
  if ((left < 150)); then
    log "deb: not run: $left s of the ${budget} s budget left, it needs about 150 s (scripts/compose-test.sh deb runs it alone)"
    return "$SKIP"
  fi
  mkdir -p "$work/deb"
  cid=$(docker create "$image-build") || return 1
  docker cp "$cid:/out/deb/." "$work/deb/" >/dev/null 2>&1; docker rm "$cid" >/dev/null
  ls "$work/deb"/psync_*.deb >/dev/null 2>&1 || { log "deb: the build stage made no package"; return 1; }
  log "deb: $(basename "$work"/deb/psync_*.deb) ($(du -h "$work"/deb/psync_*.deb | cut -f1))"
  choose_build_network
  for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
    [[ -n "${!v:-}" ]] && envs+=(-e "$v=${!v}")
  done
  if ! timeout "$(scenario_bound 900 || echo 1)" docker run --rm --network="$build_net" "${envs[@]}" \
      -v "$work/deb:/pkg:ro" -v "$root/examples:/examples:ro" \
      -v "$root/tests/integration/package/deb_smoke.sh:/deb_smoke.sh:ro" \
      debian:bookworm-slim bash /deb_smoke.sh >"$work/deb.log" 2>&1; then
    tail -n 30 "$work/deb.log" | sed 's/^/  deb: /'
    return 1
  fi
  sed 's/^/  deb: /' "$work/deb.log"
  # deploy/docker/Dockerfile.your-model: examples/your_model on top of psync's image;
  # its entrypoint runs the program as `psync-worker` (PSYNC_WORKER_BIN).
  if ! timeout "$(scenario_bound 600 || echo 1)" docker build -q -f deploy/docker/Dockerfile.your-model \
      --build-arg PSYNC_BUILD_IMAGE="$image-build" --build-arg PSYNC_IMAGE="$image" -t "$image-your-model" . \
      >"$work/your-model.log" 2>&1; then
    tail -n 20 "$work/your-model.log" | sed 's/^/  your-model: /'
    return 1
  fi
  local out rc
  out=$(timeout 60 docker run --rm "$image-your-model" psync-worker --help 2>&1); rc=$?
  docker rmi -f "$image-your-model" >/dev/null 2>&1
  grep -q "resmlp: residual MLP" <<<"$out" || { log "deb: the your-model image's worker lists no resmlp (exit $rc)"; return 1; }
  log "deb: Dockerfile.your-model built; its psync-worker is examples/your_model (--model=resmlp listed)"
}

# ---------------------------------------------------------------- main
ensure_base_images
build_image
export PSYNC_IMAGE=$image
PSYNC_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
export PSYNC_TOKEN

passed=0 failed=0 skipped=0
for sc in "${scenarios[@]}"; do
  project="psyncct$$-$sc"
  projects_up=("$project")
  # nodes-*: the two-node shape (psync-launch per node container), world 4.
  if [[ $sc == nodes-* ]]; then compose_file=deploy/compose/docker-compose.nodes.yml world=4
  else compose_file=deploy/compose/docker-compose.yml world=2; fi
  log "---- scenario $sc (compose project $project)"
  t0=$SECONDS
  "scenario_${sc//-/_}"; rc=$?
  if ((rc == SKIP)); then ok=2; elif ((rc == 0)); then ok=1; else ok=0; fi
  if ((ok == 0)); then
    compose 30 logs --no-color --tail=15 2>&1 | sed 's/^/  log: /'
  fi
  teardown_project "$project"
  projects_up=()
  left=$(leftovers "$project")
  if [[ -n "$left" ]]; then log "$project: left behind after down -v: $(tr '\n' ' ' <<<"$left")"; ok=0; fi
  if ((ok == 2)); then skipped=$((skipped + 1)); log "SKIP: $sc ($((SECONDS - t0)) s, torn down)"
  elif ((ok)); then passed=$((passed + 1)); log "PASS: $sc ($((SECONDS - t0)) s, torn down)"
  else failed=$((failed + 1)); log "FAIL: $sc ($((SECONDS - t0)) s)"; fi
done
log "compose-test: $passed passed, $failed failed, $skipped not run for lack of time ($((SECONDS - t_start)) s)"
((failed == 0)) || exit 1
# A scenario left out is never a pass: the test as a whole says skipped.
((skipped == 0)) || exit "$SKIP"
