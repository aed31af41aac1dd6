// Temperature / top-k / top-p sampling on the device (see ops.h), in the CPU twin's order of
// operations (scd::Sampler, HF's warpers):
//   1. keys = logits / temperature (IEEE division, as the twin), one row per segment;
//   2. a stable descending segmented radix sort of (key, token id) pairs (CUB): the twin's
//      order, larger key first and the lower id first among equal keys;
//   3. one block per row: p_i = exp(key_i - key_0) for the top_k kept (exp in double rounded
//      to float: the correctly rounded expf the twin's glibc gives), their total in double, the
//      nucleus cut at the first prefix whose mass reaches top_p · total, and the draw
//      u = canonical · (mass kept): the first token whose prefix mass reaches u. Prefix sums
//      are block scans in double, chunk by chunk, so a row never needs more than one pass
//      over its kept tokens.
// Greedy rows (temperature 0 or top_k 1) take the first sorted token, the argmax with the
// lowest id on ties.
#include <climits>
#include <cmath>
#include <cub/cub.cuh>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_common.cuh"
#include "kernels/cuda/ops.h"

namespace scd::cuda {
namespace {

using internal::AsStream;

constexpr int kThreads = 512;

__global__ void SampleKeysKernel(const float* __restrict__ logits, const SampleParams* params,
                                 int rows, int vocab, float* __restrict__ keys,
                                 int32_t* __restrict__ ids, int* __restrict__ offsets) {
  const int64_t count = static_cast<int64_t>(rows) * vocab;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int r = static_cast<int>(i / vocab);
    const SampleParams p = params[r];
    const bool greedy = p.temperature == 0.0f || p.top_k == 1;
    keys[i] = greedy ? logits[i] : logits[i] / p.temperature;
    ids[i] = static_cast<int32_t>(i - static_cast<int64_t>(r) * vocab);
    if (i - static_cast<int64_t>(r) * vocab == 0) offsets[r] = static_cast<int>(i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) offsets[rows] = static_cast<int>(count);
}

struct SampleShared {
  union {
    cub::BlockScan<double, kThreads>::TempStorage scan;
    cub::BlockReduce<double, kThreads>::TempStorage reduce;
  } cub;
  double carry;
  double total;
  int found;
};

__device__ __forceinline__ double Prob(const float* keys, float max_key, int i) {
  return static_cast<double>(static_cast<float>(exp(static_cast<double>(keys[i] - max_key))));
}

// Sum of Prob over [0, n) (every thread gets it).
__device__ double MassBelow(const float* keys, float max_key, int n, SampleShared& sh) {
  double local = 0.0;
  for (int i = threadIdx.x; i < n; i += kThreads) local += Prob(keys, max_key, i);
  const double sum = cub::BlockReduce<double, kThreads>(sh.cub.reduce).Sum(local);
  if (threadIdx.x == 0) sh.total = sum;
  __syncthreads();
  const double total = sh.total;
  __syncthreads();
  return total;
}

// The first i < n whose prefix mass Σ_{j<=i} Prob(j) reaches `target`, or -1.
__device__ int FirstCrossing(const float* keys, float max_key, int n, double target,
                             SampleShared& sh) {
  double carry = 0.0;
  for (int base = 0; base < n; base += kThreads) {
    const int i = base + threadIdx.x;
    const double v = i < n ? Prob(keys, max_key, i) : 0.0;
    double prefix = 0.0;
    cub::BlockScan<double, kThreads>(sh.cub.scan).InclusiveSum(v, prefix);
    prefix += carry;
    if (threadIdx.x == 0) sh.found = INT_MAX;
    __syncthreads();
    if (i < n && prefix >= target) atomicMin(&sh.found, i);
    if (threadIdx.x == kThreads - 1) sh.carry = prefix;
    __syncthreads();
    const int found = sh.found;
    carry = sh.carry;
    __syncthreads();  // sh is reused by the next chunk
    if (found != INT_MAX) return found;
  }
  return -1;
}

__global__ void __launch_bounds__(kThreads)
    SampleFromSortedKernel(const float* __restrict__ sorted_keys,
                           const int32_t* __restrict__ sorted_ids, int vocab,
                           const SampleParams* __restrict__ params, int32_t* __restrict__ out) {
  __shared__ SampleShared sh;
  const int r = blockIdx.x;
  const float* keys = sorted_keys + static_cast<int64_t>(r) * vocab;
  const int32_t* ids = sorted_ids + static_cast<int64_t>(r) * vocab;
  const SampleParams p = params[r];
  if (p.temperature == 0.0f || p.top_k == 1) {
    if (threadIdx.x == 0) out[r] = ids[0];
    return;
  }
  const int keep = p.top_k > 0 && p.top_k < vocab ? p.top_k : vocab;
  const float max_key = keys[0];
  const double total = MassBelow(keys, max_key, keep, sh);
  int cut = keep;
  double kept_mass = total;
  if (p.top_p < 1.0f) {
    const int first = FirstCrossing(keys, max_key, keep, static_cast<double>(p.top_p) * total, sh);
    if (first >= 0) cut = first + 1;
    if (cut < keep) kept_mass = MassBelow(keys, max_key, cut, sh);
  }
  const int pick = FirstCrossing(keys, max_key, cut, p.canonical * kept_mass, sh);
  if (threadIdx.x == 0) out[r] = ids[pick >= 0 ? pick : cut - 1];
}

struct SampleLayout {
  size_t keys = 0, sorted_keys = 0, ids = 0, sorted_ids = 0, offsets = 0, cub = 0, total = 0;
  size_t cub_bytes = 0;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

// The workspace's parts for a checked shape (SampleShape), CUB's size query included.
absl::StatusOr<SampleLayout> Layout(int rows, int vocab) {
  if (absl::Status s = launch_checks::SampleShape(rows, vocab); !s.ok()) return s;
  SampleLayout l;
  const size_t n = static_cast<size_t>(rows) * vocab;
  size_t at = 0;
  l.keys = at;
  at += Align(n * sizeof(float));
  l.sorted_keys = at;
  at += Align(n * sizeof(float));
  l.ids = at;
  at += Align(n * sizeof(int32_t));
  l.sorted_ids = at;
  at += Align(n * sizeof(int32_t));
  l.offsets = at;
  at += Align((static_cast<size_t>(rows) + 1) * sizeof(int));
  l.cub = at;
  size_t cub_bytes = 0;
  const cudaError_t e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, cub_bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n),
      rows, static_cast<const int*>(nullptr), static_cast<const int*>(nullptr));
  if (absl::Status s = CudaStatus(e, "cub::DeviceSegmentedRadixSort (size query)"); !s.ok()) {
    return s;
  }
  l.cub_bytes = cub_bytes;
  l.total = at + Align(cub_bytes);
  return l;
}

}  // namespace

