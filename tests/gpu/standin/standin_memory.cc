// CPU stand-ins of kernels/cuda/device_memory.h (device_memory.cc), shared by test_gpu_host
// and test_cuda_host: one "device" whose memory is host memory. They keep the runtime's
// semantics that host code could get wrong:
//   - cudaMalloc: 256-byte aligned, uninitialised (poisoned here), a 0-byte Allocate is empty;
//     Reserve never shrinks and keeps nothing. Each allocation lies between inaccessible
//     pages and is unmapped when freed, so a kernel emulated on the CPU (tests/gpu/emu) that
//     reads or writes past its buffer, or a freed one, faults as it would on a GPU.
//   - every live allocation is registered, so the launchers (standin_ops.cc, standin_launchers.cc)
//     can require that their pointers are device memory (standin_memory.h); H2D copies must
//     write device memory from host memory, D2H the reverse, D2D device to device.
//   - asynchronous work is asynchronous: every launch and copy is queued on its stream and
//     runs, in order, only when that stream is drained (a synchronisation of the stream, of an
//     event recorded on it, a timer's stop, an event wait, or a freeing, which synchronises
//     as cudaFree does). So host code that reads pinned results before synchronising, or
//     rewrites a pinned source an upload still has to read, sees the wrong bytes, as it could
//     on a GPU. Copies from pageable memory are staged at the call and copies into it wait for
//     the stream, as the CUDA runtime does them; *Sync copies use the legacy stream, which
//     does not wait for the (non-blocking) streams.
//   - graph capture (Graph): while a stream captures, what is queued there is recorded
//     instead, and a replay queues the recording again. Instantiation takes kGraphNodeBytes
//     of device memory per recorded operation (fails as cudaGraphInstantiate does when the
//     device is full) until the graph is destroyed. The capturing thread may not
//     synchronise, allocate, free or copy between pageable memory and the device (CUDA
//     refuses these in thread-local capture mode): the stand-ins abort.
//   - host registration (HostRegistration): the range counts as pinned memory until
//     unregistered; a range with a page that is registered or pinned already is refused, as
//     cudaHostRegister refuses it.
//   - device memory is finite (SetDeviceMemoryBytes; 64 GiB until set): an allocation past
//     it fails with RESOURCE_EXHAUSTED, as cudaMalloc does, and MemoryInfo reports what is
//     left.
//   - the device: ReadDevice reports one, with driver and runtime CUDA 13.0, so the [cuda]
//     tests run their bodies instead of skipping; SetDeviceReading stands for a machine
//     without a usable device (DeviceCount and DeviceStatus follow it).
#include "tests/gpu/standin/standin_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/device_memory.h"

namespace scd::cuda {
namespace standin {
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

size_t PageBytes() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }

size_t Rounded(size_t bytes) {
  return (bytes + kDeviceAlignment - 1) / kDeviceAlignment * kDeviceAlignment;
}

// Streams capturing a graph, with what was queued on them since the capture began.
std::map<StreamHandle, std::vector<std::function<void()>>>& Captures() {
  static auto* captures = new std::map<StreamHandle, std::vector<std::function<void()>>>;
  return *captures;
}

// Captures this thread has open (Graph::Capture).
thread_local int t_open_captures = 0;

void RequireNotCapturing(const char* what) {
  if (t_open_captures > 0) {
    std::fprintf(stderr, "stand-in: %s while this thread captures a graph (CUDA refuses it)\n",
                 what);
    std::abort();
  }
}

// The mapping that holds an allocation of `bytes` at p: an inaccessible page, the pages of
// the allocation, another inaccessible page. The allocation ends where the second guard page
// starts, so an access past its 256-byte rounding faults at once, as an illegal address does
// on a GPU (the emulated kernels of tests/gpu/emu read and write through raw pointers).
std::pair<char*, size_t> Mapping(void* p, size_t bytes) {
  const size_t page = PageBytes();
  char* const end = static_cast<char*>(p) + Rounded(bytes);
  char* const first = reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(p) / page * page);
  return {first - page, static_cast<size_t>(end + page - (first - page))};
}

