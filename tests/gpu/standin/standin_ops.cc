// CPU stand-ins of the forward-pass launchers (kernels/cuda/ops.h), for test_cuda_host (the
// CublasGemm stand-in is standin_gemm.cc): the CUDA backend's host code runs unchanged over
// them. Each one keeps its launcher's documented contract and data formats (BF16 weights and
// KV cache, F32 activations, the KvCacheTable of per-sequence device pointers) and computes
// with the CPU twin named in ops.h where one exists (kernels/cpu, common/runtime/sampler.h),
// else with the loop of the .cu kernel. Where the device numerics differ from the twin on
// purpose they are emulated: the tensor-core prefill attention (head_dim 64/128, 16-byte
// aligned K/V) rounds Q and the softmax probabilities to BF16, tile by tile.
//
// Each launcher refuses what its .cu launcher refuses, through the same checks
// (launch_checks.h), then queues the kernel's work on its stream (standin::Enqueue), which runs
// when the stream is drained, as on a GPU (standin_memory.cc).
// Preconditions the kernels rely on are checked always (standin_memory.h): every pointer is live
// device memory, aligned for its type and large enough for what the kernel touches; cache
// positions lie inside their layer; DecodeAttention's workspace and max_length cover the
// call; sampled ids do not overlap the sampling workspace; targets and ids are in range.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/runtime/sampler.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_plan.h"
#include "tests/gpu/standin/standin_memory.h"

namespace scd::cuda {

using standin::Require;
using standin::RequireDevice;
using standin::Widen;

namespace {

// Extent in elements of `rows` rows of `cols` at `stride`.
int64_t Extent(int rows, int64_t cols, int64_t stride) {
  return rows <= 0 ? 0 : (rows - 1) * stride + cols;
}

}  // namespace

// ---- conversions, elementwise ----

absl::Status F32ToBf16(const float* x, Bf16* y, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(x, count, "F32ToBf16 input");
    RequireDevice(y, count, "F32ToBf16 output");
    for (int64_t i = 0; i < count; ++i) y[i] = FloatToBf16(x[i]);
  });
  return absl::OkStatus();
}

absl::Status Bf16ToF32(const Bf16* x, float* y, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(x, count, "Bf16ToF32 input");
    RequireDevice(y, count, "Bf16ToF32 output");
    for (int64_t i = 0; i < count; ++i) y[i] = Bf16ToFloat(x[i]);
  });
  return absl::OkStatus();
}

absl::Status Embed(const Bf16* table, const int32_t* ids, float* out, int tokens, int dim,
                   StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(ids, tokens, "Embed ids");
    RequireDevice(out, int64_t{tokens} * dim, "Embed output");
    for (int t = 0; t < tokens; ++t) {
      Require(ids[t] >= 0, "Embed ids are valid");
      const Bf16* row = table + int64_t{ids[t]} * dim;
      RequireDevice(row, dim, "Embed table row of an id");
      for (int i = 0; i < dim; ++i) out[int64_t{t} * dim + i] = Bf16ToFloat(row[i]);
    }
  });
  return absl::OkStatus();
}

absl::Status AddInPlace(float* y, const float* x, int64_t count, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(y, count, "AddInPlace y");
    RequireDevice(x, count, "AddInPlace x");
    for (int64_t i = 0; i < count; ++i) y[i] += x[i];
  });
  return absl::OkStatus();
}

absl::Status AddBias(float* y, const float* bias, int rows, int cols, int64_t row_stride,
                     StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(y, Extent(rows, cols, row_stride), "AddBias rows");
    RequireDevice(bias, cols, "AddBias bias");
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) y[r * row_stride + c] += bias[c];
    }
  });
  return absl::OkStatus();
}

