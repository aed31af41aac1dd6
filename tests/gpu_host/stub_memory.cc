// CPU stand-ins of kernels/cuda/device_memory.h (device_memory.cc), shared by test_gpu_host
// and test_cuda_host: one "device" whose memory is host memory. They keep the runtime's
// semantics that host code could get wrong:
//   - cudaMalloc: 256-byte aligned, uninitialised (poisoned here), a 0-byte Allocate is empty;
//     Reserve never shrinks and keeps nothing; freed memory is poisoned before it goes.
//   - every live allocation is registered, so the launchers (stub_ops.cc, stub_launchers.cc)
//     can require that their pointers are device memory (stub_memory.h); H2D copies must
//     write device memory from host memory, D2H the reverse, D2D device to device.
//   - asynchronous copies run at call time: the one stream is in order, so work queued later
//     sees them, as on the device.
// DeviceCount() is 1, so the [cuda] tests run their bodies instead of skipping.
#include "tests/gpu_host/stub_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/device_memory.h"

namespace scd::cuda {
namespace stub {
namespace {

constexpr size_t kDeviceAlignment = 256;  // what cudaMalloc guarantees

std::mutex& RegistryMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// Live allocations: start address -> bytes.
std::map<uintptr_t, size_t>& Registry() {
  static auto* live = new std::map<uintptr_t, size_t>;
  return *live;
}

void* DeviceAlloc(size_t bytes) {
  const size_t rounded = (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
  void* p = std::aligned_alloc(kDeviceAlignment, rounded);
  Require(p != nullptr, "host memory for a device allocation");
  std::memset(p, kPoison, rounded);  // uninitialised device memory
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void DeviceFree(void* p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Require(Registry().erase(reinterpret_cast<uintptr_t>(p)) == 1, "free of a live allocation");
  }
  std::memset(p, kPoison, bytes);  // a later read of freed memory shows
  std::free(p);
}

// The allocation holding p: (start, bytes), or (0, 0).
std::pair<uintptr_t, size_t> Find(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto it = Registry().upper_bound(a);
  if (it == Registry().begin()) return {0, 0};
  --it;
  if (a >= it->first && a < it->first + it->second) return *it;
  return {0, 0};
}

}  // namespace

void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "stand-in: precondition broken: %s\n", what);
    std::abort();
  }
}

void RequireDeviceBytes(const void* p, size_t bytes, const char* what) {
  if (bytes == 0) return;
  const auto [start, size] = Find(p);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (size == 0 || a + bytes > start + size) {
    std::fprintf(stderr,
                 "stand-in: %s: [%p, +%zu bytes) is not inside one live device allocation"
                 " (found %zu bytes at %p)\n",
                 what, p, bytes, size, reinterpret_cast<void*>(start));
    std::abort();
  }
}

bool IsDevice(const void* p) { return Find(p).second != 0; }

}  // namespace stub

using stub::IsDevice;
using stub::Require;
using stub::RequireDeviceBytes;

int DeviceCount() { return 1; }

std::string DeviceDescription(int device) {
  return "CPU stand-in device " + std::to_string(device) + " (tests/gpu_host)";
}

absl::StatusOr<std::unique_ptr<Stream>> Stream::Create() {
  // A distinct non-null handle, like a cudaStream_t of a created stream.
  return std::unique_ptr<Stream>(new Stream(new char));
}

Stream::~Stream() { delete static_cast<char*>(handle_); }

absl::Status Stream::Synchronize() const { return absl::OkStatus(); }

DeviceBuffer::~DeviceBuffer() { Release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Release() {
  if (data_ != nullptr) stub::DeviceFree(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, absl::string_view) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;  // as device_memory.cc: no allocation, null data
  buffer.data_ = stub::DeviceAlloc(bytes);
  buffer.bytes_ = bytes;
  return buffer;
}

absl::Status DeviceBuffer::Reserve(size_t bytes, absl::string_view what) {
  if (bytes <= bytes_) return absl::OkStatus();
  Release();
  absl::StatusOr<DeviceBuffer> fresh = Allocate(bytes, what);
  if (!fresh.ok()) return fresh.status();
  *this = std::move(*fresh);
  return absl::OkStatus();
}

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) {
    std::memset(data_, stub::kPoison, bytes_);
    std::free(data_);
  }
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  if (data_ != nullptr) {
    std::memset(data_, stub::kPoison, bytes_);
    std::free(data_);
  }
  data_ = std::malloc(bytes);
  Require(data_ != nullptr, "host memory for a pinned buffer");
  std::memset(data_, stub::kPoison, bytes);  // cudaMallocHost does not clear either
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, StreamHandle) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "CopyToDevice destination");
  Require(!IsDevice(src), "CopyToDevice source is host memory");
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes, StreamHandle) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(src, bytes, "CopyToHost source");
  Require(!IsDevice(dst), "CopyToHost destination is host memory");
  std::memcpy(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, StreamHandle) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "CopyOnDevice destination");
  RequireDeviceBytes(src, bytes, "CopyOnDevice source");
  std::memmove(dst, src, bytes);
  return absl::OkStatus();
}

