// The GPU emulator's own contract (scd_emu/device.h), checked on small kernels written here:
// warp shuffles, block barriers, what a missing barrier does, the runtime's launch checks, the
// stream order of launches, cub's collectives and radix sort, and WMMA. The kernels of
// kernels/cuda run over the same emulator in the rest of test_cuda_emu.
#include <cuda_runtime.h>
#include <mma.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cub/cub.cuh>
#include <vector>

#include "kernels/cuda/device_memory.h"

namespace {

using scd::cuda::DeviceBuffer;
using scd_emu::LaunchConfig;

template <typename T>
DeviceBuffer Upload(const std::vector<T>& host) {
  absl::StatusOr<DeviceBuffer> buffer = DeviceBuffer::Allocate(host.size() * sizeof(T), "test");
  REQUIRE(buffer.ok());
  REQUIRE(scd::cuda::CopyToDeviceSync(buffer->data(), host.data(), host.size() * sizeof(T)).ok());
  return std::move(*buffer);
}

template <typename T>
std::vector<T> Download(const DeviceBuffer& buffer, size_t count) {
  REQUIRE(scd::cuda::SynchronizeStream(nullptr).ok());
  std::vector<T> host(count);
  REQUIRE(scd::cuda::CopyToHostSync(host.data(), buffer.data(), count * sizeof(T)).ok());
  return host;
}

__global__ void WarpSumKernel(const float* in, float* out) {
  float v = in[threadIdx.x];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

// Each thread writes its slot of (dynamic) shared memory, then reads its neighbour's.
__global__ void NeighbourKernel(int* out, bool barrier) {
  int* slots = static_cast<int*>(scd_emu::DynamicShared());
  slots[threadIdx.x] = static_cast<int>(threadIdx.x);
  if (barrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

__global__ void DynamicSharedKernel(int* out) {
  int* s = static_cast<int*>(scd_emu::DynamicShared());
  s[threadIdx.x] = 1;
  __syncthreads();
  if (threadIdx.x == 0) *out = s[blockDim.x - 1] + static_cast<int>(blockIdx.x);
}

__global__ void CubKernel(const double* in, double* sum, double* prefix) {
  __shared__ typename cub::BlockReduce<double, 128>::TempStorage reduce;
  __shared__ typename cub::BlockScan<double, 128>::TempStorage scan;
  const double v = in[threadIdx.x];
  const double total = cub::BlockReduce<double, 128>(reduce).Sum(v);
  if (threadIdx.x == 0) *sum = total;
  double p = 0.0;
  cub::BlockScan<double, 128>(scan).InclusiveSum(v, p);
  prefix[threadIdx.x] = p;
}

__global__ void WmmaKernel(const __nv_bfloat16* a, const __nv_bfloat16* b, float* c) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fill_fragment(acc, 1.0f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

TEST_CASE("GPU emulator: warp shuffles exchange between the lanes of each warp", "[cpu]") {
  std::vector<float> in(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<float>(i);
  DeviceBuffer d_in = Upload(in), d_out = Upload(std::vector<float>(64));
  WarpSumKernel ^
      LaunchConfig(1, 64)(static_cast<float*>(d_in.data()), static_cast<float*>(d_out.data()));
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> out = Download<float>(d_out, 64);
  for (int i = 0; i < 32; ++i) CHECK(out[i] == 496.0f);    // 0 + ... + 31
  for (int i = 32; i < 64; ++i) CHECK(out[i] == 1520.0f);  // 32 + ... + 63
}

TEST_CASE("GPU emulator: __syncthreads orders shared memory; without it a kernel reads garbage",
          "[cpu]") {
  DeviceBuffer d_out = Upload(std::vector<int>(128));
  NeighbourKernel ^ LaunchConfig(1, 128, 128 * sizeof(int))(static_cast<int*>(d_out.data()), true);
  std::vector<int> out = Download<int>(d_out, 128);
  for (int i = 0; i < 128; ++i) CHECK(out[i] == (i + 1) % 128);
  // The first thread resumed (0, or 127 in reverse order) runs to the end of the kernel before
  // the others start, and shared memory starts poisoned in every block: the missing barrier
  // shows as a wrong value, as it could on a GPU.
  NeighbourKernel ^ LaunchConfig(2, 128, 128 * sizeof(int))(static_cast<int*>(d_out.data()), false);
  out = Download<int>(d_out, 128);
  CHECK(std::count(out.begin(), out.end(), 0x7f7f7f7f) > 0);
}

TEST_CASE("GPU emulator: launches are checked as the runtime checks them", "[cpu]") {
  DeviceBuffer d_out = Upload(std::vector<int>{-1});
  SECTION("too many threads per block") {
    DynamicSharedKernel ^
        LaunchConfig(1, 1025, 1025 * sizeof(int))(static_cast<int*>(d_out.data()));
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
    CHECK(cudaGetLastError() == cudaSuccess);  // read and cleared
  }
  SECTION("dynamic shared memory above 48 KB needs the opt-in, and 163 KB at most") {
    constexpr int kBig = 64 * 1024;
    DynamicSharedKernel ^ LaunchConfig(1, 256, kBig)(static_cast<int*>(d_out.data()));
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(Download<int>(d_out, 1)[0] == -1);  // a refused launch runs nothing
    CHECK(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               200 * 1024) == cudaErrorInvalidValue);
    REQUIRE(cudaFuncSetAttribute(DynamicSharedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 kBig) == cudaSuccess);
    DynamicSharedKernel ^ LaunchConfig(3, 256, kBig)(static_cast<int*>(d_out.data()));
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(Download<int>(d_out, 1)[0] == 1 + 2);  // the last block wrote last
  }
}

TEST_CASE("GPU emulator: a launch runs in stream order, when its stream is drained", "[cpu]") {
  DeviceBuffer d_out = Upload(std::vector<int>{-1});
  absl::StatusOr<std::unique_ptr<scd::cuda::Stream>> stream = scd::cuda::Stream::Create();
  REQUIRE(stream.ok());
  DynamicSharedKernel ^
      LaunchConfig(5, 32, 32 * sizeof(int),
                   static_cast<cudaStream_t>((*stream)->handle()))(static_cast<int*>(d_out.data()));
  std::vector<int> before(1);
  std::memcpy(before.data(), d_out.data(), sizeof(int));  // the "device" is host memory
  CHECK(before[0] == -1);
  REQUIRE((*stream)->Synchronize().ok());
  std::memcpy(before.data(), d_out.data(), sizeof(int));
  CHECK(before[0] == 1 + 4);
}

TEST_CASE("GPU emulator: cub BlockReduce and BlockScan", "[cpu]") {
  std::vector<double> in(128);
  for (int i = 0; i < 128; ++i) in[i] = 0.5 * i;
  DeviceBuffer d_in = Upload(in), d_sum = Upload(std::vector<double>(1)),
               d_prefix = Upload(std::vector<double>(128));
  CubKernel ^ LaunchConfig(1, 128)(static_cast<double*>(d_in.data()),
                                   static_cast<double*>(d_sum.data()),
                                   static_cast<double*>(d_prefix.data()));
  CHECK(Download<double>(d_sum, 1)[0] == 0.5 * 127 * 128 / 2);
  const std::vector<double> prefix = Download<double>(d_prefix, 128);
  for (int i = 0; i < 128; ++i) CHECK(prefix[i] == 0.5 * i * (i + 1) / 2);
}

TEST_CASE("GPU emulator: DeviceSegmentedRadixSort sorts each segment, descending and stable",
          "[cpu]") {
  const std::vector<float> keys = {1.0f, -0.0f, 0.0f, 3.0f, 1.0f, -2.0f, 5.0f, 5.0f, -1.0f};
  const std::vector<int32_t> values = {0, 1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int> offsets = {0, 6, 9};
  DeviceBuffer d_keys = Upload(keys), d_values = Upload(values), d_offsets = Upload(offsets);
  DeviceBuffer d_keys_out = Upload(std::vector<float>(9));
  DeviceBuffer d_values_out = Upload(std::vector<int32_t>(9));
  size_t temp_bytes = 0;
  REQUIRE(cub::DeviceSegmentedRadixSort::SortPairsDescending(
              nullptr, temp_bytes, static_cast<float*>(d_keys.data()),
              static_cast<float*>(d_keys_out.data()), static_cast<int32_t*>(d_values.data()),
              static_cast<int32_t*>(d_values_out.data()), 9, 2, static_cast<int*>(d_offsets.data()),
              static_cast<int*>(d_offsets.data()) + 1) == cudaSuccess);
  REQUIRE(temp_bytes > 0);
  DeviceBuffer d_temp = Upload(std::vector<unsigned char>(temp_bytes));
  REQUIRE(cub::DeviceSegmentedRadixSort::SortPairsDescending(
              d_temp.data(), temp_bytes, static_cast<float*>(d_keys.data()),
              static_cast<float*>(d_keys_out.data()), static_cast<int32_t*>(d_values.data()),
              static_cast<int32_t*>(d_values_out.data()), 9, 2, static_cast<int*>(d_offsets.data()),
              static_cast<int*>(d_offsets.data()) + 1) == cudaSuccess);
  // +0 sorts above -0 (radix order of the bits); equal keys keep their order.
  CHECK(Download<int32_t>(d_values_out, 9) == std::vector<int32_t>{3, 0, 4, 2, 1, 5, 6, 7, 8});
}

TEST_CASE("GPU emulator: WMMA computes a BF16 tile product in float", "[cpu]") {
  std::vector<__nv_bfloat16> a(256), b(256);
  for (int i = 0; i < 256; ++i) {
    a[i] = __float2bfloat16_rn(0.25f * static_cast<float>(i % 7) - 0.5f);
    b[i] = __float2bfloat16_rn(0.125f * static_cast<float>(i % 5) + 0.25f);
  }
  DeviceBuffer d_a = Upload(a), d_b = Upload(b), d_c = Upload(std::vector<float>(256));
  WmmaKernel ^ LaunchConfig(1, 32)(static_cast<__nv_bfloat16*>(d_a.data()),
                                   static_cast<__nv_bfloat16*>(d_b.data()),
                                   static_cast<float*>(d_c.data()));
  const std::vector<float> c = Download<float>(d_c, 256);
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 16; ++j) {
      float want = 1.0f;  // b is column-major: element (k, j) at b[j * 16 + k]
      for (int k = 0; k < 16; ++k) {
        want += __bfloat162float(a[i * 16 + k]) * __bfloat162float(b[j * 16 + k]);
      }
      CHECK(c[i * 16 + j] == want);
    }
  }
}

}  // namespace
