#!/usr/bin/env bash
# scripts_test.sh SOURCE_DIR: the analysis of scripts/build_times.sh (on a hand-made ninja log)
# and of scripts/kernel_resources.py (on hand-made ptxas output and launcher sources), both
# checked against figures worked out by hand. No nvcc, no build needed.
set -euo pipefail
src=$1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "scripts_test: $*" >&2; exit 1; }
expect() { grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "missing in $(basename "$1"): $2"; }; }

# ---- build_times.sh ----
# x.cc compiled by two targets (4 s and 6 s), y.cc once, one link; an older entry of y.cc's
# object (a later line supersedes it). Wall: 0 to 12 s; CPU: 4 + 6 + 3 + 1 = 14 s.
mkdir -p "$work/b"
printf '# ninja log v5\n' > "$work/b/.ninja_log"
printf '0\t9000\t0\tt2/CMakeFiles/b.dir/y.cc.o\t1\n' >> "$work/b/.ninja_log"
printf '0\t4000\t0\tt1/CMakeFiles/a.dir/x.cc.o\t2\n' >> "$work/b/.ninja_log"
printf '0\t6000\t0\tt1/CMakeFiles/c.dir/x.cc.o\t3\n' >> "$work/b/.ninja_log"
printf '8000\t11000\t0\tt2/CMakeFiles/b.dir/y.cc.o\t4\n' >> "$work/b/.ninja_log"
printf '11000\t12000\t0\tbin/app\t5\n' >> "$work/b/.ninja_log"
"$src/scripts/build_times.sh" "$work/b" 2 > "$work/bt.md"
expect "$work/bt.md" "| 4 | 3 | 0.2 | 0.2 | 0.2 |"
expect "$work/bt.md" "| 6.0 | \`t1/CMakeFiles/c.dir/x.cc.o\` |"
expect "$work/bt.md" "Sources compiled more than once: 1, costing 0.1 extra CPU minutes"
expect "$work/bt.md" "| \`t1/x.cc\` | 2 | 4.0 | a, c |"
if grep -q "9.0" "$work/bt.md"; then fail "the superseded entry of y.cc.o was counted"; fi
printf 'not a log\n' > "$work/b/.ninja_log"
if "$src/scripts/build_times.sh" "$work/b" 2> "$work/err"; then fail "a bad log was accepted"; fi
expect "$work/err" "is not a ninja log"

# ---- kernel_resources.py ----
mkdir -p "$work/k/src" "$work/k/out"
cat > "$work/k/src/k.cu" <<'CU'
constexpr int kThreads = 512, kSmall = 128;
__global__ void __launch_bounds__(kThreads) KernelA(float* x, int n) {}
__global__ void KernelB(const float* x, int n) {}
void Launch(float* x, int n, int threads) {
  KernelA<<<GridFor(n, kThreads), kThreads, 0, AsStream(s)>>>(x, n);
  KernelB<<<n, kSmall, 0, AsStream(s)>>>(x, n);
}
CU
ptxas() {  # ptxas A_REGISTERS: KernelA with that many registers and 8-byte spills; KernelB 40
  cat <<LOG
### k.cu
ptxas info    : Compiling entry function '_ZN3scd4cuda12_GLOBAL__N_17KernelAEPfi' for 'sm_90'
ptxas info    : Function properties for _ZN3scd4cuda12_GLOBAL__N_17KernelAEPfi
    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used $1 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN3scd4cuda12_GLOBAL__N_17KernelBEPKfi' for 'sm_90'
ptxas info    : Function properties for _ZN3scd4cuda12_GLOBAL__N_17KernelBEPKfi
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 0 barriers, 400 bytes cmem[0]
LOG
}
# 64 registers: 2048 per warp, 32 warps fit, so 1024 threads. A's 512 threads (16 warps): two
# blocks by registers, 76 by shared memory (228 KB / (2 KB + 1 KB reserved)), 4 by threads: 2 x 16 of
# 64 warps = 50%. B: 40 registers -> 1280 per warp; 128 threads (4 warps): 12 blocks by
# registers, 16 by threads: 48 of 64 warps = 75%.
ptxas 64 > "$work/k/out/ptxas.log"
python3 "$src/scripts/kernel_resources.py" "$work/k/out" "$work/k/src" > "$work/k/stdout"
md="$work/k/out/kernel_resources.md"
expect "$md" "| k.cu | \`KernelA\` | sm_90 | 64 | 2048 | 16 | **8/8** | 512 | 512 | 1024 | 50% |"
expect "$md" "| k.cu | \`KernelB\` | sm_90 | 40 | 0 | 0 | 0/0 | 128 | - | 1024 | 75% |"
expect "$md" "spilling: KernelA (sm_90); problems: none"
expect "$work/k/stdout" "every launcher's block fits its kernel's registers"
# 128 registers: 4096 per warp, 16 warps, so 512 threads: still fits. 160: 5120 per warp,
# 12 warps, 384 threads < 512: the launch would fail.
ptxas 128 > "$work/k/out/ptxas.log"
python3 "$src/scripts/kernel_resources.py" "$work/k/out" "$work/k/src" > /dev/null ||
  fail "512 threads at 128 registers fit, but were refused"
ptxas 160 > "$work/k/out/ptxas.log"
if python3 "$src/scripts/kernel_resources.py" "$work/k/out" "$work/k/src" > "$work/k/stdout"; then
  fail "512 threads at 160 registers were accepted"
fi
expect "$work/k/stdout" "KernelA (sm_90): launched with 512 threads, its 160 registers allow 384"
echo "scripts_test: build_times.sh and kernel_resources.py agree with the hand-worked figures"
