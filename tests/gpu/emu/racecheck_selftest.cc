// The race check's own check (ctest test_cuda_emu_racecheck_selftest): a kernel whose threads
// read a neighbour's shared-memory slot with no barrier after the writes must be reported by
// ThreadSanitizer, and the same kernel with the barrier must not (the test passes on the
// report, and test_cuda_emu_racecheck fails on any report). Run as
// `scd-emu-racecheck-selftest barrier|race`.
#include <cstdio>
#include <cstring>

#include "kernels/cuda/device_memory.h"
#include "scd_emu/device.h"

namespace {

__global__ void NeighbourKernel(int* out, bool barrier) {
  int* slots = static_cast<int*>(scd_emu::DynamicShared());
  slots[threadIdx.x] = static_cast<int>(threadIdx.x);
  if (barrier) __syncthreads();
  out[threadIdx.x] = slots[(threadIdx.x + 1) % blockDim.x];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || (std::strcmp(argv[1], "barrier") != 0 && std::strcmp(argv[1], "race") != 0)) {
    std::fprintf(stderr, "usage: %s barrier|race\n", argv[0]);
    return 2;
  }
  const bool barrier = std::strcmp(argv[1], "barrier") == 0;
  absl::StatusOr<scd::cuda::DeviceBuffer> out = scd::cuda::DeviceBuffer::Allocate(64 * 4, "out");
  if (!out.ok()) return 1;
  NeighbourKernel ^
      scd_emu::LaunchConfig(1, 64, 64 * sizeof(int))(static_cast<int*>(out->data()), barrier);
  if (!scd::cuda::SynchronizeStream(nullptr).ok()) return 1;
  std::printf("NeighbourKernel ran %s its barrier\n", barrier ? "with" : "without");
  return 0;
}
