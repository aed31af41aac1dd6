// Kernels over logits rows (see ops.h): the negative log-likelihood behind per-token surprisal
// (-log p(x_t | x_<t) = logsumexp(z) - z[x_t]), with the sum of exponentials accumulated in
// double exactly as the CPU twin does, and the row argmax for greedy decoding on the device
// (lowest index wins ties, like scd::ArgMax). One block per row.
#include <cmath>

#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    NegLogLikelihoodKernel(const float* __restrict__ logits, const int32_t* __restrict__ targets,
                           float* __restrict__ out, int vocab) {
  __shared__ float scratch[32];
  __shared__ double scratch_d[32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = internal::BlockMax(mx, scratch);
  double sum = 0.0;
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    sum += exp(static_cast<double>(row[j] - mx));
  }
  sum = internal::BlockSumDouble(sum, scratch_d);
  if (threadIdx.x == 0) {
    out[r] = static_cast<float>(log(sum) + static_cast<double>(mx) -
                                static_cast<double>(row[targets[r]]));
  }
}

// (value, index) order for argmax: larger value first, then lower index.
__device__ __forceinline__ bool Better(float v, int i, float best_v, int best_i) {
  return v > best_v || (v == best_v && i < best_i);
}

__global__ void __launch_bounds__(kThreads)
    ArgmaxKernel(const float* __restrict__ logits, int32_t* __restrict__ out, int vocab) {
  __shared__ float vals[32];
  __shared__ int idxs[32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  float best_v = -INFINITY;
  int best_i = vocab;  // sentinel: any real index is lower
  for (int j = threadIdx.x; j < vocab; j += kThreads) {
    if (Better(row[j], j, best_v, best_i)) {
      best_v = row[j];
      best_i = j;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, best_v, offset);
    const int i = __shfl_xor_sync(0xffffffffu, best_i, offset);
    if (Better(v, i, best_v, best_i)) {
      best_v = v;
      best_i = i;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    vals[warp] = best_v;
    idxs[warp] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) {
      if (Better(vals[w], idxs[w], best_v, best_i)) {
        best_v = vals[w];
        best_i = idxs[w];
      }
    }
    out[r] = best_i < vocab ? best_i : 0;  // all -inf/NaN rows: 0, like the twin
  }
}

}  // namespace

absl::Status NegLogLikelihood(const float* logits, const int32_t* targets, float* out, int rows,
                              int vocab, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  NegLogLikelihoodKernel<<<rows, kThreads, 0, AsStream(stream)>>>(logits, targets, out, vocab);
  return LaunchStatus("NegLogLikelihoodKernel");
}

absl::Status ArgmaxRows(const float* logits, int32_t* out, int rows, int vocab,
                        StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  ArgmaxKernel<<<rows, kThreads, 0, AsStream(stream)>>>(logits, out, vocab);
  return LaunchStatus("ArgmaxKernel");
}

}  // namespace scd::cuda
