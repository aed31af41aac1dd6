// See codec.h. The consumer side is driven by the payload's blocks (self-describing), so a
// producer-side ablation (other patch layers, other KIVI groups) needs no consumer change.
#include "common/scd/codec.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/scd/gpu_rebuild.h"
#include "common/scd/payload_checks.h"
#include "common/scd/payload_rows.h"
#include "kernels/cpu/ops.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string ArtifactIdFor(CodecMode m, const ScdArtifact* a) {
  return (a != nullptr && (m == CodecMode::kScdReuse || m == CodecMode::kScd)) ? a->id : "";
}

}  // namespace

bool CodecModeNeedsArtifact(CodecMode m) {
  return m == CodecMode::kRecompute || m == CodecMode::kScdReuse || m == CodecMode::kScd;
}

PrefillOptions ProducerPrefillOptions(CodecMode mode) {
  PrefillOptions o;
  o.surprisal = mode != CodecMode::kOracle;
  o.layer_states = mode != CodecMode::kOracle;
  o.residual = mode == CodecMode::kRecompute;
  return o;
}

absl::StatusOr<std::unique_ptr<ProducerCodec>> ProducerCodec::Create(
    std::shared_ptr<const Model> producer, std::string consumer_digest,
    std::shared_ptr<const ScdArtifact> artifact, CodecOptions options) {
  if (producer == nullptr) return absl::InvalidArgumentError("ProducerCodec: null producer");
  if (artifact != nullptr) {
    SCD_RETURN_IF_ERROR(artifact->CheckPair(producer.get(), nullptr));
    if (artifact->consumer_digest != consumer_digest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "calibration artifact is for consumer '", artifact->consumer_name,
          "', not the requested consumer (digest ", consumer_digest.substr(0, 12), ")"));
    }
  }
  if (options.kivi_group <= 0 || options.kivi_group > 65535) {
    return absl::InvalidArgumentError("kivi_group must be in [1, 65535]");
  }
  std::unique_ptr<ProducerCodec> c(new ProducerCodec);
  c->producer_ = std::move(producer);
  c->consumer_digest_ = std::move(consumer_digest);
  c->artifact_ = std::move(artifact);
  if (c->artifact_ != nullptr) c->ladder_ = RateLadder(*c->artifact_);
  if (c->on_basis()) c->section_orders_ = {c->artifact_->patch_order};
  c->options_ = std::move(options);
  return c;
}

PairDigest ProducerCodec::pair_digest(CodecMode mode) const {
  if (on_basis() && (mode == CodecMode::kScd || mode == CodecMode::kScdReuse)) {
    return MakeBasisDigest(producer_->digest(), artifact_->basis_id);
  }
  return MakePairDigest(producer_->digest(), consumer_digest_,
                        ArtifactIdFor(mode, artifact_.get()));
}

absl::Status ProducerCodec::ServeSections(const std::vector<const ScdArtifact*>& sections) {
  if (!on_basis()) {
    return absl::FailedPreconditionError(
        "payloads serve several consumers only on a shared basis; this artifact is a pair's own");
  }
  std::vector<std::vector<int>> orders = {artifact_->patch_order};
  for (const ScdArtifact* a : sections) {
    if (a == nullptr || a->consumer_digest == artifact_->consumer_digest) continue;
    if (a->basis_id != artifact_->basis_id || a->producer_digest != artifact_->producer_digest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "consumer '", a->consumer_name, "''s artifact is on basis ",
          a->basis_id.empty() ? "(none: a pair's own)" : a->basis_id.substr(0, 12), ", not ",
          artifact_->basis_id.substr(0, 12), ": one payload cannot serve both"));
    }
    if (RateLadder(*a) != ladder_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "consumers '", artifact_->consumer_name, "' and '", a->consumer_name,
          "' share a basis but not a rate ladder (patch budgets ", artifact_->patch_budget, " and ",
          a->patch_budget, "): calibrate them with the same --patch-layers"));
    }
    orders.push_back(a->patch_order);
  }
  section_orders_ = std::move(orders);
  return absl::OkStatus();
}

