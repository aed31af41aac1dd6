// The CUDA device model that lets CI run the real kernels of kernels/cuda on a CPU (CI has no
// GPU, so without this the kernels would run for the first time in a GPU check).
// tests/gpu/emu/transform.cmake turns each kernels/cuda/*.cu into a C++ file that includes this
// header first; g++ then compiles the kernels as they are:
//   - `kernel<<<grid, block, smem, stream>>>(args)` becomes
//     `kernel ^ scd_emu::LaunchConfig(grid, block, smem, stream)(args)`: the launch is checked
//     as the runtime checks it (block size, dynamic shared memory against the 48 KB default or
//     the cudaFuncSetAttribute opt-in, grid limits) and queued on the stand-in stream
//     (tests/gpu/standin/standin_memory.h), so it runs in stream order, when the stream is drained;
//   - each thread of a block is a fiber (ucontext) with its own stack. A fiber runs until it
//     reaches a barrier (__syncthreads, __syncwarp, a warp shuffle, a WMMA operation) and the
//     barrier opens when every live thread it names has arrived. One thread runs far ahead
//     of the others between barriers, so a missing barrier shows as a wrong result; a barrier
//     some threads never reach, a shuffle naming an exited or missing lane, an unaligned
//     WMMA pointer or 16-byte (uint4) load or store stops the test with a message;
//   - `__shared__` variables are per-block (blocks run one after another on a host thread).
//     Dynamic shared memory is poisoned at every block start, as real shared memory holds
//     garbage; static `__shared__` variables are not (they keep the previous block's values);
//   - warp shuffles, WMMA fragments (each lane holds the whole 16x16 tile; BF16 products
//     accumulate in float), cub's BlockReduce/BlockScan (results only where cub defines them)
//     and DeviceSegmentedRadixSort (a stable sort per segment) follow their CUDA contracts.
// Not modelled: timing, the memory model between blocks, bank conflicts, register limits. The
// parity tests on a real GPU (tests/gpu/parity, scripts/gpu_check.sh) remain the proof; this runs
// the same tests in every CI build so that the kernels' logic is checked before then.
#ifndef SCD_TESTS_GPU_EMU_DEVICE_H_
#define SCD_TESTS_GPU_EMU_DEVICE_H_

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

// ---- CUDA runtime types and the parts of its API the kernels' launchers call -------------
struct uint3 {
  unsigned x, y, z;
};
namespace scd_emu {
[[noreturn]] void Fail(const char* what);
// A GPU faults ("misaligned address") on a 16-byte load or store at an address that is not
// 16-byte aligned, where the CPU would go on silently.
inline void CheckVectorAccess(const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) Fail("misaligned 16-byte (uint4) access");
}
}  // namespace scd_emu

// CUDA's uint4 is 16-byte aligned, and kernels read and write 16-byte vectors through it
// (`*reinterpret_cast<const uint4*>(p)`): copying one checks the address it is read from and
// the one it is written to, so a kernel that would fault on a GPU stops the test here.
// (Zero-initialised members keep its default constructor constexpr, so that a static
// `__shared__` (thread_local) array of it needs no initialisation guard, which TSan would see
// every emulated thread touch.)
struct alignas(16) uint4 {
  unsigned x = 0, y = 0, z = 0, w = 0;
  constexpr uint4() = default;
  constexpr uint4(unsigned x_, unsigned y_, unsigned z_, unsigned w_)
      : x(x_), y(y_), z(z_), w(w_) {}
  uint4(const uint4& o) : x(o.x), y(o.y), z(o.z), w(o.w) { scd_emu::CheckVectorAccess(&o); }
  uint4& operator=(const uint4& o) {
    scd_emu::CheckVectorAccess(&o);
    scd_emu::CheckVectorAccess(this);
    x = o.x;
    y = o.y;
    z = o.z;
    w = o.w;
    return *this;
  }
};
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) {
  return uint4(x, y, z, w);
}
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef struct CUstream_st* cudaStream_t;

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidPitchValue = 12,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorCallRequiresNewerDriver = 36,
  cudaErrorDevicesUnavailable = 46,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorHostMemoryAlreadyRegistered = 712,
  cudaErrorNotSupported = 801,
};
typedef cudaError_t cudaError;

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

namespace scd_emu {

// The opt-in of cudaFuncSetAttribute(kernel, MaxDynamicSharedMemorySize, bytes).
cudaError_t SetMaxDynamicShared(const void* kernel, int bytes);

}  // namespace scd_emu

