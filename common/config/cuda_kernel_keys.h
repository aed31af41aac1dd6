// The `cuda_kernels` keys both daemons' configs take (docs/CONFIG.md), read into
// BackendOptions::cuda_kernels. Header-only, so that scd_config needs no runtime library.
#ifndef SCD_COMMON_CONFIG_CUDA_KERNEL_KEYS_H_
#define SCD_COMMON_CONFIG_CUDA_KERNEL_KEYS_H_

#include "common/config/config_reader.h"
#include "common/runtime/backend.h"

namespace scd::config {

// Reads prefill_attention, decode_attention and small_batch_max_rows from `kernels` (the
// config's `cuda_kernels` mapping); a bad name or value is recorded as the reader's error.
inline CudaKernelOptions ReadCudaKernelOptions(ConfigReader& kernels) {
  CudaKernelOptions o;
  o.prefill_attention = kernels.Enum("prefill_attention", "auto", kCudaPrefillAttentionNames);
  o.decode_attention = kernels.Enum("decode_attention", "auto", kCudaDecodeAttentionNames);
  o.small_batch_max_rows = static_cast<int>(
      kernels.Int("small_batch_max_rows", kCudaSmallBatchRowsLimit, 0, kCudaSmallBatchRowsLimit));
  return o;
}

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_CUDA_KERNEL_KEYS_H_