absl::Status SwiGlu(const float* gate, const float* up, int64_t in_stride, float* out,
                    Bf16* out_bf16, int rows, int ffn, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(gate, Extent(rows, ffn, in_stride), "SwiGlu gate");
    RequireDevice(up, Extent(rows, ffn, in_stride), "SwiGlu up");
    if (out != nullptr) RequireDevice(out, int64_t{rows} * ffn, "SwiGlu output");
    if (out_bf16 != nullptr) RequireDevice(out_bf16, int64_t{rows} * ffn, "SwiGlu BF16 output");
    std::vector<float> value(ffn);
    for (int r = 0; r < rows; ++r) {
      cpu::SwiGlu(gate + r * in_stride, up + r * in_stride, value.data(), ffn);
      for (int i = 0; i < ffn; ++i) {
        if (out != nullptr) out[int64_t{r} * ffn + i] = value[i];
        if (out_bf16 != nullptr) out_bf16[int64_t{r} * ffn + i] = FloatToBf16(value[i]);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status ScatterRows(const float* src, int64_t src_stride, float* const* dst, int rows,
                         int cols, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(src, Extent(rows, cols, src_stride), "ScatterRows source");
    RequireDevice(dst, rows, "ScatterRows destination table");
    for (int r = 0; r < rows; ++r) {
      RequireDevice(dst[r], cols, "ScatterRows destination row");
      std::memmove(dst[r], src + r * src_stride, sizeof(float) * cols);
    }
  });
  return absl::OkStatus();
}

absl::Status FillRandomBf16(Bf16* x, int64_t count, uint64_t seed, float stddev,
                            StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(x, count, "FillRandomBf16 output");
    auto mix = [](uint64_t z) {  // elementwise.cu's SplitMix64 finaliser
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    const float amplitude = stddev * 1.7320508075688772f;
    const uint64_t key = mix(seed ^ 0x9e3779b97f4a7c15ull);
    for (int64_t i = 0; i < count; ++i) {
      const uint64_t bits = mix(key + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull);
      const float u = static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
      x[i] = FloatToBf16(u * amplitude);
    }
  });
  return absl::OkStatus();
}

absl::Status FillF32(float* x, int64_t count, float value, StreamHandle stream) {
  if (count <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(x, count, "FillF32 output");
    std::fill(x, x + count, value);
  });
  return absl::OkStatus();
}

// ---- RMSNorm and RoPE ----

absl::Status RmsNorm(const float* x, const float* gain, float* y, Bf16* y_bf16, int rows, int dim,
                     float eps, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  const int64_t n = int64_t{rows} * dim;
  standin::Enqueue(stream, [=] {
    RequireDevice(x, n, "RmsNorm input");
    RequireDevice(gain, dim, "RmsNorm gain");
    if (y != nullptr) RequireDevice(y, n, "RmsNorm output");
    if (y_bf16 != nullptr) RequireDevice(y_bf16, n, "RmsNorm BF16 output");
    std::vector<float> value(dim);
    for (int r = 0; r < rows; ++r) {
      cpu::RmsNorm(x + int64_t{r} * dim, gain, value.data(), 1, dim, eps);  // y may alias x
      for (int i = 0; i < dim; ++i) {
        if (y != nullptr) y[int64_t{r} * dim + i] = value[i];
        if (y_bf16 != nullptr) y_bf16[int64_t{r} * dim + i] = FloatToBf16(value[i]);
      }
    }
  });
  return absl::OkStatus();
}

absl::Status ApplyRope(float* x, int tokens, int num_heads, int head_dim, int64_t row_stride,
                       const int32_t* positions, const float* inv_freq, StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::RopeHeadDim(head_dim); !s.ok()) return s;
  standin::Enqueue(stream, [=] {
    Require(int64_t{num_heads} * head_dim <= row_stride || tokens == 1,
            "ApplyRope rows do not overlap (blocks would race)");
    RequireDevice(x, Extent(tokens, int64_t{num_heads} * head_dim, row_stride), "ApplyRope rows");
    RequireDevice(positions, tokens, "ApplyRope positions");
    RequireDevice(inv_freq, head_dim / 2, "ApplyRope inv_freq");
    for (int t = 0; t < tokens; ++t) {
      cpu::ApplyRope(x + t * row_stride, 1, num_heads, head_dim, &positions[t], inv_freq);
    }
  });
  return absl::OkStatus();
}

