// Elementwise kernels (see ops.h): F32<->BF16 conversion, embedding lookup, residual and bias
// adds, SwiGLU, row scatter and the device-side random fill for benchmark weights. All are
// memory-bound grid-stride loops; their CPU twins are exact loops, so parity is bit-level
// except SwiGLU (expf vs std::exp, a few ulp).
#include <cmath>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;
using internal::GridFor;

constexpr int kThreads = 256;

__global__ void F32ToBf16Kernel(const float* __restrict__ x, Bf16* __restrict__ y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = internal::ToBf16(x[i]);
  }
}

__global__ void Bf16ToF32Kernel(const Bf16* __restrict__ x, float* __restrict__ y, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = internal::ToFloat(x[i]);
  }
}

__global__ void EmbedKernel(const Bf16* __restrict__ table, const int32_t* __restrict__ ids,
                            float* __restrict__ out, int dim) {
  const int t = blockIdx.x;
  const Bf16* row = table + static_cast<int64_t>(ids[t]) * dim;
  float* dst = out + static_cast<int64_t>(t) * dim;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) dst[i] = internal::ToFloat(row[i]);
}

__global__ void AddInPlaceKernel(float* __restrict__ y, const float* __restrict__ x,
                                 int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

__global__ void AddBiasKernel(float* __restrict__ y, const float* __restrict__ bias, int cols,
                              int64_t row_stride) {
  float* row = y + blockIdx.x * row_stride;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) row[c] += bias[c];
}

__global__ void SwiGluKernel(const float* __restrict__ gate, const float* __restrict__ up,
                             int64_t in_stride, float* __restrict__ out,
                             Bf16* __restrict__ out_bf16, int rows, int ffn) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* g_row = gate + r * in_stride;
    const float* u_row = up + r * in_stride;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < ffn; i += gridDim.x * blockDim.x) {
      const float g = g_row[i];
      const float value = g / (1.0f + expf(-g)) * u_row[i];
      if (out != nullptr) out[r * ffn + i] = value;
      if (out_bf16 != nullptr) out_bf16[r * ffn + i] = internal::ToBf16(value);
    }
  }
}

__global__ void ScatterRowsKernel(const float* __restrict__ src, int64_t src_stride,
                                  float* const* __restrict__ dst, int rows, int cols) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const float* in = src + r * src_stride;
    float* out = dst[r];
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      out[c] = in[c];
    }
  }
}

// SplitMix64 finaliser: a good 64-bit mix, so that (seed, index) pairs give independent bits.
__device__ __forceinline__ uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void FillRandomBf16Kernel(Bf16* __restrict__ x, int64_t count, uint64_t seed,
                                     float amplitude) {
  const uint64_t key = Mix64(seed ^ 0x9e3779b97f4a7c15ull);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t bits = Mix64(key + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
    // 24 random bits -> uniform in [-1, 1).
    const float u = static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
    x[i] = internal::ToBf16(u * amplitude);
  }
}

__global__ void FillF32Kernel(float* __restrict__ x, int64_t count, float value) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = value;
  }
}

unsigned RowsPerGrid(int rows) { return static_cast<unsigned>(rows < 65535 ? rows : 65535); }

unsigned BlocksPerRow(int cols) {
  const int64_t b = internal::CeilDiv(cols, kThreads);
  return static_cast<unsigned>(b < 64 ? b : 64);
}

}  // namespace

absl::Status F32ToBf16(const float* x, Bf16* y, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  F32ToBf16Kernel<<<GridFor(count, kThreads), kThreads, 0, AsStream(stream)>>>(x, y, count);
  return LaunchStatus("F32ToBf16Kernel");
}

absl::Status Bf16ToF32(const Bf16* x, float* y, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  Bf16ToF32Kernel<<<GridFor(count, kThreads), kThreads, 0, AsStream(stream)>>>(x, y, count);
  return LaunchStatus("Bf16ToF32Kernel");
}

absl::Status Embed(const Bf16* table, const int32_t* ids, float* out, int tokens, int dim,
                   StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  EmbedKernel<<<tokens, 128, 0, AsStream(stream)>>>(table, ids, out, dim);
  return LaunchStatus("EmbedKernel");
}

absl::Status AddInPlace(float* y, const float* x, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  AddInPlaceKernel<<<GridFor(count, kThreads), kThreads, 0, AsStream(stream)>>>(y, x, count);
  return LaunchStatus("AddInPlaceKernel");
}

absl::Status AddBias(float* y, const float* bias, int rows, int cols, int64_t row_stride,
                     StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  AddBiasKernel<<<rows, 128, 0, AsStream(stream)>>>(y, bias, cols, row_stride);
  return LaunchStatus("AddBiasKernel");
}

absl::Status SwiGlu(const float* gate, const float* up, int64_t in_stride, float* out,
                    Bf16* out_bf16, int rows, int ffn, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  const dim3 grid(BlocksPerRow(ffn), RowsPerGrid(rows));
  SwiGluKernel<<<grid, kThreads, 0, AsStream(stream)>>>(gate, up, in_stride, out, out_bf16, rows,
                                                        ffn);
  return LaunchStatus("SwiGluKernel");
}

absl::Status ScatterRows(const float* src, int64_t src_stride, float* const* dst, int rows,
                         int cols, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  const dim3 grid(BlocksPerRow(cols), RowsPerGrid(rows));
  ScatterRowsKernel<<<grid, kThreads, 0, AsStream(stream)>>>(src, src_stride, dst, rows, cols);
  return LaunchStatus("ScatterRowsKernel");
}

absl::Status FillRandomBf16(Bf16* x, int64_t count, uint64_t seed, float stddev,
                            StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  const float amplitude = stddev * 1.7320508075688772f;  // uniform(-a, a) has std a/sqrt(3)
  FillRandomBf16Kernel<<<GridFor(count, kThreads), kThreads, 0, AsStream(stream)>>>(x, count, seed,
                                                                                    amplitude);
  return LaunchStatus("FillRandomBf16Kernel");
}

absl::Status FillF32(float* x, int64_t count, float value, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  FillF32Kernel<<<GridFor(count, kThreads), kThreads, 0, AsStream(stream)>>>(x, count, value);
  return LaunchStatus("FillF32Kernel");
}

}  // namespace scd::cuda
