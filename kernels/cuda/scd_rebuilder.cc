// See scd_rebuilder.h. Host orchestration only; the kernels are in scd_codec.cu and
// norm_rope.cu, the GEMMs in gemm.cc.
#include "kernels/cuda/scd_rebuilder.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/scd_sekv_ops.h"

namespace scd::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// Bytes of one code matrix's slot in the staging buffers (16-byte aligned).
size_t RawSlot(CodeFormat format, int rows, int cols) {
  return cols <= 0 ? 0 : (CodeBytes(format, rows, cols) + 15) / 16 * 16;
}

absl::Status CheckSize(const std::vector<float>& v, size_t want, int layer, const char* what) {
  if (v.size() != want) {
    return absl::InvalidArgumentError(absl::StrCat("rebuild spec layer ", layer, ": ", what,
                                                   " has ", v.size(), " floats, expected ", want));
  }
  return absl::OkStatus();
}

absl::StatusOr<DeviceBuffer> UploadF32(const std::vector<float>& host, const char* what) {
  SCD_ASSIGN_OR_RETURN(
      DeviceBuffer buffer,
      DeviceBuffer::Allocate(std::max<size_t>(host.size(), 1) * sizeof(float), what));
  SCD_RETURN_IF_ERROR(CopyToDeviceSync(buffer.data(), host.data(), host.size() * sizeof(float)));
  return buffer;
}

absl::StatusOr<DeviceBuffer> UploadBf16(const std::vector<float>& host, const char* what) {
  std::vector<Bf16> rounded(host.size());
  for (size_t i = 0; i < host.size(); ++i) rounded[i] = FloatToBf16(host[i]);
  SCD_ASSIGN_OR_RETURN(
      DeviceBuffer buffer,
      DeviceBuffer::Allocate(std::max<size_t>(host.size(), 1) * sizeof(Bf16), what));
  SCD_RETURN_IF_ERROR(
      CopyToDeviceSync(buffer.data(), rounded.data(), rounded.size() * sizeof(Bf16)));
  return buffer;
}

}  // namespace

absl::Status RebuildSpec::Validate() const {
  if (hidden_size <= 0 || num_kv_heads <= 0 || head_dim <= 0 || head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("rebuild spec has a bad shape (hidden ",
                                                   hidden_size, ", kv heads ", num_kv_heads,
                                                   ", head_dim ", head_dim, ")"));
  }
  if (inv_freq.size() != static_cast<size_t>(head_dim / 2)) {
    return absl::InvalidArgumentError(absl::StrCat("rebuild spec has ", inv_freq.size(),
                                                   " RoPE frequencies, expected ", head_dim / 2));
  }
  if (layers.empty()) return absl::InvalidArgumentError("rebuild spec has no layers");
  const size_t kvd = kv_dim(), d = hidden_size;
  for (size_t i = 0; i < layers.size(); ++i) {
    const RebuildLayerSpec& l = layers[i];
    const int li = static_cast<int>(i);
    if (!l.has_reuse() && !l.has_patch()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rebuild spec layer ", li, " has neither REUSE decoders nor a PATCH aligner"));
    }
    if (l.has_reuse()) {
      // What ReuseDecodeStoreKv will refuse, refused now.
      if (absl::Status s = launch_checks::ReuseDecode(head_dim, l.rank_k, l.rank_v); !s.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("rebuild spec layer ", li, ": ", s.message()));
      }
      SCD_RETURN_IF_ERROR(CheckSize(l.dec_k, l.rank_k * kvd, li, "key decoder"));
      SCD_RETURN_IF_ERROR(CheckSize(l.mu_k, kvd, li, "key mean"));
      SCD_RETURN_IF_ERROR(CheckSize(l.dec_v, l.rank_v * kvd, li, "value decoder"));
      SCD_RETURN_IF_ERROR(CheckSize(l.mu_v, kvd, li, "value mean"));
    }
    if (l.has_patch()) {
      if (l.code_dim <= 0 || l.hidden_dim < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("rebuild spec layer ", li, ": patch code_dim ", l.code_dim));
      }
      const size_t r = l.code_dim, m = l.hidden_dim;
      SCD_RETURN_IF_ERROR(CheckSize(l.a, r * d, li, "aligner A"));
      SCD_RETURN_IF_ERROR(CheckSize(l.c_b2, d, li, "aligner c + b2"));
      SCD_RETURN_IF_ERROR(CheckSize(l.w1, r * m, li, "aligner W1"));
      SCD_RETURN_IF_ERROR(CheckSize(l.b1, m, li, "aligner b1"));
      SCD_RETURN_IF_ERROR(CheckSize(l.w2, m * d, li, "aligner W2"));
      SCD_RETURN_IF_ERROR(CheckSize(l.w_kv, 2 * kvd * d, li, "[W_K; W_V]"));
      if (!l.b_kv.empty()) {
        SCD_RETURN_IF_ERROR(CheckSize(l.b_kv, 2 * kvd, li, "K/V bias"));
      }
    }
  }
  return absl::OkStatus();
}