// The device's memory (MemoryInfo's total) and the bytes its live allocations hold, each
// counted rounded to cudaMalloc's 256 bytes.
size_t device_total = size_t{64} << 30;
size_t device_in_use = 0;

void* DeviceAlloc(size_t bytes) {
  RequireNotCapturing("cudaMalloc");
  const size_t page = PageBytes(), rounded = Rounded(bytes);
  const size_t pages = (rounded + page - 1) / page;
  void* base = mmap(nullptr, (pages + 2) * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  Require(base != MAP_FAILED, "host memory for a device allocation");
  char* const body = static_cast<char*>(base) + page;
  Require(mprotect(body, pages * page, PROT_READ | PROT_WRITE) == 0, "mprotect of an allocation");
  void* p = body + pages * page - rounded;  // 256-byte aligned: page and rounded are multiples
  std::memset(p, kPoison, rounded);         // uninitialised device memory
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

// Counts `bytes` as in use when they fit the device; false (nothing counted) when not.
bool TakeDeviceBytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  if (Rounded(bytes) > device_total - device_in_use) return false;
  device_in_use += Rounded(bytes);
  return true;
}

// Gives back what TakeDeviceBytes counted.
void ReturnDeviceBytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Require(device_in_use >= Rounded(bytes), "device bytes returned that were never taken");
  device_in_use -= Rounded(bytes);
}

void DeviceFree(void* p, size_t bytes) {
  RequireNotCapturing("cudaFree");
  CountHostWait();
  DrainAll();  // cudaFree waits for the device's work
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Require(Registry().erase(reinterpret_cast<uintptr_t>(p)) == 1, "free of a live allocation");
  }
  ReturnDeviceBytes(bytes);
  const auto [base, length] = Mapping(p, bytes);
  munmap(base, length);  // a later access of freed memory faults
}

// Live pinned host allocations: start address -> bytes.
std::map<uintptr_t, size_t>& PinnedRegistry() {
  static auto* live = new std::map<uintptr_t, size_t>;
  return *live;
}

// Live host registrations (HostRegistration): start address -> bytes.
std::map<uintptr_t, size_t>& Registrations() {
  static auto* live = new std::map<uintptr_t, size_t>;
  return *live;
}

// Each stream's queued work (nullptr: the legacy stream).
std::map<StreamHandle, std::deque<std::function<void()>>>& Queues() {
  static auto* queues = new std::map<StreamHandle, std::deque<std::function<void()>>>;
  return *queues;
}

std::mutex& QueueMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// The range of `ranges` (start -> bytes) holding address a: (start, bytes), or (0, 0).
std::pair<uintptr_t, size_t> RangeAt(const std::map<uintptr_t, size_t>& ranges, uintptr_t a) {
  auto it = ranges.upper_bound(a);
  if (it == ranges.begin()) return {0, 0};
  --it;
  if (a >= it->first && a < it->first + it->second) return *it;
  return {0, 0};
}

// The allocation holding p: (start, bytes), or (0, 0).
std::pair<uintptr_t, size_t> Find(const void* p) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return RangeAt(Registry(), reinterpret_cast<uintptr_t>(p));
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

std::vector<float> Widen(const Bf16* x, int64_t count) {
  std::vector<float> y(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) y[static_cast<size_t>(i)] = Bf16ToFloat(x[i]);
  return y;
}

namespace {

// True when [a, a + bytes) lies inside one range of `ranges` (start -> bytes).
bool Inside(const std::map<uintptr_t, size_t>& ranges, uintptr_t a, size_t bytes) {
  const auto [start, size] = RangeAt(ranges, a);
  return size != 0 && a + bytes <= start + size;
}

// True when a page of [a, a + bytes) is a page of a range of `ranges`.
bool SharesPage(const std::map<uintptr_t, size_t>& ranges, uintptr_t a, size_t bytes) {
  const uintptr_t page = PageBytes(), first = a / page * page;
  const uintptr_t last = (a + bytes + page - 1) / page * page;  // one past
  for (const auto& [start, size] : ranges) {
    const uintptr_t s = start / page * page, e = (start + size + page - 1) / page * page;
    if (s < last && first < e) return true;
  }
  return false;
}

}  // namespace

