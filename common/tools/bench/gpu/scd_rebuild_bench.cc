// SCD rebuild benchmark: see scd_rebuild_bench.h.
// A random RebuildSpec of the model's shape: six PATCH layers spread evenly (2, 7, ..., 27 of
// 32), REUSE everywhere else with r_K = 64 < r_V = 128 (keys tolerate a lower rank, as the
// SCD paper reports); PATCH codes of 256 dims through a 256-wide aligner, then the consumer's
// own [W_K; W_V] (std 0.02, like the synthetic backend's weights). Codes are N(0, 1) and
// decoders N(0, 1/rank), so rebuilt K/V have unit scale. The rebuild is timed from host codes
// to the filled cache (RebuildTimes::total_ms: staging + upload + compute), with the codes as
// F32 and as the product sends them (int8, one F16 scale per row, decoded on the device).
#include "common/tools/bench/gpu/scd_rebuild_bench.h"

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/scd/quantize.h"
#include "common/tools/bench/gpu/bench_support.h"
#include "kernels/cuda/scd_rebuilder.h"

namespace scd::cuda_bench {
namespace {

constexpr int kScdPatchLayers = 6;
constexpr int kScdRankK = 64;
constexpr int kScdRankV = 128;
constexpr int kScdPatchCodeDim = 256;
constexpr int kScdAlignerHidden = 256;
constexpr int kScdReps = 5;

bool IsPatchLayer(int layer, int num_layers) {
  const int stride = std::max(1, num_layers / kScdPatchLayers);
  const int offset = layer - stride / 2;
  return offset >= 0 && offset % stride == 0 && offset / stride < kScdPatchLayers;
}

cuda::RebuildSpec RandomRebuildSpec(const ModelConfig& c) {
  cuda::RebuildSpec spec;
  spec.hidden_size = c.hidden_size;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_dim = c.head_dim;
  spec.inv_freq = RopeInverseFrequencies(c);
  const size_t d = c.hidden_size, kv = c.kv_dim();
  uint64_t seed = 7000;
  for (int l = 0; l < c.num_layers; ++l) {
    cuda::RebuildLayerSpec& s = spec.layers.emplace_back();
    if (IsPatchLayer(l, c.num_layers)) {
      const size_t r = kScdPatchCodeDim, m = kScdAlignerHidden;
      s.code_dim = kScdPatchCodeDim;
      s.hidden_dim = kScdAlignerHidden;
      s.a = Normal(r * d, seed++, 1.0f / std::sqrt(static_cast<float>(r)));
      s.c_b2 = Normal(d, seed++, 0.02f);
      s.w1 = Normal(r * m, seed++, 1.0f / std::sqrt(static_cast<float>(r)));
      s.b1 = Normal(m, seed++, 0.02f);
      s.w2 = Normal(m * d, seed++, 1.0f / std::sqrt(static_cast<float>(m)));
      s.w_kv = Normal(2 * kv * d, seed++, 0.02f);
    }
    // REUSE decoders on every layer, as the decode daemon's rebuilder holds them (its patched
    // layers serve scd-reuse payloads too).
    s.rank_k = kScdRankK;
    s.rank_v = kScdRankV;
    s.dec_k = Normal(kScdRankK * kv, seed++, 1.0f / std::sqrt(static_cast<float>(kScdRankK)));
    s.mu_k = Normal(kv, seed++, 0.02f);
    s.dec_v = Normal(kScdRankV * kv, seed++, 1.0f / std::sqrt(static_cast<float>(kScdRankV)));
    s.mu_v = Normal(kv, seed++, 0.02f);
  }
  return spec;
}

// Host codes (the payload as it lands on the consumer): REUSE z_k [T, r_K], z_v [T, r_V];
// PATCH z_k [T, code_dim]; `codes` points into `z`.
struct HostCodes {
  std::vector<std::vector<float>> z;
  std::vector<cuda::LayerCodes> codes;
  size_t payload_floats = 0;
};

HostCodes RandomCodes(const cuda::RebuildSpec& spec, int layers, int tokens) {
  HostCodes h;
  h.z.resize(2 * layers);
  h.codes.resize(layers);
  for (int l = 0; l < layers; ++l) {
    const cuda::RebuildLayerSpec& s = spec.layers[l];
    const bool patch = s.has_patch();
    h.z[2 * l] = Normal(size_t{1} * tokens * (patch ? s.code_dim : s.rank_k), 9000 + 2 * l, 1.0f);
    if (!patch) h.z[2 * l + 1] = Normal(size_t{1} * tokens * s.rank_v, 9001 + 2 * l, 1.0f);
    h.codes[l].z_k = h.z[2 * l].data();
    h.codes[l].z_v = patch ? nullptr : h.z[2 * l + 1].data();
    h.codes[l].part = patch ? cuda::RebuildPart::kPatch : cuda::RebuildPart::kReuse;
    h.payload_floats += h.z[2 * l].size() + h.z[2 * l + 1].size();
  }
  return h;
}

// The same codes as the product sends them (the artifact's default int8 with an F16 scale per
// row, ScdArtifact::code_encoding); `codes` points into `sent`.
struct Int8Codes {
  std::vector<std::vector<uint8_t>> sent;
  std::vector<cuda::LayerCodes> codes;
  double bytes = 0;
};

Int8Codes EncodeInt8(const cuda::RebuildSpec& spec, const HostCodes& host, int layers, int tokens) {
  Int8Codes e;
  e.sent.resize(2 * layers);
  e.codes.resize(layers);
  for (int l = 0; l < layers; ++l) {
    const cuda::RebuildLayerSpec& s = spec.layers[l];
    const bool patch = s.has_patch();
    for (int part = 0; part < (patch ? 1 : 2); ++part) {
      const int cols = patch ? s.code_dim : (part == 0 ? s.rank_k : s.rank_v);
      std::vector<uint8_t>& bytes = e.sent[2 * l + part];
      bytes.resize(EncodedBytes(Encoding::kInt8Row, tokens, cols, 0));
      EncodeMatrix(Encoding::kInt8Row, host.z[2 * l + part].data(), tokens, cols, 0, bytes.data());
      e.bytes += static_cast<double>(bytes.size());
    }
    e.codes[l] = {e.sent[2 * l].data(), patch ? nullptr : e.sent[2 * l + 1].data(),
                  cuda::CodeFormat::kInt8Row, host.codes[l].part};
  }
  return e;
}

// A rebuild's medians over kScdReps runs after a warm-up.
struct RebuildTiming {
  double total = 0, gpu = 0, stage = 0;
};

absl::StatusOr<RebuildTiming> TimeRebuild(cuda::ScdGpuRebuilder& rebuilder,
                                          absl::Span<const cuda::LayerCodes> layer_codes,
                                          int tokens, const cuda::SequenceCache& target) {
  cuda::RebuildTimes times;
  SCD_RETURN_IF_ERROR(rebuilder.Rebuild(layer_codes, tokens, target, &times));  // warm-up
  std::vector<double> total, gpu, stage;
  for (int rep = 0; rep < kScdReps; ++rep) {
    SCD_RETURN_IF_ERROR(rebuilder.Rebuild(layer_codes, tokens, target, &times));
    total.push_back(times.total_ms);
    gpu.push_back(times.gpu_ms);
    stage.push_back(times.stage_ms);
  }
  return RebuildTiming{Median(total), Median(gpu), Median(stage)};
}

// MeasureScdRebuild's figures, printed and as its JSON; the verdict is the int8 run's, the
// path a decode daemon takes.
nlohmann::json ScdRebuildJson(int tokens, const std::vector<int>& patch_layers,
                              const cuda::ScdGpuRebuilder& rebuilder, const RebuildTiming& f32,
                              const RebuildTiming& int8, double int8_bytes, double payload_bytes,
                              size_t cache_bytes, double prefill_ms) {
  const double speedup = prefill_ms / int8.total;
  const bool pass = speedup >= kScdTargetSpeedup;
  std::printf(
      "  scd rebuild %d tokens, int8 codes (%.1f MB): %8.2f ms (stage %.2f, GPU %.2f); F32 codes "
      "(%.1f MB): %.2f ms (stage %.2f, GPU %.2f); prefill %.2f ms: %.2fx (target >= %.0fx: %s); "
      "cache %.1f MB BF16, rebuilder weights %.1f MB, device %.1f MB, pinned %.1f MB\n",
      tokens, int8_bytes / 1e6, int8.total, int8.stage, int8.gpu, payload_bytes / 1e6, f32.total,
      f32.stage, f32.gpu, prefill_ms, speedup, kScdTargetSpeedup, pass ? "PASS" : "FAIL",
      2.0 * cache_bytes / 1e6, rebuilder.weight_bytes() / 1e6, rebuilder.device_bytes() / 1e6,
      rebuilder.pinned_bytes() / 1e6);
  return nlohmann::json{{"tokens", tokens},
                        {"patch_layers", patch_layers},
                        {"rank_k", kScdRankK},
                        {"rank_v", kScdRankV},
                        {"patch_code_dim", kScdPatchCodeDim},
                        {"aligner_hidden_dim", kScdAlignerHidden},
                        {"payload_bytes", int8_bytes},
                        {"payload_bytes_f32", payload_bytes},
                        {"cache_bytes", 2.0 * cache_bytes},
                        {"rebuilder_weight_bytes", rebuilder.weight_bytes()},
                        {"rebuilder_device_bytes", rebuilder.device_bytes()},
                        {"rebuilder_pinned_bytes", rebuilder.pinned_bytes()},
                        {"rebuild_ms", int8.total},
                        {"stage_ms", int8.stage},
                        {"gpu_ms", int8.gpu},
                        {"rebuild_f32_ms", f32.total},
                        {"stage_f32_ms", f32.stage},
                        {"gpu_f32_ms", f32.gpu},
                        {"prefill_ms", prefill_ms},
                        {"speedup", speedup},
                        {"target", kScdTargetSpeedup},
                        {"verdict", pass ? "PASS" : "FAIL"}};
}

}  // namespace

absl::StatusOr<nlohmann::json> MeasureScdRebuild(const ModelConfig& c, int tokens,
                                                 double prefill_ms) {
  const cuda::RebuildSpec spec = RandomRebuildSpec(c);
  std::vector<int> patch_layers;
  for (int l = 0; l < c.num_layers; ++l) {
    if (IsPatchLayer(l, c.num_layers)) patch_layers.push_back(l);
  }
  std::printf(
      "  scd rebuild %d tokens: PATCH layers %s (code %d, aligner %d), REUSE elsewhere "
      "(r_K %d, r_V %d; decoders on every layer); warm-up + median of %d\n",
      tokens, absl::StrJoin(patch_layers, ",").c_str(), kScdPatchCodeDim, kScdAlignerHidden,
      kScdRankK, kScdRankV, kScdReps);
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<cuda::ScdGpuRebuilder> rebuilder,
                       cuda::ScdGpuRebuilder::Create(spec, tokens));
  const HostCodes host = RandomCodes(spec, c.num_layers, tokens);