struct ScdGpuRebuilder::Impl {
  struct Layer {
    bool reuse = false, patch = false;  // the parts it has
    int rank_k = 0, rank_v = 0, code_dim = 0, hidden_dim = 0;
    DeviceBuffer dec_k, mu_k, dec_v, mu_v;  // REUSE
    DeviceBuffer a, c_b2, w1, b1, w2;       // PATCH aligner, F32
    DeviceBuffer w_kv;                      // PATCH projections, BF16 [2 kv_dim, d]
    DeviceBuffer b_kv;                      // F32 [2 kv_dim] or empty
    bool has_bias = false;
    size_t raw_slot = 0;     // bytes of its codes as sent, for max_tokens, either part
    size_t code_floats = 0;  // floats of its decoded codes per token, either part
    bool has(RebuildPart p) const { return p == RebuildPart::kReuse ? reuse : patch; }
    int CodeFloats(RebuildPart p) const {
      return p == RebuildPart::kReuse ? rank_k + rank_v : code_dim;
    }
    int ColsK(RebuildPart p) const { return p == RebuildPart::kReuse ? rank_k : code_dim; }
    int ColsV(RebuildPart p) const { return p == RebuildPart::kReuse ? rank_v : 0; }
  };

  // Where a rebuild's metadata lies on the device: the one-sequence cache table, then row_seq
  // (all 0) and the positions of its `tokens` rows.
  struct Meta {
    KvCacheTable table;
    const int32_t* row_seq = nullptr;
    const int32_t* positions = nullptr;
    size_t bytes = 0;
  };

  int hidden = 0, num_kv_heads = 0, head_dim = 0, max_tokens = 0, max_hidden = 0;
  std::vector<Layer> layers;
  DeviceBuffer inv_freq;
  std::unique_ptr<Stream> compute, copy;
  std::unique_ptr<CublasGemm> gemm;
  std::vector<std::unique_ptr<Event>> uploaded;  // per layer, on the copy stream
  std::unique_ptr<Event> start, stop;
  PinnedBuffer staging;  // every layer's codes as they travel, for max_tokens, back to back
  DeviceBuffer raw;      // the same on the device
  DeviceBuffer codes;    // every layer's codes decoded to F32 (F32 codes are used in place)
  PinnedBuffer meta_host;
  DeviceBuffer meta;  // k pointer | v pointer | layer stride | row_seq [T] | positions [T]
  DeviceBuffer h, hidden_scratch, h_bf16, kv;  // PATCH scratch

  int kv_dim() const { return num_kv_heads * head_dim; }
  // Floats of a layer's decoded codes for `rows` tokens of `cols` floats each, rounded up to
  // 16 bytes, so that every layer's codes start aligned, as F32 codes used in place do (cuBLAS
  // may pick its kernel by alignment, and the codes' format must not change the result).
  static size_t DecodedFloats(size_t cols, size_t rows) { return (rows * cols + 3) / 4 * 4; }