namespace {

// Checks that the producer's prefill states cover all `t` tokens with the hooks `mode` needs.
absl::Status CheckProducerStates(CodecMode mode, const ModelConfig& c, const PrefillResult& states,
                                 int t) {
  const PrefillOptions need = ProducerPrefillOptions(mode);
  if (states.num_tokens != t || static_cast<int>(states.layers.size()) != c.num_layers ||
      static_cast<int>(states.surprisal.size()) != t ||
      (need.residual &&
       states.layers[0].residual.size() != static_cast<size_t>(t) * c.hidden_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("producer states do not cover the ", t, " tokens with the hooks mode ",
                     std::string(CodecModeName(mode)), " needs (see ProducerPrefillOptions)"));
  }
  return absl::OkStatus();
}

// Appends layer `l`'s pre-RoPE K and its V as f16 blocks.
void AppendF16Kv(Payload& p, int l, const LayerStates& s, int t, int kvd) {
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kF16, l, s.k_pre_rope.data(), t, kvd));
  p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kF16, l, s.v.data(), t, kvd));
}

// Appends layer `l`'s K and V quantised to 8 bits (`eight`) or 4, in groups of `group`.
void AppendQuantKv(Payload& p, bool eight, int l, const LayerStates& s, int t, int kvd, int group) {
  p.blocks.push_back(MakeBlock(BlockKind::kKey, eight ? Encoding::kKeyInt8 : Encoding::kKeyInt4, l,
                               s.k_pre_rope.data(), t, kvd, group));
  p.blocks.push_back(MakeBlock(BlockKind::kValue,
                               eight ? Encoding::kValueInt8 : Encoding::kValueInt4, l, s.v.data(),
                               t, kvd, std::min(group, kvd)));
}

// Appends layer `l`'s recompute-mode blocks: the residual at the recomputed block's first
// layer, f16 K/V for every layer outside the block.
void AppendRecomputeLayer(Payload& p, const ScdArtifact& a, const ModelConfig& c, int l,
                          const LayerStates& s, int t) {
  if (l == a.recompute_first && a.recompute_end > l) {
    p.blocks.push_back(
        MakeBlock(BlockKind::kResidual, Encoding::kF16, l, s.residual.data(), t, c.hidden_size));
  }
  if (l < a.recompute_first || l >= a.recompute_end) AppendF16Kv(p, l, s, t, c.kv_dim());
}

// The rung `index` of an artifact's rate `ladder` for a payload of `mode`: rungs are scd's and
// scd-reuse's, every other mode carries 0 (and gets a rung of no meaning).
absl::StatusOr<Rung> LadderRung(const std::vector<Rung>& ladder, CodecMode mode, int index) {
  if (mode != CodecMode::kScd && mode != CodecMode::kScdReuse) {
    if (index != 0) {
      return absl::InvalidArgumentError(absl::StrCat("rung ", index, " asked of a ",
                                                     std::string(CodecModeName(mode)),
                                                     " payload (rungs are scd's and scd-reuse's)"));
    }
    return Rung{};
  }
  if (index < 0 || static_cast<size_t>(index) >= ladder.size()) {
    return absl::InvalidArgumentError(absl::StrCat("rung ", index, " is not on this artifact's ",
                                                   ladder.size(), "-rung rate ladder"));
  }
  return ladder[index];
}

bool Lists(const std::vector<int>& layers, int l) {
  return std::find(layers.begin(), layers.end(), l) != layers.end();
}

