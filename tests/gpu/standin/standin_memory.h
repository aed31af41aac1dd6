// The checks the CPU stand-ins of the CUDA calls share (tests/gpu/standin/standin_*.cc): "device"
// memory is host memory, so the stand-ins keep a registry of the live DeviceBuffer
// allocations and every launcher checks that each range it reads or writes lies inside one of
// them, aligned for its element type (a GPU faults on a host, freed, out-of-range or
// misaligned address; a host loop would not). The checks are always on (assert would vanish
// from a Release build): a broken precondition stops the test with a message.
#ifndef SCD_TESTS_GPU_STANDIN_STANDIN_MEMORY_H_
#define SCD_TESTS_GPU_STANDIN_STANDIN_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cuda/bf16.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda::standin {

// The byte every fresh or freed "device" (and pinned) byte holds: 0x7f7f7f7f is 3.4e38 as a
// float, 0x7f7f as a BF16 and a huge int32, so a read of it shows downstream.
constexpr int kPoison = 0x7f;

// Device memory a stand-in executable graph (Graph) holds per recorded operation: a figure
// of the stand-ins', not the driver's, so that graphs count against the device's memory.
constexpr size_t kGraphNodeBytes = 1024;

// Stops the test with "stand-in: precondition broken: <what>" unless `ok`.
void Require(bool ok, const char* what);

// Requires [p, p + bytes) inside one live device allocation; bytes == 0 checks nothing.
void RequireDeviceBytes(const void* p, size_t bytes, const char* what);

// True when p lies inside a live device allocation.
bool IsDevice(const void* p);

// True when [p, p + bytes) lies inside one live PinnedBuffer or HostRegistration.
bool IsPinned(const void* p, size_t bytes);

// Bytes the live PinnedBuffers hold (registrations not counted).
size_t PinnedBytesInUse();

// Whether HostRegistration::Create succeeds (true until set): false makes it fail
// UNIMPLEMENTED, as on a device without cudaDevAttrHostRegisterSupported.
void SetHostRegisterSupported(bool on);

// Whether HostRegistration::Create fails (false until set) on a device that supports
// registration, as a driver refuses a range it cannot pin.
void SetHostRegisterRefused(bool on);

// What ReadDevice reports (one device, runtime and driver CUDA 13.0, until set): DeviceCount,
// DeviceStatus and so CreateCudaBackend follow it, as on a machine without a usable device.
void SetDeviceReading(const DeviceReading& reading);

// The device's memory in bytes (64 GiB until set; at least the bytes in use): MemoryInfo's
// total, and the most that live allocations (each rounded to 256 bytes) may hold before
// DeviceBuffer::Allocate fails with RESOURCE_EXHAUSTED.
void SetDeviceMemoryBytes(size_t total);

// What DeviceReadsPageableMemory answers (false until set): a kernel stand-in then accepts
// pageable host pointers where it otherwise requires device or pinned memory.
void SetDeviceReadsPageableMemory(bool on);

// Sets what the stand-in device does with host memory for the scope of the object: whether it
// supports registration, whether its driver refuses a registration anyway, whether it reads
// pageable memory; the defaults (true, false, false) after.
class StandInDevice {
 public:
  StandInDevice(bool registers, bool reads_pageable, bool refuses = false) {
    SetHostRegisterSupported(registers);
    SetDeviceReadsPageableMemory(reads_pageable);
    SetHostRegisterRefused(refuses);
  }
  ~StandInDevice() {
    SetHostRegisterSupported(true);
    SetDeviceReadsPageableMemory(false);
    SetHostRegisterRefused(false);
  }
  StandInDevice(const StandInDevice&) = delete;
  StandInDevice& operator=(const StandInDevice&) = delete;
};

// The times the host has waited for the device so far (stream, event and synchronous-copy
// waits, copies into pageable memory, frees): what a GPU path pays a round trip for.
int64_t HostWaits();
void CountHostWait();

// Queues `work` on `stream` (nullptr: the legacy stream). Queued work runs in order, only when
// its stream is drained: Drain(stream), or DrainAll() (what cudaFree and cudaFreeHost wait for).
// A stand-in launcher checks its arguments at the call and queues what the kernel would do.
void Enqueue(StreamHandle stream, std::function<void()> work);
void Drain(StreamHandle stream);
void DrainAll();

// `count` BF16 values as floats (the stand-ins compute in float, as the CPU twins do).
std::vector<float> Widen(const Bf16* x, int64_t count);

// `count` elements of T at p: device memory, aligned for T.
template <typename T>
void RequireDevice(const T* p, int64_t count, const char* what) {
  if (count <= 0) return;
  Require(reinterpret_cast<uintptr_t>(p) % alignof(T) == 0, what);
  RequireDeviceBytes(p, static_cast<size_t>(count) * sizeof(T), what);
}

}  // namespace scd::cuda::standin

#endif  // SCD_TESTS_GPU_STANDIN_STANDIN_MEMORY_H_