  // Create's steps: a layer's parts uploaded (their bytes added to *weight_bytes) with room for
  // max_tokens rows; then the streams, events and buffers every rebuild uses.
  absl::StatusOr<Layer> UploadLayer(const RebuildLayerSpec& s, size_t* weight_bytes);
  absl::Status CreateStreamsAndBuffers(bool any_patch);

  // Rebuild's steps: the checks of a call before any work; its metadata staged on the host;
  // layer l's codes staged, uploaded on the copy stream and waited for on the compute stream,
  // returning where its K and V codes lie as F32 (decoded there when sent in another format);
  // and the layer's K/V computed and stored by either part.
  absl::Status CheckRebuild(absl::Span<const LayerCodes> codes, int tokens,
                            const SequenceCache& target) const;
  Meta StageMeta(int tokens, const SequenceCache& target);
  absl::StatusOr<std::pair<const float*, const float*>> UploadCodes(const LayerCodes& codes, int l,
                                                                    int tokens, size_t raw_offset,
                                                                    size_t offset, const Meta& meta,
                                                                    double* stage_ms);
  absl::Status StoreReuse(const Layer& layer, int l, const float* z_k, const float* z_v, int tokens,
                          const Meta& meta);
  absl::Status StorePatch(const Layer& layer, int l, const float* z, int tokens, const Meta& meta);
};

absl::StatusOr<ScdGpuRebuilder::Impl::Layer> ScdGpuRebuilder::Impl::UploadLayer(
    const RebuildLayerSpec& s, size_t* weight_bytes) {
  Layer l;
  l.reuse = s.has_reuse();
  l.patch = s.has_patch();
  if (l.reuse) {
    l.rank_k = s.rank_k;
    l.rank_v = s.rank_v;
    SCD_ASSIGN_OR_RETURN(l.dec_k, UploadF32(s.dec_k, "REUSE key decoder"));
    SCD_ASSIGN_OR_RETURN(l.mu_k, UploadF32(s.mu_k, "REUSE key mean"));
    SCD_ASSIGN_OR_RETURN(l.dec_v, UploadF32(s.dec_v, "REUSE value decoder"));
    SCD_ASSIGN_OR_RETURN(l.mu_v, UploadF32(s.mu_v, "REUSE value mean"));
    *weight_bytes +=
        (s.dec_k.size() + s.mu_k.size() + s.dec_v.size() + s.mu_v.size()) * sizeof(float);
  }
  if (l.patch) {
    l.code_dim = s.code_dim;
    l.hidden_dim = s.hidden_dim;
    max_hidden = std::max(max_hidden, s.hidden_dim);
    SCD_ASSIGN_OR_RETURN(l.a, UploadF32(s.a, "aligner A"));
    SCD_ASSIGN_OR_RETURN(l.c_b2, UploadF32(s.c_b2, "aligner c + b2"));
    SCD_ASSIGN_OR_RETURN(l.w1, UploadF32(s.w1, "aligner W1"));
    SCD_ASSIGN_OR_RETURN(l.b1, UploadF32(s.b1, "aligner b1"));
    SCD_ASSIGN_OR_RETURN(l.w2, UploadF32(s.w2, "aligner W2"));
    SCD_ASSIGN_OR_RETURN(l.w_kv, UploadBf16(s.w_kv, "patch [W_K; W_V]"));
    l.has_bias = !s.b_kv.empty();
    if (l.has_bias) {
      SCD_ASSIGN_OR_RETURN(l.b_kv, UploadF32(s.b_kv, "patch K/V bias"));
    }
    *weight_bytes +=
        (s.a.size() + s.c_b2.size() + s.w1.size() + s.b1.size() + s.w2.size() + s.b_kv.size()) *
            sizeof(float) +
        s.w_kv.size() * sizeof(Bf16);
  }
  // Room for either part: raw slots K then V, each 16-byte aligned and F32-sized (no format
  // is larger).
  for (const RebuildPart part : {RebuildPart::kReuse, RebuildPart::kPatch}) {
    if (!l.has(part)) continue;
    l.raw_slot = std::max(l.raw_slot, RawSlot(CodeFormat::kF32, max_tokens, l.ColsK(part)) +
                                          RawSlot(CodeFormat::kF32, max_tokens, l.ColsV(part)));
    l.code_floats = std::max<size_t>(l.code_floats, l.CodeFloats(part));
  }
  return l;
}

