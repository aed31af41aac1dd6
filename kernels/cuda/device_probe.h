// Why a machine has no usable CUDA device, in words its user can act on. DeviceStatus()
// (device_memory.h) reads the runtime and the driver into a DeviceReading; Explain turns the
// reading into the status the CUDA backend, the [cuda] tests' skips and scd-gpu-bench report.
// Host code only, CUDA-free, so that every case is checked in CI, where no driver is loaded.
//
// The cases, in the order Explain tries them:
//   - no NVIDIA driver at all (cudaDriverGetVersion reads 0);
//   - a driver older than the CUDA runtime this build links (CUDA 13 needs a 580 driver);
//   - cudaGetDeviceCount failed for another reason (its error name and text);
//   - the driver answers but sees no device (CUDA_VISIBLE_DEVICES named when it is set).
#ifndef SCD_KERNELS_CUDA_DEVICE_PROBE_H_
#define SCD_KERNELS_CUDA_DEVICE_PROBE_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace scd::cuda {

struct DeviceReading {
  int device_count = 0;
  std::string count_error;  // "cudaErrorX: text" when cudaGetDeviceCount failed, else ""
  int driver_version = 0;   // cudaDriverGetVersion: 1000 * major + 10 * minor; 0 = no driver
  int runtime_version = 0;  // cudaRuntimeGetVersion, the same encoding
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES, when set
};

// "13.0" for 13000, "12.4" for 12040.
inline std::string CudaVersionText(int version) {
  return absl::StrCat(version / 1000, ".", (version % 1000) / 10);
}

// OK when the reading has a device; otherwise UNAVAILABLE, "no usable CUDA device: <why>".
inline absl::Status Explain(const DeviceReading& r) {
  if (r.device_count > 0 && r.count_error.empty()) return absl::OkStatus();
  const std::string runtime = CudaVersionText(r.runtime_version);
  std::string why;
  if (r.driver_version == 0) {
    why = absl::StrCat(
        "no NVIDIA driver is loaded (libcuda.so.1 not found); this build needs "
        "one that supports CUDA ",
        runtime);
  } else if (r.driver_version < r.runtime_version) {
    why = absl::StrCat("the NVIDIA driver supports CUDA ", CudaVersionText(r.driver_version),
                       ", older than the CUDA ", runtime,
                       " runtime this build links: update the driver");
  } else if (!r.count_error.empty()) {
    why = absl::StrCat("cudaGetDeviceCount: ", r.count_error, " (driver CUDA ",
                       CudaVersionText(r.driver_version), ")");
  } else {
    why = absl::StrCat("the driver (CUDA ", CudaVersionText(r.driver_version), ") sees no device");
  }
  if (r.visible_devices.has_value()) {
    absl::StrAppend(&why, "; CUDA_VISIBLE_DEVICES=\"", *r.visible_devices, "\"");
  }
  return absl::UnavailableError(absl::StrCat("no usable CUDA device: ", why));
}

}  // namespace scd::cuda

#endif  // SCD_KERNELS_CUDA_DEVICE_PROBE_H_
