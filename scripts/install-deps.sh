#!/usr/bin/env bash
# Installs psync's build and run dependencies from Debian packages.
# As root: installs whatever is missing with apt. Otherwise: prints the
# command to run and exits non-zero if something is missing.
#   PSYNC_WITH_TORCH=1         also install python3-torch and numpy (the PyTorch reference tests, so
#                              none of them skips; bench/ side-by-side runs; scripts/test.sh sets it)
#   PSYNC_WITH_DEPLOY_TOOLS=1  also docker-compose, docker.io, debootstrap (deploy tests), prometheus (a real
#                              Prometheus server scrapes a job: coordinator_prometheus_server)
#   PSYNC_WITH_DOC_TOOLS=1     also doxygen (the API reference; scripts/test.sh sets it)
#   PSYNC_WITH_BENCH_TOOLS=1   also python3-grpcio (bench/auth_flood_bench.py: a real gRPC client from outside)
set -euo pipefail

pkgs=(cmake ninja-build g++ pkg-config
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libabsl-dev libgloo-dev libopenblas-dev libdnnl-dev libgtest-dev libgmock-dev nlohmann-json3-dev zlib1g-dev
      dataset-fashion-mnist
      python3 python3-regex iproute2
      dpkg-dev file)
# dpkg-dev and file: dpkg-shlibdeps and the file type probe, which `cpack -G DEB` uses to
# declare the package's dependencies.
# The Prometheus text parser the /metrics test reads the coordinator with
# (tests/integration/coordinator/metrics_live_test.py).
pkgs+=(python3-prometheus-client)
if [[ "${PSYNC_WITH_TORCH:-0}" == 1 ]]; then pkgs+=(python3-torch python3-numpy); fi
if [[ "${PSYNC_WITH_BENCH_TOOLS:-0}" == 1 ]]; then pkgs+=(python3-grpcio); fi
# doxygen: the API reference from the public headers (ctest api_reference).
if [[ "${PSYNC_WITH_DOC_TOOLS:-0}" == 1 ]]; then pkgs+=(doxygen); fi
# Deploy tools (scripts/test.sh sets this): docker-compose and PyYAML for deploy_validate;
# the Docker engine and debootstrap for compose_integration (scripts/compose-test.sh).
# prometheus (the server and promtool) for coordinator_prometheus_server: a real Prometheus scrapes a job.
if [[ "${PSYNC_WITH_DEPLOY_TOOLS:-0}" == 1 ]]; then pkgs+=(docker-compose python3-yaml docker.io debootstrap prometheus); fi

missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]} == 0)); then exit 0; fi

if [[ $(id -u) -ne 0 ]]; then
  echo "psync: missing Debian packages: ${missing[*]}" >&2
  echo "psync: install them with: sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "psync: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=900 update -q >&2
apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends "${missing[@]}" >&2