template <typename F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
  return scd_emu::SetMaxDynamicShared(reinterpret_cast<const void*>(kernel), value);
}

// ---- Qualifiers ---------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
// Per host thread: the fibers of one block share it, and two host threads draining two
// streams do not.
#define __shared__ static thread_local

namespace scd_emu {

// What threadIdx, blockIdx, blockDim and gridDim read: the running fiber's coordinates.
struct ThreadCoords {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
const ThreadCoords& Coords();

// The block's dynamic shared memory (extern __shared__), 256-byte aligned.
void* DynamicShared();

void SyncThreads();
void SyncWarp(unsigned mask);
// The value of `bits` held by lane (this lane ^ lane_mask) of this warp.
uint64_t WarpExchangeXor(unsigned mask, uint64_t bits, int lane_mask, int width);
// Stops the test: "gpu emulator: <what>" with the thread's coordinates.
[[noreturn]] void Fail(const char* what);

}  // namespace scd_emu

#define threadIdx (::scd_emu::Coords().thread_idx)
#define blockIdx (::scd_emu::Coords().block_idx)
#define blockDim (::scd_emu::Coords().block_dim)
#define gridDim (::scd_emu::Coords().grid_dim)

inline void __syncthreads() { scd_emu::SyncThreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { scd_emu::SyncWarp(mask); }

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffle of <= 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = scd_emu::WarpExchangeXor(mask, bits, lane_mask, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// Atomic read-modify-writes (fibers switch only at barriers, but the race check must see
// them as atomics).
inline int atomicMin(int* address, int value) {
  int old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (value < old && !__atomic_compare_exchange_n(address, &old, value, false, __ATOMIC_RELAXED,
                                                     __ATOMIC_RELAXED)) {
  }
  return old;
}
inline int atomicAdd(int* address, int value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}

// ---- Device math the kernels use that the host library lacks --------------------------------
inline float __uint_as_float(unsigned bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}
inline float __int_as_float(int bits) { return __uint_as_float(static_cast<unsigned>(bits)); }
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }

inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
// CUDA's mixed signed/unsigned overloads compare as unsigned.
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }

// ---- BF16 and FP16 storage types (cuda_bf16.h, cuda_fp16.h) --------------------------------
struct __nv_bfloat16 {
  unsigned short __x;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  const unsigned bits = __float_as_uint(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<unsigned short>((bits >> 16) | 0x40)};
  const unsigned rounded = bits + 0x7fffu + ((bits >> 16) & 1u);  // to nearest, ties to even
  return {static_cast<unsigned short>(rounded >> 16)};
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) {
  return __uint_as_float(static_cast<unsigned>(b.__x) << 16);
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }

struct __half {
  unsigned short __x;
};
inline float __half2float(__half h) {
  const unsigned sign = (h.__x & 0x8000u) << 16;
  const unsigned exponent = (h.__x >> 10) & 0x1fu;
  const unsigned mantissa = h.__x & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

// ---- Launches -----------------------------------------------------------------------------
namespace scd_emu {

struct LaunchConfig;

template <typename... A>
struct BoundLaunch {
  const LaunchConfig* config;
  std::tuple<A...> args;
};

struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  LaunchConfig(dim3 g, dim3 b, size_t smem = 0, cudaStream_t s = nullptr)
      : grid(g), block(b), shared_bytes(smem), stream(s) {}
  template <typename... A>
  BoundLaunch<std::decay_t<A>...> operator()(A&&... args) const {
    return {this, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
  }
};

// Checks the configuration as cudaLaunchKernel does (a bad one sets the last error and runs
// nothing) and queues `body` for every thread of every block on the configuration's stream.
void Launch(const void* kernel, const LaunchConfig& config, std::function<void()> body);

// `kernel ^ LaunchConfig(...)(args...)`: the arguments convert to the kernel's parameter types
// at the call, as they do at a <<<...>>> launch.
template <typename... P, typename... A>
void operator^(void (*kernel)(P...), BoundLaunch<A...>&& bound) {
  static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong argument count");
  auto params = std::apply([](auto&... a) { return std::tuple<P...>(a...); }, bound.args);
  Launch(reinterpret_cast<const void*>(kernel), *bound.config,
         [kernel, params] { std::apply(kernel, params); });
}

}  // namespace scd_emu

#endif  // SCD_TESTS_GPU_EMU_DEVICE_H_