// The layers an scd payload at `rung` patches, and those it also carries REUSE codes of: one
// section (a pair's own code), its first k' patch layers, patched only; several sections on a
// shared basis, the union of theirs, with REUSE codes of each layer some section leaves
// unpatched.
struct CodeLayout {
  std::vector<int> patch, also_reuse;
};
CodeLayout LayoutOf(const std::vector<std::vector<int>>& orders, const Rung& rung) {
  CodeLayout out;
  for (const std::vector<int>& order : orders) {
    for (int i = 0; i < rung.patch_layers && i < static_cast<int>(order.size()); ++i) {
      if (!Lists(out.patch, order[i])) out.patch.push_back(order[i]);
    }
  }
  for (int l : out.patch) {
    for (const std::vector<int>& order : orders) {
      const auto end = order.begin() + std::min<size_t>(order.size(), rung.patch_layers);
      if (std::find(order.begin(), end, l) == end) {
        out.also_reuse.push_back(l);
        break;
      }
    }
  }
  return out;
}

// The code bytes per token of `layout`'s layers of `a` at `rung` (over a long payload, so that
// a block's fixed bytes vanish).
double LayoutBytesPerToken(const CodeLayout& layout, const ScdArtifact& a, const Rung& rung) {
  constexpr int kRows = 4096;
  const Encoding enc = a.code_encoding;
  double bytes = 0;
  for (int l = 0; l < a.num_layers; ++l) {
    const bool patch = Lists(layout.patch, l);
    if (patch) bytes += static_cast<double>(EncodedBytes(enc, kRows, a.rank_h, 0));
    if (!patch || Lists(layout.also_reuse, l)) {
      bytes += static_cast<double>(EncodedBytes(enc, kRows, rung.rank_k, 0) +
                                   EncodedBytes(enc, kRows, rung.rank_v, 0));
    }
  }
  return bytes / kRows;
}

// Appends layer `l`'s SCD codes: its PATCH code when `layout.patch` lists it, and its REUSE key
// and value codes at the rung's ranks when it does not, or `layout.also_reuse` does. `z` is
// scratch kept from layer to layer.
absl::Status AppendCodeLayer(Payload& p, const ScdArtifact& a, const Rung& rung,
                             const CodeLayout& layout, int l, const LayerStates& s, int t,
                             std::vector<float>& z) {
  const Encoding enc = a.code_encoding;
  const bool patch = Lists(layout.patch, l);
  if (patch) {
    auto it = a.patches.find(l);
    if (it == a.patches.end()) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " has no PATCH fit"));
    }
    const LinearCode& code = it->second.code;
    z.resize(static_cast<size_t>(t) * code.rank);
    code.Encode(s.h_in.data(), t, z.data());
    p.blocks.push_back(MakeBlock(BlockKind::kPatch, enc, l, z.data(), t, code.rank));
    if (!Lists(layout.also_reuse, l)) return absl::OkStatus();
  }
  const ReuseLayer& r = a.reuse[l];
  z.resize(static_cast<size_t>(t) * rung.rank_k);
  r.key.Encode(s.k_pre_rope.data(), t, z.data(), rung.rank_k);
  p.blocks.push_back(MakeBlock(BlockKind::kKey, enc, l, z.data(), t, rung.rank_k));
  z.resize(static_cast<size_t>(t) * rung.rank_v);
  r.value.Encode(s.v.data(), t, z.data(), rung.rank_v);
  p.blocks.push_back(MakeBlock(BlockKind::kValue, enc, l, z.data(), t, rung.rank_v));
  return absl::OkStatus();
}

}  // namespace

double ProducerCodec::SharedExtraBytesPerToken(CodecMode mode, int rung_index) const {
  if (mode != CodecMode::kScd || section_orders_.size() < 2) return 0;
  absl::StatusOr<Rung> rung = LadderRung(ladder_, mode, rung_index);
  if (!rung.ok()) return 0;
  const CodeLayout own = LayoutOf({artifact_->patch_order}, *rung);
  return LayoutBytesPerToken(LayoutOf(section_orders_, *rung), *artifact_, *rung) -
         LayoutBytesPerToken(own, *artifact_, *rung);
}

