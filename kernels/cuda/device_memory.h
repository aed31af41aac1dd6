// Device memory, pinned host memory and streams as small RAII types, so that the backend and
// the tests never touch the CUDA runtime directly. CUDA-free header: a stream is passed around
// as an opaque StreamHandle (a cudaStream_t), device memory as plain pointers.
//
// Invariants: a DeviceBuffer/PinnedBuffer owns exactly one allocation (or none) and frees it
// on destruction; Resize keeps nothing (it is for scratch space), and never shrinks. Copies are
// asynchronous on the given stream unless named *Sync; pinned host buffers make H2D/D2H copies
// truly asynchronous, so transfers can overlap with compute on other streams.
#ifndef SCD_KERNELS_CUDA_DEVICE_MEMORY_H_
#define SCD_KERNELS_CUDA_DEVICE_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/cuda/device_probe.h"

namespace scd::cuda {

using StreamHandle = void*;  // a cudaStream_t; nullptr is the legacy default stream

// What the runtime and the driver say now (device_probe.h): the device count, or why there is
// none. Never fails; any CUDA error it meets is cleared.
DeviceReading ReadDevice();

// Number of usable devices; 0 when no driver or device is present (never fails).
inline int DeviceCount() {
  const DeviceReading r = ReadDevice();
  return r.count_error.empty() ? r.device_count : 0;
}

// OK when a device is usable, else UNAVAILABLE with the reason.
inline absl::Status DeviceStatus() { return Explain(ReadDevice()); }

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)" for `device`, for logs and benchmark reports.
std::string DeviceDescription(int device);

// True when the current device reads pageable host memory in place, through the host's page
// tables (ATS, as on Grace Hopper: cudaDevAttrPageableMemoryAccess and
// cudaDevAttrPageableMemoryAccessUsesHostPageTables), so a kernel may follow a pointer into a
// std::vector without the pages moving. HMM alone (x86 over PCIe) does not count: it migrates
// the pages a kernel touches into device memory.
bool DeviceReadsPageableMemory();

// The current device's memory as its driver reports it now (cudaMemGetInfo): free and total
// bytes. Free memory is what is left after every process's allocations and the CUDA context.
struct DeviceMemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};
absl::StatusOr<DeviceMemoryInfo> MemoryInfo();

class Stream {
 public:
  static absl::StatusOr<std::unique_ptr<Stream>> Create();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamHandle handle() const { return handle_; }
  absl::Status Synchronize() const;

 private:
  explicit Stream(StreamHandle handle) : handle_(handle) {}
  StreamHandle handle_;
};

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // `bytes` of uninitialised device memory; `what` names it in errors.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes, absl::string_view what);

  // Makes the buffer hold at least `bytes` (contents are lost when it grows). The caller must
  // ensure no pending work still uses the old allocation (the backend synchronises first).
  absl::Status Reserve(size_t bytes, absl::string_view what);

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void Release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Page-locked host memory (cudaMallocHost).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  absl::Status Reserve(size_t bytes);
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t size() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Pageable host memory page-locked and mapped for the device where it lies (cudaHostRegister,
// mapped): kernels read it over the bus, as they read a PinnedBuffer, without a pinned copy of
// it. Any thread may register (with the device current) and unregister. Unregistered on
// destruction (cudaHostUnregister), which must come after the device's last read of it (wait
// first) and before the memory is freed. The driver locks whole pages and refuses a page that
// another registration or a PinnedBuffer holds: register storage whose pages are its own
// (NewFloatsWithHugePages). Fails UNIMPLEMENTED where the device cannot use registered memory
// (cudaDevAttrHostRegisterSupported 0), else as the driver refuses (such as ALREADY_EXISTS for
// a page registered already).
class HostRegistration {
 public:
  static absl::StatusOr<std::unique_ptr<HostRegistration>> Create(const void* data, size_t bytes,
                                                                  absl::string_view what);
  ~HostRegistration();
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

  // True when [p, p + bytes) lies inside the registered range.
  bool Contains(const void* p, size_t bytes) const {
    const char* c = static_cast<const char*>(p);
    return c >= host_ && bytes <= bytes_ && c - host_ <= static_cast<ptrdiff_t>(bytes_ - bytes);
  }
  // The address a kernel reads host address p (inside the range) at: the host address itself
  // where the device may use it (cudaDevAttrCanUseHostPointerForRegisteredMem), else the
  // mapping's (cudaHostGetDevicePointer).
  const void* DevicePointer(const void* p) const {
    return device_ + (static_cast<const char*>(p) - host_);
  }
  size_t size() const { return bytes_; }

 private:
  HostRegistration(const char* host, const char* device, size_t bytes, int device_index)
      : host_(host), device_(device), bytes_(bytes), device_index_(device_index) {}
  const char* host_;
  const char* device_;
  size_t bytes_;
  int device_index_;  // the device current at registration, made current to unregister
};

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, StreamHandle stream);
absl::Status CopyToHost(void* dst, const void* src, size_t bytes, StreamHandle stream);
absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, StreamHandle stream);
// 2-D copy between device rows: `rows` rows of `width_bytes`, with the given pitches.
absl::Status CopyRowsOnDevice(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width_bytes, size_t rows, StreamHandle stream);
absl::Status SetDeviceBytes(void* dst, int value, size_t bytes, StreamHandle stream);