absl::Status RopeStoreKv(const float* k_pre, const float* v, int64_t in_stride, int rows,
                         const int32_t* row_seq, const int32_t* positions, KvCacheTable cache,
                         int layer, int num_kv_heads, int head_dim, const float* inv_freq,
                         StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  if (absl::Status s = launch_checks::RopeHeadDim(head_dim); !s.ok()) return s;
  const int kv_dim = num_kv_heads * head_dim;
  standin::Enqueue(stream, [=] {
    RequireDevice(k_pre, Extent(rows, kv_dim, in_stride), "RopeStoreKv K rows");
    RequireDevice(v, Extent(rows, kv_dim, in_stride), "RopeStoreKv V rows");
    RequireDevice(row_seq, rows, "RopeStoreKv row_seq");
    RequireDevice(positions, rows, "RopeStoreKv positions");
    RequireDevice(inv_freq, head_dim / 2, "RopeStoreKv inv_freq");
    std::vector<float> k(kv_dim);
    for (int r = 0; r < rows; ++r) {
      const int seq = row_seq[r];
      const int32_t pos = positions[r];
      Require(seq >= 0, "RopeStoreKv row_seq is a table row");
      RequireDevice(cache.k + seq, 1, "RopeStoreKv table K entry");
      RequireDevice(cache.v + seq, 1, "RopeStoreKv table V entry");
      RequireDevice(cache.layer_stride + seq, 1, "RopeStoreKv table stride entry");
      const int64_t stride = cache.layer_stride[seq];
      Require(pos >= 0 && (int64_t{pos} + 1) * kv_dim <= stride,
              "RopeStoreKv position inside the layer (capacity * kv_dim)");
      const int64_t offset = layer * stride + int64_t{pos} * kv_dim;
      Bf16* k_dst = cache.k[seq] + offset;
      Bf16* v_dst = cache.v[seq] + offset;
      RequireDevice(k_dst, kv_dim, "RopeStoreKv K cache slot");
      RequireDevice(v_dst, kv_dim, "RopeStoreKv V cache slot");
      std::memcpy(k.data(), k_pre + r * in_stride, sizeof(float) * kv_dim);
      cpu::ApplyRope(k.data(), 1, num_kv_heads, head_dim, &pos, inv_freq);
      for (int i = 0; i < kv_dim; ++i) {
        k_dst[i] = FloatToBf16(k[i]);
        v_dst[i] = FloatToBf16(v[r * in_stride + i]);
      }
    }
  });
  return absl::OkStatus();
}

// ---- attention ----

namespace {

// attention_prefill_tc.cu's numerics for one head: Q rounded to BF16, 64-query blocks walking
// 64-key tiles with the online softmax, P rounded to BF16 (and l summing the rounded P).
void TensorCoreHead(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v, float* out,
                    int64_t out_stride, int tokens, int start, int h, int group, int kv_dim, int hd,
                    int window) {
  constexpr int kBq = 64, kBk = 64;
  const int g = h / group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> qr(hd), o(hd);
  for (int t0 = 0; t0 < tokens; t0 += kBq) {
    const int rows = std::min(kBq, tokens - t0);
    const int first_pos = start + t0;
    const int key_end = first_pos + rows;
    const int key_begin = window > 0 ? std::max(0, first_pos - window + 1) : 0;
    for (int r = 0; r < rows; ++r) {
      const int pos = first_pos + r;
      for (int d = 0; d < hd; ++d) qr[d] = RoundToBf16(q[(t0 + r) * q_stride + h * hd + d]);
      std::fill(o.begin(), o.end(), 0.0f);
      float m = -INFINITY, l = 0.0f;
      for (int kt = key_begin; kt < key_end; kt += kBk) {
        float s[kBk];
        float mx = -INFINITY;
        for (int c = 0; c < kBk; ++c) {
          const int key = kt + c;
          const bool keep = key < key_end && key <= pos && (window <= 0 || key > pos - window);
          s[c] = -INFINITY;
          if (keep) {
            const Bf16* kr = k + int64_t{key} * kv_dim + g * hd;
            float dot = 0.0f;
            for (int d = 0; d < hd; ++d) dot += qr[d] * Bf16ToFloat(kr[d]);
            s[c] = dot * scale;
          }
          mx = std::max(mx, s[c]);
        }
        const float m_new = std::max(m, mx);
        float alpha = 1.0f, sum = 0.0f, p[kBk] = {};
        if (m_new != -INFINITY) {
          alpha = std::exp(m - m_new);
          for (int c = 0; c < kBk; ++c) {
            p[c] = RoundToBf16(s[c] == -INFINITY ? 0.0f : std::exp(s[c] - m_new));
            sum += p[c];
          }
        }
        l = l * alpha + sum;
        m = m_new;
        for (int d = 0; d < hd; ++d) o[d] *= alpha;
        for (int c = 0; c < kBk; ++c) {
          if (p[c] == 0.0f) continue;
          const Bf16* vr = v + int64_t{kt + c} * kv_dim + g * hd;
          for (int d = 0; d < hd; ++d) o[d] += p[c] * Bf16ToFloat(vr[d]);
        }
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < hd; ++d) out[(t0 + r) * out_stride + h * hd + d] = o[d] * inv;
    }
  }
}

// cpu::CausalAttention on the widened cache rows [lo, end) (rows below lo stay zero: the
// kernels never read them). q and out rows are num_heads * hd apart.
void TwinAttention(const float* q, const Bf16* k, const Bf16* v, float* out, int tokens, int start,
                   int lo, int num_heads, int num_kv_heads, int hd, int window) {
  const int kv_dim = num_kv_heads * hd;
  const int end = start + tokens;
  std::vector<float> kf(static_cast<size_t>(end) * kv_dim, 0.0f), vf(kf.size(), 0.0f);
  for (int64_t i = int64_t{lo} * kv_dim; i < int64_t{end} * kv_dim; ++i) {
    kf[i] = Bf16ToFloat(k[i]);
    vf[i] = Bf16ToFloat(v[i]);
  }
  std::vector<float> scratch(cpu::AttentionScratchFloats(tokens, start, num_heads));
  cpu::CausalAttention(q, kf.data(), vf.data(), out, tokens, start, num_heads, num_kv_heads, hd,
                       window, scratch.data());
}

}  // namespace

