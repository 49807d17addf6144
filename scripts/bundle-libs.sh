#!/usr/bin/env bash
# Copies the shared libraries psync's binaries load from Debian packages
# (gRPC, protobuf, abseil, Gloo, OpenBLAS, oneDNN and what they pull in)
# into BUILD_DIR/bundled-libs, so a build tree made here runs on a GPU host
# that has the NVIDIA driver and CUDA but not Debian's libraries
# (scripts/gpu-check.sh with PREBUILT=1 puts the folder on LD_LIBRARY_PATH).
# Left out: glibc and the C++ runtime (the host's must be new enough), and
# CUDA's own libraries (the host's CUDA runs the binaries).
#
#   scripts/bundle-libs.sh [BUILD_DIR]     (default <repo>/build)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
B="${1:-$ROOT/build}"
OUT="$B/bundled-libs"
mkdir -p "$OUT"
bins=()
while IFS= read -r f; do bins+=("$f"); done < <(find "$B" -type f -perm -u+x \( -name 'psync-*' -o -name psyncctl -o -name '*_test' -o -name weights_diff \) 2>/dev/null)
skip='^(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia|libcudnn)[.-]'
n=0
for lib in $(for f in "${bins[@]}"; do ldd "$f" 2>/dev/null; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
  base=$(basename "$lib")
  [[ $base =~ $skip ]] && continue
  cp -Lu "$lib" "$OUT/$base" && n=$((n + 1))
done
echo "bundle-libs: $n libraries of ${#bins[@]} binaries in $OUT ($(du -sh "$OUT" | cut -f1))"