absl::Status ScdGpuRebuilder::Impl::CreateStreamsAndBuffers(bool any_patch) {
  SCD_ASSIGN_OR_RETURN(compute, Stream::Create());
  SCD_ASSIGN_OR_RETURN(copy, Stream::Create());
  SCD_ASSIGN_OR_RETURN(gemm, CublasGemm::Create(compute->handle()));
  for (size_t i = 0; i < layers.size(); ++i) {
    SCD_ASSIGN_OR_RETURN(std::unique_ptr<Event> e, Event::Create());
    uploaded.push_back(std::move(e));
  }
  SCD_ASSIGN_OR_RETURN(start, Event::Create());
  SCD_ASSIGN_OR_RETURN(stop, Event::Create());
  const size_t t = max_tokens;
  size_t code_bytes = 0, raw_bytes = 0;
  for (const Layer& l : layers) {
    code_bytes += DecodedFloats(l.code_floats, t) * sizeof(float);
    raw_bytes += l.raw_slot;
  }
  SCD_RETURN_IF_ERROR(staging.Reserve(raw_bytes));
  SCD_RETURN_IF_ERROR(raw.Reserve(raw_bytes, "SCD codes (as sent)"));
  SCD_RETURN_IF_ERROR(codes.Reserve(code_bytes, "SCD codes (F32)"));
  const size_t meta_bytes = 3 * sizeof(int64_t) + 2 * t * sizeof(int32_t);
  SCD_RETURN_IF_ERROR(meta_host.Reserve(meta_bytes));
  SCD_RETURN_IF_ERROR(meta.Reserve(meta_bytes, "rebuild metadata"));
  if (!any_patch) return absl::OkStatus();
  const size_t d = hidden;
  SCD_RETURN_IF_ERROR(h.Reserve(t * d * sizeof(float), "patch H"));
  SCD_RETURN_IF_ERROR(h_bf16.Reserve(t * d * sizeof(Bf16), "patch H (BF16)"));
  SCD_RETURN_IF_ERROR(kv.Reserve(t * 2 * kv_dim() * sizeof(float), "patch K|V"));
  if (max_hidden > 0) {
    SCD_RETURN_IF_ERROR(hidden_scratch.Reserve(t * static_cast<size_t>(max_hidden) * sizeof(float),
                                               "aligner hidden"));
  }
  return absl::OkStatus();
}

ScdGpuRebuilder::ScdGpuRebuilder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ScdGpuRebuilder::~ScdGpuRebuilder() = default;

absl::StatusOr<std::unique_ptr<ScdGpuRebuilder>> ScdGpuRebuilder::Create(const RebuildSpec& spec,
                                                                         int max_tokens) {
  SCD_RETURN_IF_ERROR(spec.Validate());
  if (max_tokens <= 0) return absl::InvalidArgumentError("rebuilder needs max_tokens > 0");
  auto impl = std::make_unique<Impl>();
  impl->hidden = spec.hidden_size;
  impl->num_kv_heads = spec.num_kv_heads;
  impl->head_dim = spec.head_dim;
  impl->max_tokens = max_tokens;
  size_t bytes = 0;
  bool any_patch = false;
  for (const RebuildLayerSpec& s : spec.layers) {
    SCD_ASSIGN_OR_RETURN(Impl::Layer l, impl->UploadLayer(s, &bytes));
    any_patch = any_patch || l.patch;
    impl->layers.push_back(std::move(l));
  }
  SCD_ASSIGN_OR_RETURN(impl->inv_freq, UploadF32(spec.inv_freq, "RoPE frequencies"));
  SCD_RETURN_IF_ERROR(impl->CreateStreamsAndBuffers(any_patch));
  std::unique_ptr<ScdGpuRebuilder> r(new ScdGpuRebuilder(std::move(impl)));
  r->weight_bytes_ = bytes;
  return r;
}

