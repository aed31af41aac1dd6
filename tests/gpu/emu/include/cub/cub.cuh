// The GPU emulator's cub: the three collectives kernels/cuda/sampling.cu uses, with cub's
// contracts. BlockReduce::Sum's result is defined in thread 0 only (other threads get NaN
// here, so a kernel that relies on it fails); BlockScan gives every thread its prefix. Both
// need blockDim.x == BLOCK_THREADS, and reusing TempStorage needs a __syncthreads first, as in
// cub. DeviceSegmentedRadixSort::SortPairsDescending is a stable sort of each segment by the
// key's radix order (for floats: +NaN > +inf > ... > +0 > -0 > ... > -inf), queued on the
// stream; the temp-storage query and size check follow cub's two-call protocol.
#ifndef SCD_TESTS_GPU_EMU_CUB_CUB_CUH_
#define SCD_TESTS_GPU_EMU_CUB_CUB_CUH_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "scd_emu/device.h"

namespace scd_emu {

// Queues `work` on `stream` (the stand-in stream queue, tests/gpu/standin/standin_memory.h).
void EnqueueOnStream(cudaStream_t stream, std::function<void()> work);
// Requires [p, p + bytes) inside one live device allocation.
void RequireDeviceRange(const void* p, size_t bytes, const char* what);

inline void RequireBlockThreads(int threads, const char* what) {
  if (static_cast<int>(blockDim.x * blockDim.y * blockDim.z) != threads) Fail(what);
}

}  // namespace scd_emu

namespace cub {

template <typename T, int BLOCK_THREADS>
class BlockReduce {
 public:
  struct TempStorage {
    T values[BLOCK_THREADS];
  };
  explicit BlockReduce(TempStorage& storage) : storage_(storage) {}

  T Sum(T input) {
    scd_emu::RequireBlockThreads(BLOCK_THREADS, "cub::BlockReduce: blockDim != BLOCK_THREADS");
    storage_.values[threadIdx.x] = input;
    __syncthreads();
    if (threadIdx.x != 0) return std::numeric_limits<T>::quiet_NaN();  // undefined in cub
    T sum = T(0);
    for (int i = 0; i < BLOCK_THREADS; ++i) sum += storage_.values[i];
    return sum;
  }

 private:
  TempStorage& storage_;
};

template <typename T, int BLOCK_THREADS>
class BlockScan {
 public:
  struct TempStorage {
    T values[BLOCK_THREADS];
  };
  explicit BlockScan(TempStorage& storage) : storage_(storage) {}

  void InclusiveSum(T input, T& output) {
    scd_emu::RequireBlockThreads(BLOCK_THREADS, "cub::BlockScan: blockDim != BLOCK_THREADS");
    storage_.values[threadIdx.x] = input;
    __syncthreads();
    T sum = T(0);
    for (unsigned i = 0; i <= threadIdx.x; ++i) sum += storage_.values[i];
    output = sum;
  }

 private:
  TempStorage& storage_;
};

namespace emu_detail {

// The unsigned key whose order is the radix sort's ascending order.
inline uint64_t RadixKey(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}
template <typename K>
uint64_t RadixKey(K k) {
  static_assert(std::is_integral<K>::value, "radix keys are floats or integers");
  using U = std::make_unsigned_t<K>;
  U u = static_cast<U>(k);
  if (std::is_signed<K>::value) u ^= U(1) << (sizeof(K) * 8 - 1);
  return u;
}

}  // namespace emu_detail

struct DeviceSegmentedRadixSort {
  template <typename K, typename V, typename OffsetIt>
  static cudaError_t SortPairsDescending(void* temp, size_t& temp_bytes, const K* keys_in,
                                         K* keys_out, const V* values_in, V* values_out,
                                         int num_items, int num_segments, OffsetIt begin_offsets,
                                         OffsetIt end_offsets, int begin_bit = 0,
                                         int end_bit = sizeof(K) * 8,
                                         cudaStream_t stream = nullptr) {
    constexpr size_t kTempBytes = 512;
    if (temp == nullptr) {
      temp_bytes = kTempBytes;
      return cudaSuccess;
    }
    if (temp_bytes < kTempBytes || begin_bit != 0 || end_bit != static_cast<int>(sizeof(K) * 8)) {
      return cudaErrorInvalidValue;
    }
    scd_emu::RequireDeviceRange(temp, temp_bytes, "cub temp storage");
    scd_emu::RequireDeviceRange(keys_in, sizeof(K) * num_items, "cub keys_in");
    scd_emu::RequireDeviceRange(keys_out, sizeof(K) * num_items, "cub keys_out");
    scd_emu::RequireDeviceRange(values_in, sizeof(V) * num_items, "cub values_in");
    scd_emu::RequireDeviceRange(values_out, sizeof(V) * num_items, "cub values_out");
    scd_emu::EnqueueOnStream(stream, [=] {
      std::memset(temp, 0x7f, kTempBytes);  // cub scribbles on its temp storage
      for (int s = 0; s < num_segments; ++s) {
        const int begin = begin_offsets[s], end = end_offsets[s];
        if (begin < 0 || end > num_items || begin > end) scd_emu::Fail("cub: bad segment");
        std::vector<int> order(static_cast<size_t>(end - begin));
        std::iota(order.begin(), order.end(), begin);
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
          return emu_detail::RadixKey(keys_in[a]) > emu_detail::RadixKey(keys_in[b]);
        });
        for (int i = begin; i < end; ++i) {
          keys_out[i] = keys_in[order[static_cast<size_t>(i - begin)]];
          values_out[i] = values_in[order[static_cast<size_t>(i - begin)]];
        }
      }
    });
    return cudaSuccess;
  }
};

}  // namespace cub

#endif  // SCD_TESTS_GPU_EMU_CUB_CUB_CUH_