size_t PinnedBytesInUse() {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  size_t bytes = 0;
  for (const auto& [start, size] : PinnedRegistry()) bytes += size;
  return bytes;
}

bool IsPinned(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(RegistryMutex());
  return Inside(PinnedRegistry(), a, bytes) || Inside(Registrations(), a, bytes);
}

void Enqueue(StreamHandle stream, std::function<void()> work) {
  std::lock_guard<std::mutex> lock(QueueMutex());
  auto capture = Captures().find(stream);
  if (capture != Captures().end()) {
    capture->second.push_back(std::move(work));
    return;
  }
  Queues()[stream].push_back(std::move(work));
}

void Drain(StreamHandle stream) {
  RequireNotCapturing("a synchronisation");
  for (;;) {
    std::function<void()> work;
    {
      std::lock_guard<std::mutex> lock(QueueMutex());
      auto it = Queues().find(stream);
      if (it == Queues().end() || it->second.empty()) return;
      work = std::move(it->second.front());
      it->second.pop_front();
    }
    work();
  }
}

void DrainAll() {
  RequireNotCapturing("a device synchronisation");
  for (;;) {
    std::vector<StreamHandle> busy;
    {
      std::lock_guard<std::mutex> lock(QueueMutex());
      for (const auto& [stream, queue] : Queues()) {
        if (!queue.empty()) busy.push_back(stream);
      }
    }
    if (busy.empty()) return;
    for (StreamHandle stream : busy) Drain(stream);
  }
}

}  // namespace standin

using standin::IsDevice;
using standin::Require;
using standin::RequireDeviceBytes;

namespace standin {
namespace {
// What the stand-in runtime and driver report: one device, CUDA 13.0 on both sides, until set.
DeviceReading& Reading() {
  static DeviceReading reading{1, "", 13000, 13000, std::nullopt};
  return reading;
}
}  // namespace

void SetDeviceReading(const DeviceReading& reading) { Reading() = reading; }
}  // namespace standin

DeviceReading ReadDevice() { return standin::Reading(); }

namespace standin {
void SetDeviceMemoryBytes(size_t total) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Require(total >= device_in_use, "a device memory size above the bytes in use");
  device_total = total;
}
}  // namespace standin

absl::StatusOr<DeviceMemoryInfo> MemoryInfo() {
  std::lock_guard<std::mutex> lock(standin::RegistryMutex());
  return DeviceMemoryInfo{standin::device_total - standin::device_in_use, standin::device_total};
}

std::string DeviceDescription(int device) {
  return "CPU stand-in device " + std::to_string(device) + " (tests/gpu/standin)";
}

namespace standin {
namespace {
std::atomic<bool> reads_pageable{false};
}  // namespace
void SetDeviceReadsPageableMemory(bool on) { reads_pageable = on; }

namespace {
std::atomic<int64_t> host_waits{0};
}  // namespace
void CountHostWait() { ++host_waits; }
int64_t HostWaits() { return host_waits; }
}  // namespace standin

bool DeviceReadsPageableMemory() { return standin::reads_pageable; }

namespace standin {
namespace {
std::atomic<bool> host_register{true}, refuse_registrations{false};
}  // namespace
void SetHostRegisterSupported(bool on) { host_register = on; }
void SetHostRegisterRefused(bool on) { refuse_registrations = on; }
}  // namespace standin