int ScdGpuRebuilder::max_tokens() const { return impl_->max_tokens; }

size_t ScdGpuRebuilder::device_bytes() const {
  const Impl& m = *impl_;
  size_t bytes = m.inv_freq.size() + m.raw.size() + m.codes.size() + m.meta.size() + m.h.size() +
                 m.hidden_scratch.size() + m.h_bf16.size() + m.kv.size() +
                 m.gemm->workspace_bytes();
  for (const Impl::Layer& l : m.layers) {
    for (const DeviceBuffer* b : {&l.dec_k, &l.mu_k, &l.dec_v, &l.mu_v, &l.a, &l.c_b2, &l.w1, &l.b1,
                                  &l.w2, &l.w_kv, &l.b_kv}) {
      bytes += b->size();
    }
  }
  return bytes;
}

size_t ScdGpuRebuilder::pinned_bytes() const {
  return impl_->staging.size() + impl_->meta_host.size();
}

absl::Status ScdGpuRebuilder::Impl::CheckRebuild(absl::Span<const LayerCodes> codes, int tokens,
                                                 const SequenceCache& target) const {
  const int num_layers = static_cast<int>(layers.size());
  if (static_cast<int>(codes.size()) != num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rebuild got codes for ", codes.size(), " layers, the spec has ", num_layers));
  }
  if (tokens <= 0 || tokens > max_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("rebuild of ", tokens, " tokens; this rebuilder takes 1..", max_tokens));
  }
  if (target.k == nullptr || target.v == nullptr || target.length < 0 ||
      target.length + tokens > target.capacity ||
      target.layer_stride < static_cast<int64_t>(target.capacity) * kv_dim()) {
    return absl::OutOfRangeError(absl::StrCat(
        "rebuild target cannot hold positions [", target.length, ", ", target.length + tokens,
        ") (capacity ", target.capacity, ", layer stride ", target.layer_stride, ")"));
  }
  for (int l = 0; l < num_layers; ++l) {
    const RebuildPart part = codes[l].part;
    if (!layers[l].has(part)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rebuild codes of layer ", l, " are ",
          part == RebuildPart::kReuse ? "REUSE codes" : "a PATCH code",
          ", and this rebuilder has no ",
          part == RebuildPart::kReuse ? "REUSE decoders" : "PATCH aligner", " for that layer"));
    }
    if (codes[l].z_k == nullptr || (part == RebuildPart::kReuse && codes[l].z_v == nullptr)) {
      return absl::InvalidArgumentError(absl::StrCat("rebuild codes of layer ", l, " are missing"));
    }
  }
  return absl::OkStatus();
}

ScdGpuRebuilder::Impl::Meta ScdGpuRebuilder::Impl::StageMeta(int tokens,
                                                             const SequenceCache& target) {
  const size_t t = tokens;
  unsigned char* host = static_cast<unsigned char*>(meta_host.data());
  const int64_t head[3] = {reinterpret_cast<int64_t>(target.k), reinterpret_cast<int64_t>(target.v),
                           target.layer_stride};
  std::memcpy(host, head, sizeof(head));
  int32_t* row_seq = reinterpret_cast<int32_t*>(host + sizeof(head));
  int32_t* positions = row_seq + t;
  for (size_t i = 0; i < t; ++i) {
    row_seq[i] = 0;
    positions[i] = target.length + static_cast<int32_t>(i);
  }
  unsigned char* dev = meta.as<unsigned char>();
  Meta m;
  m.table.k = reinterpret_cast<Bf16* const*>(dev);
  m.table.v = reinterpret_cast<Bf16* const*>(dev + sizeof(int64_t));
  m.table.layer_stride = reinterpret_cast<const int64_t*>(dev + 2 * sizeof(int64_t));
  m.row_seq = reinterpret_cast<const int32_t*>(dev + sizeof(head));
  m.positions = m.row_seq + t;
  m.bytes = sizeof(head) + 2 * t * sizeof(int32_t);
  return m;
}