absl::StatusOr<Payload> ProducerCodec::Encode(CodecMode mode, absl::Span<const int32_t> tokens,
                                              const PrefillResult& states, int start_position,
                                              std::optional<int> rung_index) const {
  const ModelConfig& c = producer_->config;
  const int t = static_cast<int>(tokens.size());
  if (t == 0) return absl::InvalidArgumentError("nothing to encode (no tokens)");
  if (CodecModeNeedsArtifact(mode) && artifact_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", std::string(CodecModeName(mode)), " needs a calibration artifact"));
  }
  const bool codes = mode == CodecMode::kScd || mode == CodecMode::kScdReuse;
  const int rung_at = rung_index.value_or(codes ? options_.rung : 0);
  SCD_ASSIGN_OR_RETURN(const Rung rung, LadderRung(ladder_, mode, rung_at));
  Payload p;
  p.mode = mode;
  p.num_layers = static_cast<uint16_t>(c.num_layers);
  p.start_position = static_cast<uint32_t>(start_position);
  p.rung = static_cast<uint16_t>(rung_at);
  p.on_basis = codes && on_basis();
  p.pair_digest = pair_digest(mode);
  p.token_ids.assign(tokens.begin(), tokens.end());
  if (mode == CodecMode::kOracle) return p;

  SCD_RETURN_IF_ERROR(CheckProducerStates(mode, c, states, t));
  p.blocks.push_back(
      MakeBlock(BlockKind::kSurprisal, Encoding::kF16, 0, states.surprisal.data(), t, 1));
  const int kvd = c.kv_dim();
  CodeLayout layout;
  if (mode == CodecMode::kScd) {
    layout = options_.patch_layers.has_value()
                 ? CodeLayout{*options_.patch_layers, {}}
                 : LayoutOf(on_basis() ? section_orders_
                                       : std::vector<std::vector<int>>{artifact_->patch_order},
                            rung);
  }
  std::vector<float> z;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerStates& s = states.layers[l];
    switch (mode) {
      case CodecMode::kRaw:
        AppendF16Kv(p, l, s, t, kvd);
        break;
      case CodecMode::kQuant8:
      case CodecMode::kQuant4:
        AppendQuantKv(p, mode == CodecMode::kQuant8, l, s, t, kvd, options_.kivi_group);
        break;
      case CodecMode::kRecompute:
        AppendRecomputeLayer(p, *artifact_, c, l, s, t);
        break;
      case CodecMode::kScdReuse:
      case CodecMode::kScd:
        SCD_RETURN_IF_ERROR(AppendCodeLayer(p, *artifact_, rung, layout, l, s, t, z));
        break;
      case CodecMode::kOracle:
        break;
    }
  }
  return p;
}

absl::StatusOr<std::unique_ptr<ConsumerCodec>> ConsumerCodec::Create(
    std::shared_ptr<const Model> consumer, std::string producer_digest,
    std::shared_ptr<const ScdArtifact> artifact, CodecOptions options) {
  if (consumer == nullptr) return absl::InvalidArgumentError("ConsumerCodec: null consumer");
  if (options.cpu_block_rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ConsumerCodec: cpu_block_rows must be >= 0, got ", options.cpu_block_rows));
  }
  if (artifact != nullptr) {
    SCD_RETURN_IF_ERROR(artifact->CheckPair(nullptr, consumer.get()));
    if (!producer_digest.empty() && producer_digest != artifact->producer_digest) {
      return absl::FailedPreconditionError("producer digest does not match the artifact's");
    }
    producer_digest = artifact->producer_digest;
    const ModelConfig& c = consumer->config;
    if (artifact->num_layers != c.num_layers || artifact->hidden_size != c.hidden_size ||
        artifact->kv_dim != c.kv_dim()) {
      return absl::FailedPreconditionError(
          "calibration artifact dimensions do not match the consumer");
    }
  }
  std::unique_ptr<ConsumerCodec> cc(new ConsumerCodec);
  cc->consumer_ = std::move(consumer);
  cc->producer_digest_ = std::move(producer_digest);
  cc->artifact_ = std::move(artifact);
  if (cc->artifact_ != nullptr) cc->ladder_ = RateLadder(*cc->artifact_);
  cc->options_ = std::move(options);
  if (cc->options_.gpu_rebuild && cc->artifact_ != nullptr) {
    cc->gpu_ = std::make_shared<GpuRebuild>(cc->consumer_, cc->artifact_);
  }
  return cc;
}