absl::StatusOr<size_t> SampleRowsWorkspaceBytes(int rows, int vocab) {
  absl::StatusOr<SampleLayout> layout = Layout(rows, vocab);
  if (!layout.ok()) return layout.status();
  return layout->total;
}

absl::Status SampleRows(const float* logits, const SampleParams* params, int rows, int vocab,
                        int32_t* out, void* workspace, size_t workspace_bytes,
                        StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  absl::StatusOr<SampleLayout> layout = Layout(rows, vocab);
  if (!layout.ok()) return layout.status();
  if (absl::Status s = launch_checks::Workspace("SampleRows", static_cast<int64_t>(workspace_bytes),
                                                static_cast<int64_t>(layout->total), "bytes");
      !s.ok()) {
    return s;
  }
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  float* keys = reinterpret_cast<float*>(ws + layout->keys);
  float* sorted_keys = reinterpret_cast<float*>(ws + layout->sorted_keys);
  int32_t* ids = reinterpret_cast<int32_t*>(ws + layout->ids);
  int32_t* sorted_ids = reinterpret_cast<int32_t*>(ws + layout->sorted_ids);
  int* offsets = reinterpret_cast<int*>(ws + layout->offsets);
  const int64_t count = static_cast<int64_t>(rows) * vocab;
  SampleKeysKernel<<<internal::GridFor(count, 256), 256, 0, AsStream(stream)>>>(
      logits, params, rows, vocab, keys, ids, offsets);
  if (absl::Status s = LaunchStatus("SampleKeysKernel"); !s.ok()) return s;
  size_t cub_bytes = layout->cub_bytes;
  const cudaError_t e = cub::DeviceSegmentedRadixSort::SortPairsDescending(
      ws + layout->cub, cub_bytes, keys, sorted_keys, ids, sorted_ids, static_cast<int>(count),
      rows, offsets, offsets + 1, 0, 32, AsStream(stream));
  if (absl::Status s = CudaStatus(e, "cub::DeviceSegmentedRadixSort::SortPairsDescending");
      !s.ok()) {
    return s;
  }
  SampleFromSortedKernel<<<rows, kThreads, 0, AsStream(stream)>>>(sorted_keys, sorted_ids, vocab,
                                                                  params, out);
  return LaunchStatus("SampleFromSortedKernel");
}

}  // namespace scd::cuda