absl::StatusOr<std::pair<const float*, const float*>> ScdGpuRebuilder::Impl::UploadCodes(
    const LayerCodes& layer_codes, int l, int tokens, size_t raw_offset, size_t offset,
    const Meta& m, double* stage_ms) {
  const StreamHandle cs = compute->handle(), xs = copy->handle();
  const size_t t = tokens;
  const Layer& layer = layers[l];
  const RebuildPart part = layer_codes.part;
  const CodeFormat format = layer_codes.format;
  const int cols_k = layer.ColsK(part), cols_v = layer.ColsV(part);
  const size_t bytes_k = CodeBytes(format, tokens, cols_k);
  const size_t bytes_v = cols_v > 0 ? CodeBytes(format, tokens, cols_v) : 0;
  const size_t slot_k = RawSlot(format, tokens, cols_k);
  const auto t_stage = Clock::now();
  unsigned char* host = staging.as<unsigned char>() + raw_offset;
  std::memcpy(host, layer_codes.z_k, bytes_k);
  if (bytes_v > 0) std::memcpy(host + slot_k, layer_codes.z_v, bytes_v);
  *stage_ms += MsSince(t_stage);
  if (l == 0) {  // device time starts with the first upload
    SCD_RETURN_IF_ERROR(start->Record(xs));
    SCD_RETURN_IF_ERROR(CopyToDevice(meta.data(), meta_host.data(), m.bytes, xs));
  }
  unsigned char* dev = raw.as<unsigned char>() + raw_offset;
  SCD_RETURN_IF_ERROR(CopyToDevice(dev, host, slot_k + bytes_v, xs));
  SCD_RETURN_IF_ERROR(uploaded[l]->Record(xs));
  SCD_RETURN_IF_ERROR(uploaded[l]->WaitOn(cs));
  // Codes sent as F32 are used where they landed; F16 and int8 ones are decoded first.
  if (format == CodeFormat::kF32) {
    return std::make_pair(reinterpret_cast<const float*>(dev),
                          reinterpret_cast<const float*>(dev + slot_k));
  }
  float* decoded = codes.as<float>() + offset;
  SCD_RETURN_IF_ERROR(DecodeCodes(dev, format, tokens, cols_k, decoded, cs));
  if (cols_v > 0) {
    SCD_RETURN_IF_ERROR(
        DecodeCodes(dev + slot_k, format, tokens, cols_v, decoded + t * cols_k, cs));
  }
  return std::pair<const float*, const float*>(decoded, decoded + t * cols_k);
}

absl::Status ScdGpuRebuilder::Impl::StoreReuse(const Layer& layer, int l, const float* z_k,
                                               const float* z_v, int tokens, const Meta& m) {
  const LowRankDecoder key{layer.dec_k.as<float>(), layer.mu_k.as<float>(), layer.rank_k};
  const LowRankDecoder value{layer.dec_v.as<float>(), layer.mu_v.as<float>(), layer.rank_v};
  return ReuseDecodeStoreKv(z_k, z_v, tokens, key, value, m.row_seq, m.positions, m.table, l,
                            num_kv_heads, head_dim, inv_freq.as<float>(), compute->handle());
}

