// CPU stand-ins of SCD's consumer-side launchers (kernels/cuda/scd_codec.cu, declared in
// scd_sekv_ops.h), for test_cuda_host: ScdGpuRebuilder's host pipeline (kernels/cuda/
// scd_rebuilder.cc) and GpuRebuild (common/scd/gpu_rebuild.cc) run unchanged over them. Each
// keeps its launcher's contract and its status errors, and computes with the twin the header
// names: DecodeCodes with scd::DecodeMatrix; ReuseDecodeStoreKv as LinearCode::Decode (z·D + μ
// in F32) followed by the RopeStoreKv stand-in (RoPE on K, BF16 store); BroadcastRow and
// BiasActivation as loops. The real PatchAlignerForward (kernels/cuda/patch_aligner.cc, host
// code) runs over them. Pointers, sizes and alignment are checked, and the work is queued on
// its stream, as in standin_ops.cc.
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/scd/quantize.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/standin/standin_memory.h"

namespace scd::cuda {

using standin::Require;
using standin::RequireDevice;

absl::Status DecodeCodes(const void* in, CodeFormat format, int rows, int cols, float* out,
                         StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0) return absl::OkStatus();
  const size_t bytes = CodeBytes(format, rows, cols);
  standin::Enqueue(stream, [=] {
    Require(reinterpret_cast<uintptr_t>(in) % 2 == 0, "DecodeCodes input 2-byte aligned");
    standin::RequireDeviceBytes(in, bytes, "DecodeCodes input");
    RequireDevice(out, count, "DecodeCodes output");
    const absl::Status s = DecodeMatrix(static_cast<Encoding>(format),
                                        static_cast<const uint8_t*>(in), bytes, rows, cols, 0, out);
    Require(s.ok(), "DecodeCodes input is a well-formed matrix");
  });
  return absl::OkStatus();
}

absl::Status ReuseDecodeStoreKv(const float* z_k, const float* z_v, int rows, LowRankDecoder key,
                                LowRankDecoder value, const int32_t* row_seq,
                                const int32_t* positions, KvCacheTable cache, int layer,
                                int num_kv_heads, int head_dim, const float* inv_freq,
                                StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::ReuseDecode(head_dim, key.rank, value.rank); !s.ok()) {
    return s;
  }
  const int kv_dim = num_kv_heads * head_dim;
  RequireDevice(z_k, int64_t{rows} * key.rank, "ReuseDecodeStoreKv z_k");
  RequireDevice(z_v, int64_t{rows} * value.rank, "ReuseDecodeStoreKv z_v");
  RequireDevice(key.decoder, int64_t{key.rank} * kv_dim, "ReuseDecodeStoreKv D_k");
  RequireDevice(value.decoder, int64_t{value.rank} * kv_dim, "ReuseDecodeStoreKv D_v");
  RequireDevice(key.mu, kv_dim, "ReuseDecodeStoreKv mu_k");
  RequireDevice(value.mu, kv_dim, "ReuseDecodeStoreKv mu_v");
  // [rows][K | V] pre-RoPE, then the RopeStoreKv stand-in stores them as the kernel does; the
  // rows live until that store has run.
  auto kv = std::make_shared<DeviceBuffer>();
  {
    auto made = DeviceBuffer::Allocate(sizeof(float) * rows * 2 * kv_dim, "REUSE rows");
    if (!made.ok()) return made.status();
    *kv = std::move(made).value();
  }
  float* out = kv->as<float>();
  standin::Enqueue(stream, [=] {
    for (int r = 0; r < rows; ++r) {
      for (int half = 0; half < 2; ++half) {
        const LowRankDecoder& dec = half == 0 ? key : value;
        const float* z = (half == 0 ? z_k : z_v) + static_cast<int64_t>(r) * dec.rank;
        float* row = out + (static_cast<int64_t>(r) * 2 + half) * kv_dim;
        for (int c = 0; c < kv_dim; ++c) {
          float acc = dec.mu[c];
          for (int a = 0; a < dec.rank; ++a) acc += z[a] * dec.decoder[int64_t{a} * kv_dim + c];
          row[c] = acc;
        }
      }
    }
  });
  const absl::Status stored = RopeStoreKv(out, out + kv_dim, 2 * kv_dim, rows, row_seq, positions,
                                          cache, layer, num_kv_heads, head_dim, inv_freq, stream);
  standin::Enqueue(stream, [kv] {});
  return stored;
}

absl::Status BiasActivation(float* y, const float* bias, int rows, int cols, Activation act,
                            StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0 || (bias == nullptr && act == Activation::kNone)) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(y, count, "BiasActivation y");
    if (bias != nullptr) RequireDevice(bias, cols, "BiasActivation bias");
    for (int64_t i = 0; i < count; ++i) {
      float v = y[i] + (bias != nullptr ? bias[i % cols] : 0.0f);
      if (act == Activation::kSilu) v = v / (1.0f + std::exp(-v));
      y[i] = v;
    }
  });
  return absl::OkStatus();
}

absl::Status BroadcastRow(float* y, const float* row, int rows, int cols, StreamHandle stream) {
  const int64_t count = static_cast<int64_t>(rows) * cols;
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(y, count, "BroadcastRow y");
    RequireDevice(row, cols, "BroadcastRow row");
    for (int64_t i = 0; i < count; ++i) y[i] = row[i % cols];
  });
  return absl::OkStatus();
}

}  // namespace scd::cuda