absl::Status ConsumerCodec::ReserveRebuild(const Backend& backend, int rows) {
  if (gpu_ == nullptr || !GpuRebuild::Applies(backend)) return absl::OkStatus();
  return gpu_->Reserve(rows);
}

WorkspaceBytes ConsumerCodec::RebuildWorkspace() const {
  return gpu_ != nullptr ? gpu_->Bytes() : WorkspaceBytes{};
}

absl::Status ConsumerCodec::Check(const Payload& p, const Sequence& seq) const {
  if (p.on_basis) return CheckBasis(p, seq);
  const std::string mode_name(CodecModeName(p.mode));
  const PairDigest want =
      MakePairDigest(producer_digest_, consumer_->digest(), ArtifactIdFor(p.mode, artifact_.get()));
  if (p.pair_digest != want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "payload (", mode_name, ") was made for another model pair or artifact (pair digest ",
        PairDigestHex(p.pair_digest), ", this consumer expects ", PairDigestHex(want), ")"));
  }
  return CheckShape(p, seq);
}

absl::Status ConsumerCodec::CheckBasis(const Payload& p, const Sequence& seq) const {
  const std::string got = PairDigestHex(p.pair_digest);
  if (artifact_ == nullptr || artifact_->basis_id.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "payload (", std::string(CodecModeName(p.mode)),
        ") was encoded on a shared producer basis "
        "(basis digest ",
        got, "), and this consumer's artifact ",
        artifact_ == nullptr ? "is missing" : "is its pair's own code, on no shared basis"));
  }
  const PairDigest want = MakeBasisDigest(producer_digest_, artifact_->basis_id);
  if (p.pair_digest != want) {
    return absl::FailedPreconditionError(
        absl::StrCat("payload (", std::string(CodecModeName(p.mode)),
                     ") was encoded on another producer or "
                     "shared basis (basis digest ",
                     got, "); this consumer's artifact section is on basis ",
                     artifact_->basis_id.substr(0, 12), " (digest ", PairDigestHex(want), ")"));
  }
  return CheckShape(p, seq);
}

absl::Status ConsumerCodec::CheckShape(const Payload& p, const Sequence& seq) const {
  const ModelConfig& c = consumer_->config;
  if (p.num_layers != c.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("payload has ", p.num_layers, " layers, consumer has ", c.num_layers));
  }
  if (static_cast<int>(p.start_position) != seq.length()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "payload starts at position ", p.start_position, " but the sequence holds ", seq.length()));
  }
  if (p.token_ids.empty()) return absl::InvalidArgumentError("payload holds no tokens");
  if (CodecModeNeedsArtifact(p.mode) && artifact_ != nullptr) {
    SCD_RETURN_IF_ERROR(LadderRung(ladder_, p.mode, p.rung).status());
  }
  return absl::OkStatus();
}

std::vector<int> ConsumerCodec::OwnPatchLayers(CodecMode mode, const Rung& rung) const {
  if (mode != CodecMode::kScd || artifact_ == nullptr) return {};
  const auto& order = artifact_->patch_order;
  return std::vector<int>(order.begin(),
                          order.begin() + std::min<size_t>(order.size(), rung.patch_layers));
}