bool AttentionImplSupports(AttentionImpl impl, int head_dim) {
  return launch_checks::PrefillSupports(impl, head_dim);
}

absl::Status PrefillAttention(const float* q, int64_t q_stride, const Bf16* k, const Bf16* v,
                              float* out, int64_t out_stride, int tokens, int start, int num_heads,
                              int num_kv_heads, int head_dim, int window, AttentionImpl impl,
                              StreamHandle stream) {
  if (tokens <= 0) return absl::OkStatus();
  const absl::StatusOr<bool> checked =
      launch_checks::PrefillTensorCores(k, v, num_heads, num_kv_heads, head_dim, impl);
  if (!checked.ok()) return checked.status();
  const bool tensor_cores = *checked;
  standin::Enqueue(stream, [=] {
    Require(start >= 0, "PrefillAttention start >= 0");
    const int qd = num_heads * head_dim, kv_dim = num_kv_heads * head_dim;
    const int end = start + tokens;
    // The kernels read keys from the first query block's window start to the last position.
    const int lo = window > 0 ? std::max(0, start - window + 1) : 0;
    RequireDevice(q, Extent(tokens, qd, q_stride), "PrefillAttention q");
    RequireDevice(out, Extent(tokens, qd, out_stride), "PrefillAttention out");
    RequireDevice(k + int64_t{lo} * kv_dim, int64_t{end - lo} * kv_dim, "PrefillAttention K rows");
    RequireDevice(v + int64_t{lo} * kv_dim, int64_t{end - lo} * kv_dim, "PrefillAttention V rows");
    if (tensor_cores) {
      for (int h = 0; h < num_heads; ++h) {
        TensorCoreHead(q, q_stride, k, v, out, out_stride, tokens, start, h,
                       num_heads / num_kv_heads, kv_dim, head_dim, window);
      }
      return;
    }
    std::vector<float> qc(static_cast<size_t>(tokens) * qd), oc(qc.size());
    for (int t = 0; t < tokens; ++t) std::memcpy(&qc[t * qd], q + t * q_stride, sizeof(float) * qd);
    TwinAttention(qc.data(), k, v, oc.data(), tokens, start, lo, num_heads, num_kv_heads, head_dim,
                  window);
    for (int t = 0; t < tokens; ++t)
      std::memcpy(out + t * out_stride, &oc[t * qd], sizeof(float) * qd);
  });
  return absl::OkStatus();
}

namespace {

// attention_decode.cu's split plan (split_plan.h).
using SplitPlan = split_plan::DecodeSplits;
SplitPlan Plan(int batch, int max_length, int num_heads, int num_kv_heads) {
  return split_plan::Decode(batch, max_length, num_heads, num_kv_heads);
}

}  // namespace