// Blocking copies on the legacy default stream (tests and one-off uploads).
absl::Status CopyToDeviceSync(void* dst, const void* src, size_t bytes);
absl::Status CopyToHostSync(void* dst, const void* src, size_t bytes);

// Waits for all work queued on `stream`.
absl::Status SynchronizeStream(StreamHandle stream);

// Makes `device` current for the calling thread.
absl::Status SetDevice(int device);
absl::StatusOr<int> CurrentDevice();

// A CUDA event (timing enabled): orders work across streams (Record on one, WaitOn another)
// and times it.
class Event {
 public:
  static absl::StatusOr<std::unique_ptr<Event>> Create();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  absl::Status Record(StreamHandle stream);
  // Work queued on `stream` after this call waits for the last Record (no host wait).
  absl::Status WaitOn(StreamHandle stream) const;
  absl::Status Synchronize() const;
  // Milliseconds from `start` to `stop`; both recorded and complete.
  static absl::StatusOr<float> ElapsedMs(const Event& start, const Event& stop);

 private:
  explicit Event(void* handle) : handle_(handle) {}
  void* handle_;  // cudaEvent_t
};

// A CUDA graph: the work one stretch of host code queues on a stream, recorded once
// (cudaStreamBeginCapture in thread-local mode, cudaGraphInstantiate) and replayed with one
// launch, so that a decode step's few hundred kernels cost one launch on the host. A replay
// reruns the recorded work with the arguments it had: the same buffers, sizes and scalars,
// whatever those buffers hold now. While capturing, the capturing thread must not synchronise,
// allocate or copy synchronously (CUDA refuses; the CPU stand-ins abort).
class Graph {
 public:
  // Runs `record` with `stream` capturing and instantiates what it queued there. The capture
  // always ends, so the stream is usable again whatever fails; `record`'s error comes first.
  static absl::StatusOr<std::unique_ptr<Graph>> Capture(
      StreamHandle stream, const std::function<absl::Status()>& record);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Queues the recorded work on `stream`.
  absl::Status Launch(StreamHandle stream) const;
  // Operations recorded (kernels, copies, memsets).
  size_t nodes() const { return nodes_; }
  // The device memory the executable graph holds until it is destroyed: the free memory
  // cudaMemGetInfo reported before cudaGraphInstantiate less what it reported after (0 when
  // it did not shrink). The reading is device-wide, so another thread's allocation at the same
  // moment would be counted too, and the driver takes memory in pages, so a small graph may
  // read 0 (room left in a page) or a whole page.
  size_t device_bytes() const { return device_bytes_; }

 private:
  Graph(void* exec, size_t nodes, size_t device_bytes)
      : exec_(exec), nodes_(nodes), device_bytes_(device_bytes) {}
  void* exec_;  // cudaGraphExec_t
  size_t nodes_;
  size_t device_bytes_;
};

// Wall time between two points of a stream, for the benchmarks.
class StreamTimer {
 public:
  static absl::StatusOr<std::unique_ptr<StreamTimer>> Create();
  ~StreamTimer();
  absl::Status Start(StreamHandle stream);
  // Records the stop event, waits for it and returns the elapsed milliseconds.
  absl::StatusOr<float> StopMs(StreamHandle stream);

 private:
  StreamTimer() = default;
  void* start_ = nullptr;  // cudaEvent_t
  void* stop_ = nullptr;
};

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_DEVICE_MEMORY_H_