absl::Status CopyRowsOnDevice(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width_bytes, size_t rows, StreamHandle) {
  if (rows == 0 || width_bytes == 0) return absl::OkStatus();
  // cudaMemcpy2D rejects pitches narrower than the width.
  Require(dst_pitch >= width_bytes && src_pitch >= width_bytes, "CopyRowsOnDevice pitches");
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  RequireDeviceBytes(d, (rows - 1) * dst_pitch + width_bytes, "CopyRowsOnDevice destination");
  RequireDeviceBytes(s, (rows - 1) * src_pitch + width_bytes, "CopyRowsOnDevice source");
  for (size_t r = 0; r < rows; ++r) std::memmove(d + r * dst_pitch, s + r * src_pitch, width_bytes);
  return absl::OkStatus();
}

absl::Status SetDeviceBytes(void* dst, int value, size_t bytes, StreamHandle) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "SetDeviceBytes destination");
  std::memset(dst, value, bytes);
  return absl::OkStatus();
}

absl::Status CopyToDeviceSync(void* dst, const void* src, size_t bytes) {
  return CopyToDevice(dst, src, bytes, nullptr);
}

absl::Status CopyToHostSync(void* dst, const void* src, size_t bytes) {
  return CopyToHost(dst, src, bytes, nullptr);
}

absl::Status SynchronizeStream(StreamHandle) { return absl::OkStatus(); }

absl::Status SetDevice(int device) {
  if (device != 0) return absl::InvalidArgumentError("the stand-ins have one device, 0");
  return absl::OkStatus();
}

absl::StatusOr<int> CurrentDevice() { return 0; }

// Events and timers hold a host time point: every stand-in ran at its call, so the host time
// between two records is the "device" time (positive, so that a benchmark's ratios stay
// finite). Recording, waiting and synchronising have nothing else to do.
using TimePoint = std::chrono::steady_clock::time_point;

absl::StatusOr<std::unique_ptr<Event>> Event::Create() {
  return std::unique_ptr<Event>(new Event(new TimePoint(std::chrono::steady_clock::now())));
}

Event::~Event() { delete static_cast<TimePoint*>(handle_); }

absl::Status Event::Record(StreamHandle) {
  *static_cast<TimePoint*>(handle_) = std::chrono::steady_clock::now();
  return absl::OkStatus();
}
absl::Status Event::WaitOn(StreamHandle) const { return absl::OkStatus(); }
absl::Status Event::Synchronize() const { return absl::OkStatus(); }
absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& stop) {
  const std::chrono::duration<float, std::milli> ms =
      *static_cast<TimePoint*>(stop.handle_) - *static_cast<TimePoint*>(start.handle_);
  return std::max(ms.count(), 1e-6f);
}

absl::StatusOr<std::unique_ptr<StreamTimer>> StreamTimer::Create() {
  auto timer = std::unique_ptr<StreamTimer>(new StreamTimer());
  timer->start_ = new TimePoint(std::chrono::steady_clock::now());
  return timer;
}

StreamTimer::~StreamTimer() { delete static_cast<TimePoint*>(start_); }
absl::Status StreamTimer::Start(StreamHandle) {
  *static_cast<TimePoint*>(start_) = std::chrono::steady_clock::now();
  return absl::OkStatus();
}
absl::StatusOr<float> StreamTimer::StopMs(StreamHandle) {
  const std::chrono::duration<float, std::milli> ms =
      std::chrono::steady_clock::now() - *static_cast<TimePoint*>(start_);
  return std::max(ms.count(), 1e-6f);
}

}  // namespace scd::cuda