bool ConsumerCodec::OwnLayout(const Payload& p) const {
  if (!p.on_basis) return true;
  absl::StatusOr<Rung> rung = LadderRung(ladder_, p.mode, p.rung);
  if (!rung.ok()) return false;
  const std::vector<int> own = OwnPatchLayers(p.mode, *rung);
  for (const PayloadBlock& b : p.blocks) {
    if (b.kind == BlockKind::kPatch && !Lists(own, b.layer)) return false;
    if (b.kind == BlockKind::kKey && Lists(own, b.layer)) return false;
  }
  return true;
}

struct ConsumerCodec::HostBuffers {
  ExternalKv kv;          // the block's K/V, every layer
  std::vector<float> h;   // a patch's aligned H_in, or a recompute block's residual
  std::vector<float> z;   // a patch's or a key's codes
  std::vector<float> z2;  // a value's codes
  Payload part;           // the block's rows of the payload
};

absl::Status ConsumerCodec::Rebuild(const Payload& p, Backend& backend, Sequence& seq,
                                    RebuildStats* stats) const {
  SCD_RETURN_IF_ERROR(Check(p, seq));
  const std::string mode_name(CodecModeName(p.mode));
  RebuildStats local;
  RebuildStats& st = stats ? *stats : local;
  if (p.mode == CodecMode::kOracle) {
    auto t0 = Clock::now();
    PrefillResult ignored;
    SCD_RETURN_IF_ERROR(backend.Prefill(seq, p.token_ids, PrefillOptions{}, &ignored));
    st.append_seconds += Since(t0);
    return absl::OkStatus();
  }
  if (CodecModeNeedsArtifact(p.mode) && artifact_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", mode_name, " needs this consumer's calibration artifact"));
  }
  // The GPU rebuild decodes the top rung of a pair's own layout; a lower rung's narrower
  // codes, or a shared-basis payload with other sections' layers, rebuild on the host.
  if (gpu_ != nullptr && (p.mode == CodecMode::kScd || p.mode == CodecMode::kScdReuse) &&
      p.rung == 0 && OwnLayout(p) && GpuRebuild::Applies(backend)) {
    return gpu_->Rebuild(p, backend, seq, &st);
  }
  // On the host: in blocks of rows, through buffers reused from block to block. Buffers of at
  // most a default block stay with the thread: a fresh buffer's page faults cost more than
  // its decode (the allocator hands buffers this size back to the kernel when freed).
  const size_t rows = p.token_ids.size();
  const size_t block = HostBlockRows(p);
  if (static_cast<size_t>(seq.capacity() - seq.length()) < rows) {  // before any block lands
    return absl::OutOfRangeError(absl::StrCat("payload of ", rows, " tokens at position ",
                                              seq.length(), " exceeds sequence capacity ",
                                              seq.capacity()));
  }
  thread_local HostBuffers kept;
  HostBuffers fresh;
  HostBuffers& buffers = block <= DefaultBlockRows() ? kept : fresh;
  if (block >= rows) return RebuildOnHost(p, backend, seq, st, buffers);
  for (size_t begin = 0; begin < rows; begin += block) {
    SCD_RETURN_IF_ERROR(PayloadRowsInto(p, begin, std::min(begin + block, rows), &buffers.part));
    SCD_RETURN_IF_ERROR(RebuildOnHost(buffers.part, backend, seq, st, buffers));
  }
  return absl::OkStatus();
}

size_t ConsumerCodec::DefaultBlockRows() const {
  const ModelConfig& c = consumer_->config;
  const size_t row_bytes = sizeof(float) * 2 * static_cast<size_t>(c.num_layers) * c.kv_dim();
  return std::max(kCpuRebuildBlockBytes / row_bytes, kCpuRebuildMinBlockRows);
}