// The registered range reads as pinned memory (standin::IsPinned) until unregistered, from any
// thread; a kernel reads it at its host address (a device that may use the host pointer).
absl::StatusOr<std::unique_ptr<HostRegistration>> HostRegistration::Create(const void* data,
                                                                           size_t bytes,
                                                                           absl::string_view what) {
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("registering ", what, ": an empty range"));
  }
  Require(!IsDevice(data), "HostRegistration of host memory");
  standin::RequireNotCapturing("cudaHostRegister");
  if (!standin::host_register) {
    return absl::UnimplementedError(
        absl::StrCat("registering ", what, ": the stand-in device refuses registration"));
  }
  if (standin::refuse_registrations) {
    return absl::InternalError(absl::StrCat("cudaHostRegister(", what, ", ", bytes,
                                            " bytes) failed: the stand-in driver refuses it"));
  }
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(standin::RegistryMutex());
  if (standin::SharesPage(standin::Registrations(), a, bytes) ||
      standin::SharesPage(standin::PinnedRegistry(), a, bytes)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "cudaHostRegister(", what, ", ", bytes,
        " bytes) failed: cudaErrorHostMemoryAlreadyRegistered (a page is registered already)"));
  }
  standin::Registrations()[a] = bytes;
  const char* host = static_cast<const char*>(data);
  return std::unique_ptr<HostRegistration>(new HostRegistration(host, host, bytes, 0));
}

HostRegistration::~HostRegistration() {
  standin::RequireNotCapturing("cudaHostUnregister");
  std::lock_guard<std::mutex> lock(standin::RegistryMutex());
  Require(standin::Registrations().erase(reinterpret_cast<uintptr_t>(host_)) == 1,
          "unregistering a live registration");
}

absl::StatusOr<std::unique_ptr<Stream>> Stream::Create() {
  // A distinct non-null handle, like a cudaStream_t of a created stream.
  return std::unique_ptr<Stream>(new Stream(new char));
}

Stream::~Stream() {
  standin::Drain(handle_);  // the work queued there still completes
  delete static_cast<char*>(handle_);
}

absl::Status Stream::Synchronize() const {
  standin::CountHostWait();
  standin::Drain(handle_);
  return absl::OkStatus();
}

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
  if (data_ != nullptr) standin::DeviceFree(data_, bytes_);
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, absl::string_view what) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;           // as device_memory.cc: no allocation, null data
  if (!standin::TakeDeviceBytes(bytes)) {  // as cudaErrorMemoryAllocation (cuda_status.cc)
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaMalloc(", what, ", ", bytes, " bytes): cudaErrorMemoryAllocation: out of memory"));
  }
  buffer.data_ = standin::DeviceAlloc(bytes);
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

namespace standin {
namespace {

void PinnedFree(void* p, size_t bytes) {
  RequireNotCapturing("cudaFreeHost");
  CountHostWait();
  DrainAll();  // cudaFreeHost waits for the device's work
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    Require(PinnedRegistry().erase(reinterpret_cast<uintptr_t>(p)) == 1,
            "free of a live pinned allocation");
  }
  std::memset(p, kPoison, bytes);
  std::free(p);
}

}  // namespace
}  // namespace standin

PinnedBuffer::~PinnedBuffer() {
  if (data_ != nullptr) standin::PinnedFree(data_, bytes_);
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  if (data_ != nullptr) standin::PinnedFree(data_, bytes_);
  data_ = std::malloc(bytes);
  Require(data_ != nullptr, "host memory for a pinned buffer");
  std::memset(data_, standin::kPoison, bytes);  // cudaMallocHost does not clear either
  {
    std::lock_guard<std::mutex> lock(standin::RegistryMutex());
    standin::PinnedRegistry()[reinterpret_cast<uintptr_t>(data_)] = bytes;
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "CopyToDevice destination");
  Require(!IsDevice(src), "CopyToDevice source is host memory");
  if (standin::IsPinned(src, bytes)) {  // read when the copy runs
    standin::Enqueue(stream, [=] {
      RequireDeviceBytes(dst, bytes, "CopyToDevice destination");
      std::memcpy(dst, src, bytes);
    });
    return absl::OkStatus();
  }
  // Pageable: the runtime stages the bytes before returning.
  standin::RequireNotCapturing("a copy from pageable memory");
  auto staged = std::make_shared<std::vector<unsigned char>>(
      static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
  standin::Enqueue(stream, [=] {
    RequireDeviceBytes(dst, bytes, "CopyToDevice destination");
    std::memcpy(dst, staged->data(), bytes);
  });
  return absl::OkStatus();
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(src, bytes, "CopyToHost source");
  Require(!IsDevice(dst), "CopyToHost destination is host memory");
  auto copy = [=] {
    RequireDeviceBytes(src, bytes, "CopyToHost source");
    std::memcpy(dst, src, bytes);
  };
  if (standin::IsPinned(dst, bytes)) {  // written when the copy runs
    standin::Enqueue(stream, copy);
  } else {  // pageable: the runtime returns once the stream has reached and done the copy
    standin::RequireNotCapturing("a copy into pageable memory");
    standin::Enqueue(stream, copy);
    standin::CountHostWait();
    standin::Drain(stream);
  }
  return absl::OkStatus();
}

absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "CopyOnDevice destination");
  RequireDeviceBytes(src, bytes, "CopyOnDevice source");
  standin::Enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  return absl::OkStatus();
}