int64_t DecodeAttentionWorkspaceFloats(int batch, int max_length, int num_heads, int num_kv_heads,
                                       int head_dim) {
  return split_plan::DecodeWorkspaceFloats(batch, max_length, num_heads, num_kv_heads, head_dim);
}

absl::Status DecodeAttention(const float* q, int64_t q_stride, KvCacheTable cache, int layer,
                             const int32_t* lengths, int batch, int max_length, int num_heads,
                             int num_kv_heads, int head_dim, int window, DecodeImpl impl,
                             float* out, int64_t out_stride, float* workspace,
                             int64_t workspace_floats, StreamHandle stream) {
  if (batch <= 0) return absl::OkStatus();
  if (absl::Status s = split_plan::CheckDecodeShape(batch, num_heads, num_kv_heads, head_dim);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          launch_checks::TakesVectorized("DecodeAttention", num_heads, num_kv_heads, head_dim, impl)
              .status();
      !s.ok()) {
    return s;
  }
  const int64_t need =
      DecodeAttentionWorkspaceFloats(batch, max_length, num_heads, num_kv_heads, head_dim);
  if (absl::Status s =
          launch_checks::Workspace("DecodeAttention", workspace_floats, need, "floats");
      !s.ok()) {
    return s;
  }
  const int qd = num_heads * head_dim, kv_dim = num_kv_heads * head_dim;
  standin::Enqueue(stream, [=] {
    RequireDevice(workspace, need, "DecodeAttention workspace");
    RequireDevice(q, Extent(batch, qd, q_stride), "DecodeAttention q");
    RequireDevice(out, Extent(batch, qd, out_stride), "DecodeAttention out");
    RequireDevice(lengths, batch, "DecodeAttention lengths");
    RequireDevice(cache.k, batch, "DecodeAttention table K");
    RequireDevice(cache.v, batch, "DecodeAttention table V");
    RequireDevice(cache.layer_stride, batch, "DecodeAttention table strides");
    const SplitPlan plan = Plan(batch, max_length, num_heads, num_kv_heads);
    // The partial states the split kernel writes (poison what the combine would not overwrite).
    std::fill(workspace, workspace + need, 0.0f);
    std::vector<float> oc(qd);
    for (int b = 0; b < batch; ++b) {
      const int len = lengths[b];
      // Keys past splits * chunk would be dropped silently by the split kernel.
      Require(len >= 0 && len <= max_length, "DecodeAttention lengths[b] <= max_length");
      Require(len <= int64_t{plan.splits} * plan.chunk, "DecodeAttention split covers the length");
      const int64_t stride = cache.layer_stride[b];
      Require(int64_t{len} * kv_dim <= stride, "DecodeAttention length inside the layer");
      float* dst = out + b * out_stride;
      if (len == 0) {  // no key at all: zeros, as the combine kernel
        std::fill(dst, dst + qd, 0.0f);
        continue;
      }
      const int lo = window > 0 ? std::max(0, len - window) : 0;
      const Bf16* k = cache.k[b] + layer * stride;
      const Bf16* v = cache.v[b] + layer * stride;
      RequireDevice(k + int64_t{lo} * kv_dim, int64_t{len - lo} * kv_dim, "DecodeAttention K rows");
      RequireDevice(v + int64_t{lo} * kv_dim, int64_t{len - lo} * kv_dim, "DecodeAttention V rows");
      TwinAttention(q + b * q_stride, k, v, oc.data(), 1, len - 1, lo, num_heads, num_kv_heads,
                    head_dim, window);
      std::memcpy(dst, oc.data(), sizeof(float) * qd);
    }
  });
  return absl::OkStatus();
}

// ---- logits ----

absl::Status NegLogLikelihood(const float* logits, const int32_t* targets, float* out, int rows,
                              int vocab, StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(logits, int64_t{rows} * vocab, "NegLogLikelihood logits");
    RequireDevice(targets, rows, "NegLogLikelihood targets");
    RequireDevice(out, rows, "NegLogLikelihood output");
    for (int r = 0; r < rows; ++r) {
      Require(targets[r] >= 0 && targets[r] < vocab, "NegLogLikelihood target in the vocabulary");
    }
    cpu::NegLogLikelihood(logits, targets, out, rows, vocab);
  });
  return absl::OkStatus();
}