size_t ConsumerCodec::HostBlockRows(const Payload& p) const {
  const size_t rows = p.token_ids.size();
  if (p.mode == CodecMode::kRecompute) return rows;
  const size_t block = options_.cpu_block_rows > 0 ? static_cast<size_t>(options_.cpu_block_rows)
                                                   : DefaultBlockRows();
  if (block >= rows) return rows;
  const size_t step = PayloadRowGranularity(p);
  return std::min(std::max(block / step, size_t{1}) * step, rows);
}

namespace {

// Rebuilds layer `l`'s pre-RoPE K and V from its PATCH block: decodes the codes into `z`,
// aligns them into H_in in `h`, and projects H_in with the consumer's own weights.
absl::Status RebuildPatchLayer(const Payload& p, const PayloadBlock* pb, int l,
                               const ScdArtifact* artifact, const Model& consumer,
                               std::vector<float>& z, std::vector<float>& h, ExternalKv& kv) {
  const ModelConfig& c = consumer.config;
  const int t = static_cast<int>(p.token_ids.size());
  const int kvd = c.kv_dim();
  SCD_ASSIGN_OR_RETURN(const PatchAligner* aligner_ptr, PatchAlignerFor(p, pb, l, artifact));
  const PatchAligner& aligner = *aligner_ptr;
  SCD_RETURN_IF_ERROR(pb->DecodeInto(&z));
  h.resize(static_cast<size_t>(t) * c.hidden_size);
  aligner.Apply(z.data(), t, h.data());
  // Regenerate pre-RoPE K and V with the consumer's own projections.
  const LayerWeights& lw = consumer.weights.layers[l];
  kv.k_pre_rope[l].resize(static_cast<size_t>(t) * kvd);
  kv.v[l].resize(static_cast<size_t>(t) * kvd);
  cpu::Linear(h.data(), lw.wk.data(), lw.bk.empty() ? nullptr : lw.bk.data(),
              kv.k_pre_rope[l].data(), t, kvd, c.hidden_size);
  cpu::Linear(h.data(), lw.wv.data(), lw.bv.empty() ? nullptr : lw.bv.data(), kv.v[l].data(), t,
              kvd, c.hidden_size);
  return absl::OkStatus();
}

// Decodes layer `l`'s REUSE key and value codes (through `z` and `z2`) back into K and V.
absl::Status DecodeCodeLayer(const ReuseLayer& r, const Rung& rung, const PayloadBlock* kb,
                             const PayloadBlock* vb, int l, int t, int kvd,
                             const std::string& mode_name, std::vector<float>& z,
                             std::vector<float>& z2, ExternalKv& kv) {
  SCD_RETURN_IF_ERROR(ExpectBlockCols(kb, rung.rank_k, "key code", l, mode_name));
  SCD_RETURN_IF_ERROR(ExpectBlockCols(vb, rung.rank_v, "value code", l, mode_name));
  SCD_RETURN_IF_ERROR(kb->DecodeInto(&z));
  SCD_RETURN_IF_ERROR(vb->DecodeInto(&z2));
  kv.k_pre_rope[l].resize(static_cast<size_t>(t) * kvd);
  kv.v[l].resize(static_cast<size_t>(t) * kvd);
  r.key.Decode(z.data(), t, kv.k_pre_rope[l].data(), rung.rank_k);
  r.value.Decode(z2.data(), t, kv.v[l].data(), rung.rank_v);
  return absl::OkStatus();
}

// Decodes layer `l`'s plain (f16 or quantised) key and value blocks straight into K and V.
absl::Status DecodeKvLayer(const PayloadBlock* kb, const PayloadBlock* vb, int l, int kvd,
                           const std::string& mode_name, ExternalKv& kv) {
  SCD_RETURN_IF_ERROR(ExpectBlockCols(kb, kvd, "key", l, mode_name));
  SCD_RETURN_IF_ERROR(ExpectBlockCols(vb, kvd, "value", l, mode_name));
  SCD_RETURN_IF_ERROR(kb->DecodeInto(&kv.k_pre_rope[l]));
  SCD_RETURN_IF_ERROR(vb->DecodeInto(&kv.v[l]));
  return absl::OkStatus();
}

}  // namespace