absl::Status ScdGpuRebuilder::Impl::StorePatch(const Layer& layer, int l, const float* z,
                                               int tokens, const Meta& m) {
  const StreamHandle cs = compute->handle();
  DeviceAlignerView view;
  view.code_dim = layer.code_dim;
  view.hidden_dim = layer.hidden_dim;
  view.out_dim = hidden;
  view.a = layer.a.as<float>();
  view.c_b2 = layer.c_b2.as<float>();
  view.w1 = layer.w1.as<float>();
  view.b1 = layer.b1.as<float>();
  view.w2 = layer.w2.as<float>();
  float* hp = h.as<float>();
  SCD_RETURN_IF_ERROR(PatchAlignerForward(*gemm, view, z, tokens, hidden_scratch.as<float>(), hp));
  SCD_RETURN_IF_ERROR(F32ToBf16(hp, h_bf16.as<Bf16>(), static_cast<int64_t>(tokens) * hidden, cs));
  const int kvd = kv_dim();
  float* kvp = kv.as<float>();
  SCD_RETURN_IF_ERROR(
      gemm->Linear(h_bf16.as<Bf16>(), layer.w_kv.as<Bf16>(), kvp, tokens, 2 * kvd, hidden));
  if (layer.has_bias) {
    SCD_RETURN_IF_ERROR(AddBias(kvp, layer.b_kv.as<float>(), tokens, 2 * kvd, 2 * kvd, cs));
  }
  return RopeStoreKv(kvp, kvp + kvd, 2 * kvd, tokens, m.row_seq, m.positions, m.table, l,
                     num_kv_heads, head_dim, inv_freq.as<float>(), cs);
}

absl::Status ScdGpuRebuilder::Rebuild(absl::Span<const LayerCodes> codes, int tokens,
                                      const SequenceCache& target, RebuildTimes* times) {
  Impl& m = *impl_;
  const auto t_begin = Clock::now();
  SCD_RETURN_IF_ERROR(m.CheckRebuild(codes, tokens, target));
  // An error return below would leave uploads and kernels queued on buffers that the next
  // Rebuild rewrites (staging at once, from the host): wait for both streams on the way out.
  // On success they are drained already.
  struct DrainOnExit {
    const Impl& m;
    ~DrainOnExit() {
      (void)m.copy->Synchronize();
      (void)m.compute->Synchronize();
    }
  } drain{m};
  const Impl::Meta meta = m.StageMeta(tokens, target);

  // Pipeline: stage layer l (host copy into pinned memory, where a UCX receive lands), upload
  // it on the copy stream and mark it; the compute stream decodes layer l once its mark is
  // reached, while the host stages layer l + 1.
  double stage_ms = 0;
  size_t offset = 0;      // floats into codes
  size_t raw_offset = 0;  // bytes into staging / raw
  for (int l = 0; l < static_cast<int>(m.layers.size()); ++l) {
    const Impl::Layer& layer = m.layers[l];
    const RebuildPart part = codes[l].part;
    SCD_ASSIGN_OR_RETURN(const auto z,
                         m.UploadCodes(codes[l], l, tokens, raw_offset, offset, meta, &stage_ms));
    if (part == RebuildPart::kReuse) {
      SCD_RETURN_IF_ERROR(m.StoreReuse(layer, l, z.first, z.second, tokens, meta));
    } else {
      SCD_RETURN_IF_ERROR(m.StorePatch(layer, l, z.first, tokens, meta));
    }
    offset += Impl::DecodedFloats(layer.CodeFloats(part), tokens);
    raw_offset += layer.raw_slot;
  }
  SCD_RETURN_IF_ERROR(m.stop->Record(m.compute->handle()));
  SCD_RETURN_IF_ERROR(m.stop->Synchronize());
  SCD_RETURN_IF_ERROR(m.copy->Synchronize());
  if (times != nullptr) {
    SCD_ASSIGN_OR_RETURN(const float gpu_ms, Event::ElapsedMs(*m.start, *m.stop));
    times->stage_ms = stage_ms;
    times->gpu_ms = gpu_ms;
    times->total_ms = MsSince(t_begin);
  }
  return absl::OkStatus();
}

}  // namespace scd::cuda
