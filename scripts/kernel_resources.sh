#!/usr/bin/env bash
# kernel_resources.sh [BUILD_DIR] [OUT_DIR]: what ptxas gives each CUDA kernel of kernels/cuda
# for every architecture the build targets: registers per thread, static shared memory, stack
# frame and spills. No GPU needed: each .cu is compiled again with the build's own nvcc
# command (`ninja -t commands`, so the same flags and architectures) plus --resource-usage,
# into a scratch folder. For each kernel it also gives the threads per block its launcher
# asks for (read from the `<<<grid, block, ...>>>` in the source, kThreads-style constants
# resolved), the largest block its registers allow, and the occupancy (resident warps of 64
# per SM) that registers, static shared memory and the block size allow; dynamic shared
# memory, sized per call, is left out of it.
#
# Writes OUT_DIR (default build/kernel-resources)/kernel_resources.md and .json. Exits 1 when
# a kernel's registers do not allow the block its launcher asks for (the launch would fail
# with "too many resources requested"), or a kernel declares more than 48 KB of static shared
# memory. Spills are reported, not failed. Needs a CUDA build (SCD_HAVE_CUDA) made with Ninja.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
out="${2:-$build/kernel-resources}"
die() { echo "kernel_resources.sh: $*" >&2; exit 1; }

[[ -f "$build/build.ninja" ]] || die "no Ninja build at $build"
mapfile -t objects < <(ninja -C "$build" -t targets all 2>/dev/null |
  sed -n 's|^\(kernels/cuda/CMakeFiles/scd_kernels_cuda.dir/[^:]*\.cu\.o\): .*|\1|p' | sort)
((${#objects[@]})) || die "$build has no CUDA kernels (configure with SCD_CUDA=ON and nvcc installed)"

mkdir -p "$out"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
: > "$out/ptxas.log"
n=0
for obj in "${objects[@]}"; do
  n=$((n + 1))
  cu="$(basename "${obj%.o}")"
  echo "kernel_resources.sh: [$n/${#objects[@]}] $cu" >&2
  cmd="$(ninja -C "$build" -t commands "$obj" | tail -1)"
  # The build's command, writing into the scratch folder instead of the build's object and
  # dependency files.
  cmd="$(sed -E "s| -MD -MT [^ ]+ -MF [^ ]+| |; s| -o [^ ]+$| -o $scratch/$cu.o|" <<< "$cmd")"
  [[ "$cmd" == *"-o $scratch/"* ]] || die "unexpected compile command for $obj: $cmd"
  echo "### $cu" >> "$out/ptxas.log"
  # noglob: the command's `code=[compute_80,sm_80]` must reach nvcc as written.
  (cd "$build" && set -f && eval "$cmd --resource-usage") >> "$out/ptxas.log" 2>&1 ||
    die "nvcc failed on $cu: see $out/ptxas.log"
done

python3 "$root/scripts/kernel_resources.py" "$out" "$root/kernels/cuda"