absl::Status ConsumerCodec::RebuildOnHost(const Payload& p, Backend& backend, Sequence& seq,
                                          RebuildStats& st, HostBuffers& buffers) const {
  const ModelConfig& c = consumer_->config;
  const int t = static_cast<int>(p.token_ids.size());
  const std::string mode_name(CodecModeName(p.mode));
  auto t0 = Clock::now();
  const int kvd = c.kv_dim();
  ExternalKv& kv = buffers.kv;
  kv.num_tokens = t;
  kv.k_pre_rope.resize(c.num_layers);
  kv.v.resize(c.num_layers);
  const PayloadBlock* residual = nullptr;
  SCD_ASSIGN_OR_RETURN(const Rung rung, LadderRung(ladder_, p.mode, p.rung));
  const std::vector<int> own_patch = p.on_basis ? OwnPatchLayers(p.mode, rung) : std::vector<int>{};
  int recompute_first = -1, recompute_end = -1;
  for (int l = 0; l < c.num_layers; ++l) {
    const PayloadBlock* kb = p.Find(BlockKind::kKey, l);
    const PayloadBlock* vb = p.Find(BlockKind::kValue, l);
    const PayloadBlock* pb = p.Find(BlockKind::kPatch, l);
    const PayloadBlock* rb = p.Find(BlockKind::kResidual, l);
    if (rb != nullptr) {
      SCD_RETURN_IF_ERROR(ExpectBlockCols(rb, c.hidden_size, "residual", l, mode_name));
      if (residual != nullptr) return absl::InvalidArgumentError("payload has two residual blocks");
      residual = rb;
      recompute_first = l;
    }
    const bool codes = p.mode == CodecMode::kScdReuse || p.mode == CodecMode::kScd;
    // A shared-basis payload serving several sections may carry a layer both ways: this
    // consumer's own selection decides.
    if (p.on_basis && pb != nullptr && kb != nullptr && !Lists(own_patch, l)) pb = nullptr;
    if (pb != nullptr) {
      SCD_RETURN_IF_ERROR(
          RebuildPatchLayer(p, pb, l, artifact_.get(), *consumer_, buffers.z, buffers.h, kv));
      continue;
    }
    if (kb == nullptr && vb == nullptr && p.mode == CodecMode::kRecompute && recompute_first >= 0) {
      recompute_end = l + 1;  // inside the recomputed block: filled by RecomputeLayers
      kv.k_pre_rope[l].assign(static_cast<size_t>(t) * kvd, 0.0f);
      kv.v[l].assign(static_cast<size_t>(t) * kvd, 0.0f);
      continue;
    }
    if (codes) {
      SCD_RETURN_IF_ERROR(DecodeCodeLayer(artifact_->reuse[l], rung, kb, vb, l, t, kvd, mode_name,
                                          buffers.z, buffers.z2, kv));
    } else {
      SCD_RETURN_IF_ERROR(DecodeKvLayer(kb, vb, l, kvd, mode_name, kv));
    }
  }
  if (p.mode == CodecMode::kRecompute &&
      (residual == nullptr || recompute_end <= recompute_first)) {
    return absl::InvalidArgumentError(
        "recompute payload lacks its residual block or its block is empty");
  }
  st.decode_seconds += Since(t0);
  t0 = Clock::now();
  SCD_RETURN_IF_ERROR(backend.AppendKv(seq, kv));
  if (residual != nullptr) {
    SCD_RETURN_IF_ERROR(residual->DecodeInto(&buffers.h));
    SCD_RETURN_IF_ERROR(backend.RecomputeLayers(seq, static_cast<int>(p.start_position),
                                                recompute_first, recompute_end, buffers.h));
  }
  st.append_seconds += Since(t0);
  return absl::OkStatus();
}

}  // namespace scd