  // The consumer's cache: [L][capacity = T][kv_dim] BF16 for K and for V.
  const int64_t kv = c.kv_dim();
  const size_t cache_bytes = sizeof(cuda::Bf16) * c.num_layers * tokens * kv;
  SCD_ASSIGN_OR_RETURN(cuda::DeviceBuffer k, cuda::DeviceBuffer::Allocate(cache_bytes, "scd K"));
  SCD_ASSIGN_OR_RETURN(cuda::DeviceBuffer v, cuda::DeviceBuffer::Allocate(cache_bytes, "scd V"));
  cuda::SequenceCache target;
  target.k = k.as<cuda::Bf16>();
  target.v = v.as<cuda::Bf16>();
  target.layer_stride = tokens * kv;
  target.capacity = tokens;
  target.length = 0;

  // Timed twice: codes as F32, and as the product sends them, decoded on the device.
  SCD_ASSIGN_OR_RETURN(const RebuildTiming f32,
                       TimeRebuild(*rebuilder, host.codes, tokens, target));
  const Int8Codes int8_codes = EncodeInt8(spec, host, c.num_layers, tokens);
  SCD_ASSIGN_OR_RETURN(const RebuildTiming int8,
                       TimeRebuild(*rebuilder, int8_codes.codes, tokens, target));
  if (!(int8.total > 0) || !(f32.total > 0)) {
    return absl::InternalError("RebuildTimes::total_ms is not positive");
  }
  const double payload_bytes = 4.0 * static_cast<double>(host.payload_floats);
  return ScdRebuildJson(tokens, patch_layers, *rebuilder, f32, int8, int8_codes.bytes,
                        payload_bytes, cache_bytes, prefill_ms);
}

}  // namespace scd::cuda_bench