absl::Status CopyRowsOnDevice(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width_bytes, size_t rows, StreamHandle stream) {
  if (rows == 0 || width_bytes == 0) return absl::OkStatus();
  // cudaMemcpy2D rejects pitches narrower than the width.
  Require(dst_pitch >= width_bytes && src_pitch >= width_bytes, "CopyRowsOnDevice pitches");
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  RequireDeviceBytes(d, (rows - 1) * dst_pitch + width_bytes, "CopyRowsOnDevice destination");
  RequireDeviceBytes(s, (rows - 1) * src_pitch + width_bytes, "CopyRowsOnDevice source");
  standin::Enqueue(stream, [=] {
    for (size_t r = 0; r < rows; ++r) {
      std::memmove(d + r * dst_pitch, s + r * src_pitch, width_bytes);
    }
  });
  return absl::OkStatus();
}

absl::Status SetDeviceBytes(void* dst, int value, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  RequireDeviceBytes(dst, bytes, "SetDeviceBytes destination");
  standin::Enqueue(stream, [=] { std::memset(dst, value, bytes); });
  return absl::OkStatus();
}

// cudaMemcpy on the legacy stream, then (device_memory.cc) a drain of that stream; neither
// waits for the non-blocking streams.
absl::Status CopyToDeviceSync(void* dst, const void* src, size_t bytes) {
  if (absl::Status s = CopyToDevice(dst, src, bytes, nullptr); !s.ok()) return s;
  standin::CountHostWait();
  standin::Drain(nullptr);
  return absl::OkStatus();
}

absl::Status CopyToHostSync(void* dst, const void* src, size_t bytes) {
  if (absl::Status s = CopyToHost(dst, src, bytes, nullptr); !s.ok()) return s;
  standin::CountHostWait();
  standin::Drain(nullptr);
  return absl::OkStatus();
}

absl::Status SynchronizeStream(StreamHandle stream) {
  standin::CountHostWait();
  standin::Drain(stream);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Graph>> Graph::Capture(StreamHandle stream,
                                                      const std::function<absl::Status()>& record) {
  {
    std::lock_guard<std::mutex> lock(standin::QueueMutex());
    Require(standin::Captures().count(stream) == 0, "a capture on a stream that already captures");
    standin::Captures()[stream];
  }
  ++standin::t_open_captures;
  const absl::Status recorded = record();
  --standin::t_open_captures;
  auto work = std::make_unique<std::vector<std::function<void()>>>();
  {
    std::lock_guard<std::mutex> lock(standin::QueueMutex());
    auto it = standin::Captures().find(stream);
    *work = std::move(it->second);
    standin::Captures().erase(it);
  }
  if (!recorded.ok()) return recorded;
  const size_t nodes = work->size();
  // The executable graph takes device memory, as cudaGraphInstantiate does, and fails when
  // the device has none left.
  const size_t bytes = nodes * standin::kGraphNodeBytes;
  if (!standin::TakeDeviceBytes(bytes)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "cudaGraphInstantiate (", nodes, " nodes): cudaErrorMemoryAllocation: out of memory"));
  }
  return std::unique_ptr<Graph>(new Graph(work.release(), nodes, standin::Rounded(bytes)));
}

Graph::~Graph() {
  delete static_cast<std::vector<std::function<void()>>*>(exec_);
  standin::ReturnDeviceBytes(device_bytes_);
}

