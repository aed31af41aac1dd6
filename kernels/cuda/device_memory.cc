// See device_memory.h. Every runtime call goes through CudaStatus (cuda_status.h).
#include "kernels/cuda/device_memory.h"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace scd::cuda {
namespace {

cudaStream_t AsStream(StreamHandle s) { return static_cast<cudaStream_t>(s); }

}  // namespace

DeviceReading ReadDevice() {
  DeviceReading r;
  if (const cudaError_t err = cudaGetDeviceCount(&r.device_count); err != cudaSuccess) {
    r.device_count = 0;
    r.count_error = absl::StrCat(cudaGetErrorName(err), ": ", cudaGetErrorString(err));
  }
  if (cudaDriverGetVersion(&r.driver_version) != cudaSuccess) r.driver_version = 0;
  if (cudaRuntimeGetVersion(&r.runtime_version) != cudaSuccess) r.runtime_version = CUDART_VERSION;
  (void)cudaGetLastError();  // clear a sticky "no driver" error for later calls
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) r.visible_devices = visible;
  return r;
}

std::string DeviceDescription(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::StrCat("device ", device, " (properties unavailable)");
  }
  return absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major, prop.minor,
                         prop.multiProcessorCount,
                         static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

bool DeviceReadsPageableMemory() {
  int device = 0, pageable = 0, host_tables = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&host_tables, cudaDevAttrPageableMemoryAccessUsesHostPageTables,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return pageable != 0 && host_tables != 0;
}

absl::StatusOr<DeviceMemoryInfo> MemoryInfo() {
  DeviceMemoryInfo info;
  SCD_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

absl::StatusOr<std::unique_ptr<Stream>> Stream::Create() {
  cudaStream_t s = nullptr;
  SCD_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return std::unique_ptr<Stream>(new Stream(s));
}

Stream::~Stream() {
  if (handle_ != nullptr) (void)cudaStreamDestroy(AsStream(handle_));
}

absl::Status Stream::Synchronize() const {
  return CudaStatus(cudaStreamSynchronize(AsStream(handle_)), "cudaStreamSynchronize");
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
  if (data_ != nullptr) (void)cudaFree(data_);
  data_ = nullptr;
  bytes_ = 0;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Allocate(size_t bytes, absl::string_view what) {
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;
  absl::Status s = CudaStatus(cudaMalloc(&buffer.data_, bytes),
                              absl::StrCat("cudaMalloc(", what, ", ", bytes, " bytes)"));
  if (!s.ok()) {
    buffer.data_ = nullptr;
    return s;
  }
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
  if (data_ != nullptr) (void)cudaFreeHost(data_);
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_) return absl::OkStatus();
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
  absl::Status s =
      CudaStatus(cudaMallocHost(&data_, bytes), absl::StrCat("cudaMallocHost(", bytes, " bytes)"));
  if (!s.ok()) {
    data_ = nullptr;
    return s;
  }
  bytes_ = bytes;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostRegistration>> HostRegistration::Create(const void* data,
                                                                           size_t bytes,
                                                                           absl::string_view what) {
  if (data == nullptr || bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("registering ", what, ": an empty range"));
  }
  int device = 0, supported = 0;
  SCD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  SCD_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterSupported, device));
  if (supported == 0) {
    return absl::UnimplementedError(absl::StrCat("registering ", what, ": device ", device,
                                                 " cannot use registered host memory"));
  }
  void* host = const_cast<void*>(data);  // registration leaves the bytes as they are
  SCD_RETURN_IF_ERROR(CudaStatus(cudaHostRegister(host, bytes, cudaHostRegisterMapped),
                                 absl::StrCat("cudaHostRegister(", what, ", ", bytes, " bytes)")));
  void* device_ptr = nullptr;
  absl::Status s = CudaStatus(cudaHostGetDevicePointer(&device_ptr, host, 0),
                              absl::StrCat("cudaHostGetDevicePointer(", what, ")"));
  if (!s.ok()) {
    (void)cudaHostUnregister(host);
    return s;
  }
  return std::unique_ptr<HostRegistration>(new HostRegistration(
      static_cast<const char*>(data), static_cast<const char*>(device_ptr), bytes, device));
}

// The registration belongs to the context of the device that was current; the thread that
// unregisters (the decode engine's releasing thread) may have another one current.
HostRegistration::~HostRegistration() {
  (void)cudaSetDevice(device_index_);
  (void)cudaHostUnregister(const_cast<char*>(host_));
}

absl::Status CopyToDevice(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, AsStream(stream)),
                    "cudaMemcpyAsync(host to device)");
}

absl::Status CopyToHost(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, AsStream(stream)),
                    "cudaMemcpyAsync(device to host)");
}

absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, AsStream(stream)),
                    "cudaMemcpyAsync(device to device)");
}

