#!/usr/bin/env bash
# gpu_bundle.sh [BUILD_DIR]: packs the GPU check's prebuilt binaries for a machine that has a GPU
# but not our build dependencies (for example an image with nvcc, CMake and cuBLAS but no
# gRPC, absl, OpenBLAS or Catch2, where nothing can be installed).
#
# It builds test_cuda and scd-gpu-bench in BUILD_DIR (default build-cuda, configured with
# -DSCD_CUDA=ON if it is not yet), then writes .gpu_bundle/scd-gpu-bundle.tar.gz holding
#   bin/      test_cuda, scd-gpu-bench (sm_80 and sm_90 code);
#   lib/      every shared library they load that such an image lacks (absl, OpenBLAS and its
#             Fortran runtime, cudart 13), but not cuBLAS (500+ MB, the image has CUDA 13's);
#   lib/compat/ libstdc++ and libgcc_s, used only where the machine's own are too old;
#   shared/   the fixtures the [cuda] tests read (models/, golden/);
#   MANIFEST  the commit, the build directory, and sha256 sums of the source files it was built
#             from, which scripts/gpu_check.sh checks against the tree it runs in.
# .gpu_bundle/ is git-ignored; pass it to the device tool with carry: [".gpu_bundle"].
# Environment: SCD_GPU_BUNDLE_DIR (default <repo>/.gpu_bundle), SCD_SHARED_DIR, JOBS.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=$(realpath -m "${1:-$ROOT/build-cuda}")
SHARED=${SCD_SHARED_DIR:-$ROOT/../shared}
DEST=${SCD_GPU_BUNDLE_DIR:-$ROOT/.gpu_bundle}
JOBS=${JOBS:-$(nproc)}

die() { echo "gpu_bundle.sh: $*" >&2; exit 1; }
for d in models/stories260K models/stories260K-babi-qa golden; do
  [[ -e "$SHARED/$d" ]] || die "missing fixture $SHARED/$d (set SCD_SHARED_DIR)"
done

if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  echo "== configure $BUILD (-DSCD_CUDA=ON)"
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSCD_CUDA=ON >/dev/null
fi
compgen -G "$BUILD/CMakeFiles/*/CMakeCUDACompiler.cmake" >/dev/null ||
  die "$BUILD is not a CUDA build (configure it with -DSCD_CUDA=ON)"
echo "== build test_cuda scd-gpu-bench in $BUILD"
cmake --build "$BUILD" --target test_cuda scd-gpu-bench -j "$JOBS" >/dev/null ||
  die "build failed: cmake --build $BUILD --target test_cuda scd-gpu-bench"

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/lib/compat" "$STAGE/shared"
cp "$BUILD/tests/test_cuda" "$BUILD/bin/scd-gpu-bench" "$STAGE/bin/"

# Libraries: what ldd resolves, less the C library family (every Linux has it), cuBLAS (the
# image's CUDA 13 has it) and the C++ runtime (kept apart, used only when needed).
while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*) ;;
    libcublas.so.* | libcublasLt.so.*) ;;
    libstdc++.so.* | libgcc_s.so.*) cp -L "$path" "$STAGE/lib/compat/$name" ;;
    *) cp -L "$path" "$STAGE/lib/$name" ;;
  esac
done < <(ldd "$STAGE/bin/test_cuda" "$STAGE/bin/scd-gpu-bench" |
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
if ldd "$STAGE/bin/test_cuda" "$STAGE/bin/scd-gpu-bench" | grep -q "not found"; then
  die "unresolved libraries: $(ldd "$STAGE/bin/test_cuda" | grep 'not found')"
fi

mkdir -p "$STAGE/shared/models"
cp -r "$SHARED/models/stories260K" "$SHARED/models/stories260K-babi-qa" "$STAGE/shared/models/"
cp -r "$SHARED/golden" "$STAGE/shared/"

{
  echo "commit $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "dirty $(git -C "$ROOT" status --porcelain --untracked-files=no | wc -l) tracked files"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) in $BUILD"
  echo "nvcc $(nvcc --version 2>/dev/null | tail -1)"
} > "$STAGE/MANIFEST"
# Sources the binaries are made of, relative to the repository root (sha256sum -c format).
(cd "$ROOT" && git ls-files -z -- '*.cc' '*.h' '*.cu' '*.cuh' '*CMakeLists.txt' |
  xargs -0 sha256sum) > "$STAGE/SOURCES.sha256"

mkdir -p "$DEST"
rm -f "$DEST/scd-gpu-bundle.tar.gz"
tar -C "$STAGE" -czf "$DEST/scd-gpu-bundle.tar.gz" .
echo "== wrote $DEST/scd-gpu-bundle.tar.gz ($(du -h "$DEST/scd-gpu-bundle.tar.gz" | cut -f1))"
sed 's/^/   /' "$STAGE/MANIFEST"