absl::Status Graph::Launch(StreamHandle stream) const {
  for (const auto& work : *static_cast<const std::vector<std::function<void()>>*>(exec_)) {
    standin::Enqueue(stream, work);
  }
  return absl::OkStatus();
}

absl::Status SetDevice(int device) {
  if (device != 0) return absl::InvalidArgumentError("the stand-ins have one device, 0");
  return absl::OkStatus();
}

absl::StatusOr<int> CurrentDevice() { return 0; }

// Events and timers hold a host time point, taken when their marker runs on the stream: every
// stand-in runs when its stream is drained, so the host time between two markers is the
// "device" time (positive, so that a benchmark's ratios stay finite).
using TimePoint = std::chrono::steady_clock::time_point;

namespace standin {
namespace {

struct EventState {
  TimePoint at = std::chrono::steady_clock::now();
  StreamHandle stream = nullptr;
  bool recorded = false;
};

}  // namespace
}  // namespace standin

absl::StatusOr<std::unique_ptr<Event>> Event::Create() {
  return std::unique_ptr<Event>(new Event(new standin::EventState));
}

Event::~Event() {
  auto* e = static_cast<standin::EventState*>(handle_);
  if (e->recorded) standin::Drain(e->stream);  // its marker must not outlive it
  delete e;
}

absl::Status Event::Record(StreamHandle stream) {
  auto* e = static_cast<standin::EventState*>(handle_);
  if (e->recorded && e->stream != stream) standin::Drain(e->stream);
  e->stream = stream;
  e->recorded = true;
  standin::Enqueue(stream, [e] { e->at = std::chrono::steady_clock::now(); });
  return absl::OkStatus();
}

// Work queued on `stream` later waits for the marker: draining the marker's stream now is
// sooner than a GPU would run it, never later.
absl::Status Event::WaitOn(StreamHandle) const {
  const auto* e = static_cast<const standin::EventState*>(handle_);
  if (e->recorded) standin::Drain(e->stream);
  return absl::OkStatus();
}

absl::Status Event::Synchronize() const {
  standin::CountHostWait();
  const auto* e = static_cast<const standin::EventState*>(handle_);
  if (e->recorded) standin::Drain(e->stream);
  return absl::OkStatus();
}

absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& stop) {
  const auto* a = static_cast<const standin::EventState*>(start.handle_);
  const auto* b = static_cast<const standin::EventState*>(stop.handle_);
  Require(a->recorded && b->recorded, "ElapsedMs of recorded events");
  standin::Drain(a->stream);  // cudaEventElapsedTime needs both complete
  standin::Drain(b->stream);
  const std::chrono::duration<float, std::milli> ms = b->at - a->at;
  return std::max(ms.count(), 1e-6f);
}

absl::StatusOr<std::unique_ptr<StreamTimer>> StreamTimer::Create() {
  auto timer = std::unique_ptr<StreamTimer>(new StreamTimer());
  timer->start_ = new TimePoint(std::chrono::steady_clock::now());
  timer->stop_ = new TimePoint(std::chrono::steady_clock::now());
  return timer;
}

StreamTimer::~StreamTimer() {
  standin::DrainAll();  // markers may still point at the time points
  delete static_cast<TimePoint*>(start_);
  delete static_cast<TimePoint*>(stop_);
}

absl::Status StreamTimer::Start(StreamHandle stream) {
  auto* start = static_cast<TimePoint*>(start_);
  standin::Enqueue(stream, [start] { *start = std::chrono::steady_clock::now(); });
  return absl::OkStatus();
}

absl::StatusOr<float> StreamTimer::StopMs(StreamHandle stream) {
  auto* stop = static_cast<TimePoint*>(stop_);
  standin::Enqueue(stream, [stop] { *stop = std::chrono::steady_clock::now(); });
  standin::Drain(stream);
  const std::chrono::duration<float, std::milli> ms = *stop - *static_cast<TimePoint*>(start_);
  return std::max(ms.count(), 1e-6f);
}

}  // namespace scd::cuda