absl::Status ArgmaxRows(const float* logits, int32_t* out, int rows, int vocab,
                        StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  standin::Enqueue(stream, [=] {
    RequireDevice(logits, int64_t{rows} * vocab, "ArgmaxRows logits");
    RequireDevice(out, rows, "ArgmaxRows output");
    for (int r = 0; r < rows; ++r) {
      const float* row = logits + int64_t{r} * vocab;
      float best_v = -INFINITY;
      int best_i = vocab;
      for (int j = 0; j < vocab; ++j) {
        if (row[j] > best_v) {
          best_v = row[j];
          best_i = j;
        }
      }
      out[r] = best_i < vocab ? best_i : 0;  // all -inf/NaN rows: 0
    }
  });
  return absl::OkStatus();
}

// ---- sampling ----

namespace {

size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// sampling.cu's layout: keys, sorted keys, ids, sorted ids, row offsets, then CUB's temporary
// storage, which the stand-in sizes as the radix sort's double buffers would need.
struct SampleLayout {
  size_t keys = 0, ids = 0, offsets = 0, total = 0;
};

SampleLayout Layout(int rows, int vocab) {
  const size_t n = static_cast<size_t>(rows) * vocab;
  SampleLayout l;
  size_t at = 0;
  l.keys = at;
  at += 2 * Align256(n * sizeof(float));
  l.ids = at;
  at += 2 * Align256(n * sizeof(int32_t));
  l.offsets = at;
  at += Align256((static_cast<size_t>(rows) + 1) * sizeof(int));
  l.total = at + Align256(n * 8 + 4096);
  return l;
}

}  // namespace

absl::StatusOr<size_t> SampleRowsWorkspaceBytes(int rows, int vocab) {
  if (absl::Status s = launch_checks::SampleShape(rows, vocab); !s.ok()) return s;
  return Layout(rows, vocab).total;
}

absl::Status SampleRows(const float* logits, const SampleParams* params, int rows, int vocab,
                        int32_t* out, void* workspace, size_t workspace_bytes,
                        StreamHandle stream) {
  if (rows <= 0) return absl::OkStatus();
  absl::StatusOr<size_t> need = SampleRowsWorkspaceBytes(rows, vocab);
  if (!need.ok()) return need.status();
  if (absl::Status s = launch_checks::Workspace("SampleRows", static_cast<int64_t>(workspace_bytes),
                                                static_cast<int64_t>(*need), "bytes");
      !s.ok()) {
    return s;
  }
  standin::Enqueue(stream, [=] {
    RequireDevice(logits, int64_t{rows} * vocab, "SampleRows logits");
    RequireDevice(params, rows, "SampleRows params");
    RequireDevice(out, rows, "SampleRows output");
    auto* ws = static_cast<unsigned char*>(workspace);
    standin::RequireDeviceBytes(ws, *need, "SampleRows workspace");
    const auto* o = reinterpret_cast<const unsigned char*>(out);
    Require(o + sizeof(int32_t) * rows <= ws || o >= ws + *need,
            "SampleRows output does not overlap its workspace");
    const SampleLayout layout = Layout(rows, vocab);
    float* keys = reinterpret_cast<float*>(ws + layout.keys);
    int32_t* ids = reinterpret_cast<int32_t*>(ws + layout.ids);
    std::vector<std::pair<float, int32_t>> scratch;
    for (int r = 0; r < rows; ++r) {
      const SampleParams p = params[r];
      const float* row = logits + int64_t{r} * vocab;
      const bool greedy = p.temperature == 0.0f || p.top_k == 1;
      for (int j = 0; j < vocab; ++j) {  // SampleKeysKernel's writes
        keys[int64_t{r} * vocab + j] = greedy ? row[j] : row[j] / p.temperature;
        ids[int64_t{r} * vocab + j] = j;
      }
      SamplingParams twin;
      twin.temperature = p.temperature;
      twin.top_k = p.top_k;
      twin.top_p = p.top_p;
      Require(p.canonical >= 0.0 && p.canonical < 1.0, "SampleRows canonical in [0, 1)");
      out[r] = SampleWithDraw(absl::MakeConstSpan(row, vocab), twin, p.canonical, &scratch);
    }
  });
  return absl::OkStatus();
}

}  // namespace scd::cuda