absl::Status CopyRowsOnDevice(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                              size_t width_bytes, size_t rows, StreamHandle stream) {
  if (rows == 0 || width_bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width_bytes, rows,
                                      cudaMemcpyDeviceToDevice, AsStream(stream)),
                    "cudaMemcpy2DAsync(device to device)");
}

absl::Status SetDeviceBytes(void* dst, int value, size_t bytes, StreamHandle stream) {
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemsetAsync(dst, value, bytes, AsStream(stream)), "cudaMemsetAsync");
}

absl::Status CopyToDeviceSync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  SCD_CUDA_RETURN_IF_ERROR(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return once the data is staged, before the DMA to
  // `dst` completes; our streams are non-blocking and would not wait for it. Drain the legacy
  // stream, so that the copy is complete for every stream (these are set-up calls).
  return CudaStatus(cudaStreamSynchronize(0), "cudaStreamSynchronize(after host to device)");
}

absl::Status CopyToHostSync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return absl::OkStatus();
  return CudaStatus(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost),
                    "cudaMemcpy(device to host)");
}

absl::Status SynchronizeStream(StreamHandle stream) {
  return CudaStatus(cudaStreamSynchronize(AsStream(stream)), "cudaStreamSynchronize");
}

absl::Status SetDevice(int device) {
  return CudaStatus(cudaSetDevice(device), absl::StrCat("cudaSetDevice(", device, ")"));
}

absl::StatusOr<int> CurrentDevice() {
  int device = 0;
  SCD_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  return device;
}

absl::StatusOr<std::unique_ptr<Event>> Event::Create() {
  cudaEvent_t e = nullptr;
  SCD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
  return std::unique_ptr<Event>(new Event(e));
}

Event::~Event() {
  if (handle_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
}

absl::Status Event::Record(StreamHandle stream) {
  return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(handle_), AsStream(stream)),
                    "cudaEventRecord");
}

absl::Status Event::WaitOn(StreamHandle stream) const {
  return CudaStatus(cudaStreamWaitEvent(AsStream(stream), static_cast<cudaEvent_t>(handle_), 0),
                    "cudaStreamWaitEvent");
}

absl::Status Event::Synchronize() const {
  return CudaStatus(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)),
                    "cudaEventSynchronize");
}

absl::StatusOr<float> Event::ElapsedMs(const Event& start, const Event& stop) {
  float ms = 0.0f;
  SCD_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_),
                                                static_cast<cudaEvent_t>(stop.handle_)));
  return ms;
}

absl::StatusOr<std::unique_ptr<Graph>> Graph::Capture(StreamHandle stream,
                                                      const std::function<absl::Status()>& record) {
  SCD_CUDA_RETURN_IF_ERROR(
      cudaStreamBeginCapture(AsStream(stream), cudaStreamCaptureModeThreadLocal));
  const absl::Status recorded = record();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(AsStream(stream), &graph);
  if (!recorded.ok() || ended != cudaSuccess) {
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();  // a launch refused during capture is not sticky: clear it
    if (!recorded.ok()) return recorded;
    return CudaStatus(ended, "cudaStreamEndCapture");
  }
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  absl::Status s = CudaStatus(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
  absl::StatusOr<DeviceMemoryInfo> before = MemoryInfo();
  if (s.ok()) s = before.status();
  if (s.ok()) s = CudaStatus(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  if (!s.ok()) return s;
  absl::StatusOr<DeviceMemoryInfo> after = MemoryInfo();
  if (!after.ok()) {
    (void)cudaGraphExecDestroy(exec);
    return after.status();
  }
  const size_t taken =
      before->free_bytes > after->free_bytes ? before->free_bytes - after->free_bytes : 0;
  return std::unique_ptr<Graph>(new Graph(exec, nodes, taken));
}

Graph::~Graph() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

absl::Status Graph::Launch(StreamHandle stream) const {
  return CudaStatus(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), AsStream(stream)),
                    "cudaGraphLaunch");
}

absl::StatusOr<std::unique_ptr<StreamTimer>> StreamTimer::Create() {
  std::unique_ptr<StreamTimer> timer(new StreamTimer());
  cudaEvent_t start = nullptr, stop = nullptr;
  SCD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  timer->start_ = start;
  SCD_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  timer->stop_ = stop;
  return timer;
}

StreamTimer::~StreamTimer() {
  if (start_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_ != nullptr) (void)cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

absl::Status StreamTimer::Start(StreamHandle stream) {
  return CudaStatus(cudaEventRecord(static_cast<cudaEvent_t>(start_), AsStream(stream)),
                    "cudaEventRecord(start)");
}

absl::StatusOr<float> StreamTimer::StopMs(StreamHandle stream) {
  SCD_CUDA_RETURN_IF_ERROR(cudaEventRecord(static_cast<cudaEvent_t>(stop_), AsStream(stream)));
  SCD_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(static_cast<cudaEvent_t>(stop_)));
  float ms = 0.0f;
  SCD_CUDA_RETURN_IF_ERROR(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_)));
  return ms;
}

}  // namespace scd::cuda
