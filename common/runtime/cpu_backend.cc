// CpuBackend (see cpu_backend.h). One forward routine serves prefill and batched decode: the
// rows of a step are grouped into runs that belong to one sequence at consecutive positions
// (prefill: one run of T rows; decode: B runs of one row). Projections and the FFN are GEMMs
// over all rows, so a decode batch streams each weight matrix once; attention runs per group
// against that sequence's cache. DecodeMixed adds rows of no sequence after the groups, whose
// attention is the caller's (RowAttention: a SEKV cache).
#include "common/runtime/cpu_backend.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/huge_pages.h"
#include "common/base/status_macros.h"
#include "common/runtime/cpu_weights.h"
#include "common/runtime/input_checks.h"
#include "kernels/cpu/compute_pool.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"

namespace scd {
namespace {

class CpuSequence : public Sequence {
 public:
  // The cache is left uninitialised, on huge pages where it is large: only positions
  // [0, length) are ever read, each written first. So its pages are touched as positions
  // arrive (chunk by chunk, step by step) and never beyond what the sequence reaches. Zeroing
  // the whole capacity here cost a 4 KB page fault per page up front, in the loop iteration
  // that admitted the request (about 70 MB at stories110M's 1024 positions: 17k faults, a
  // quarter of a second on a virtualised host).
  CpuSequence(int num_layers, int capacity, int kv_dim) : capacity_(capacity) {
    const size_t n = static_cast<size_t>(capacity) * kv_dim;
    for (int l = 0; l < num_layers; ++l) {
      k_.push_back(NewFloatsWithHugePages(n));
      v_.push_back(NewFloatsWithHugePages(n));
    }
  }
  int length() const override { return length_; }
  int capacity() const override { return capacity_; }

  int capacity_;
  int length_ = 0;
  std::vector<HugeFloats> k_;  // [layer][capacity * kv_dim], RoPE applied
  std::vector<HugeFloats> v_;
  std::vector<float> last_logits_;  // logits after the last position; empty when unknown
};

// A run of rows that belong to one sequence at consecutive positions.
struct RowGroup {
  CpuSequence* seq;
  int first_row;
  int rows;
  int start_pos;
};

class CpuBackend : public Backend {
 public:
  // The projections are applied one by one, straight from the model's weights: fusing Q|K|V
  // and gate|up into wider matrices would copy two thirds of the weights at load (and keep
  // both copies resident), for a prefill gain within the machine's noise.
  CpuBackend(std::shared_ptr<const Model> model, WeightDtype dtype)
      : model_(std::move(model)),
        inv_freq_(RopeInverseFrequencies(model_->config)),
        weights_(PrepareCpuWeights(*model_, dtype)) {}

  size_t weight_bytes() const { return weights_.bytes; }
  size_t streamed_bytes() const { return weights_.streamed; }

  std::string kernel_description() const override {
    return absl::StrCat(weights_.dtype == WeightDtype::kInt8
                            ? "weights int8 (blocks of 32, an f16 scale each)"
                            : "weights f32",
                        ", ", absl::StrFormat("%.1f", weights_.bytes / 1e6), " MB; projections ",
                        std::string(cpu::IsaName(cpu::ActiveIsa())), " on ",
                        cpu::ComputePool::Global().threads(), " threads");
  }

  std::string_view name() const override { return "cpu"; }
  std::string device_description() const override {
    return absl::StrCat("host CPU (", std::thread::hardware_concurrency(), " hardware threads)");
  }
  const Model& model() const override { return *model_; }

  absl::StatusOr<std::unique_ptr<Sequence>> NewSequence(int capacity) override {
    const ModelConfig& c = model_->config;
    if (capacity <= 0 || capacity > c.max_position_embeddings) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence capacity ", capacity,
                       " must be in [1, max_position_embeddings=", c.max_position_embeddings, "]"));
    }
    return std::unique_ptr<Sequence>(new CpuSequence(c.num_layers, capacity, c.kv_dim()));
  }

  size_t SequenceBytes(int capacity) const override {  // CpuSequence's K and V, in float
    const ModelConfig& c = model_->config;
    return 2 * sizeof(float) * static_cast<size_t>(c.num_layers) * std::max(capacity, 0) *
           c.kv_dim();
  }

  absl::Status Prefill(Sequence& seq_base, absl::Span<const int32_t> tokens,
                       const PrefillOptions& options, PrefillResult* result) override {
    auto& seq = static_cast<CpuSequence&>(seq_base);
    const ModelConfig& c = model_->config;
    const int t = static_cast<int>(tokens.size());
    if (t == 0) return absl::InvalidArgumentError("prefill needs at least one token");
    if (seq.length_ + t > seq.capacity_) {
      return absl::OutOfRangeError(absl::StrCat("prefill of ", t, " tokens at position ",
                                                seq.length_, " exceeds sequence capacity ",
                                                seq.capacity_));
    }
    SCD_RETURN_IF_ERROR(CheckTokenIds(model_->config, tokens));
    std::vector<RowGroup> groups = {{&seq, 0, t, seq.length_}};
    std::vector<int32_t> positions(t);
    for (int i = 0; i < t; ++i) positions[i] = seq.length_ + i;

    std::vector<LayerStates>* hooks = nullptr;
    result->layers.clear();
    if (options.layer_states || options.residual) {
      result->layers.resize(c.num_layers);
      hooks = &result->layers;
    }
    std::vector<float> hidden;
    SCD_RETURN_IF_ERROR(Forward(tokens, positions, groups, {}, hooks, options.layer_states,
                                options.residual, &hidden));

    // Logits: every row when asked for them or for surprisal, else the last row only.
    const bool all_rows = options.all_logits || options.surprisal;
    const int first = all_rows ? 0 : t - 1;
    const int rows = t - first;
    const size_t logit_count = static_cast<size_t>(rows) * c.vocab_size;
    float* logits = options.all_logits
                        ? (ResizeWithHugePages(result->logits, logit_count), result->logits.data())
                        : Buffer(arena_.logits, logit_count);
    weights_.output.Apply(hidden.data() + static_cast<size_t>(first) * c.hidden_size, logits, rows);

    result->num_tokens = t;
    result->surprisal.clear();
    if (options.surprisal) {
      result->surprisal.assign(t, 0.0f);
      if (!seq.last_logits_.empty()) {
        cpu::NegLogLikelihood(seq.last_logits_.data(), tokens.data(), result->surprisal.data(), 1,
                              c.vocab_size);
      }
      if (t > 1) {
        cpu::NegLogLikelihood(logits, tokens.data() + 1, result->surprisal.data() + 1, t - 1,
                              c.vocab_size);
      }
    }
    const float* last = logits + logit_count - c.vocab_size;
    seq.last_logits_.assign(last, last + c.vocab_size);
    if (!options.all_logits) result->logits.assign(last, last + c.vocab_size);
    seq.length_ += t;
    return absl::OkStatus();
  }

  absl::Status AppendKv(Sequence& seq_base, const ExternalKv& kv) override {
    auto& seq = static_cast<CpuSequence&>(seq_base);
    const ModelConfig& c = model_->config;
    const int t = kv.num_tokens;
    const size_t want = static_cast<size_t>(t) * c.kv_dim();
    SCD_RETURN_IF_ERROR(CheckExternalKv(c, kv));
    if (seq.length_ + t > seq.capacity_) {
      return absl::OutOfRangeError(absl::StrCat("external KV of ", t, " tokens at position ",
                                                seq.length_, " exceeds sequence capacity ",
                                                seq.capacity_));
    }
    std::vector<int32_t> positions(t);
    for (int i = 0; i < t; ++i) positions[i] = seq.length_ + i;
    const size_t offset = static_cast<size_t>(seq.length_) * c.kv_dim();
    std::vector<float> rope_cos(static_cast<size_t>(t) * (c.head_dim / 2)),
        rope_sin(rope_cos.size());
    cpu::RopeTable(t, c.head_dim, positions.data(), inv_freq_.data(), rope_cos.data(),
                   rope_sin.data());
    for (int l = 0; l < c.num_layers; ++l) {
      float* k_dst = seq.k_[l].get() + offset;
      std::memcpy(k_dst, kv.k_pre_rope[l].data(), want * sizeof(float));
      cpu::ApplyRopeTable(k_dst, t, c.num_kv_heads, c.head_dim, rope_cos.data(), rope_sin.data());
      std::memcpy(seq.v_[l].get() + offset, kv.v[l].data(), want * sizeof(float));
    }
    seq.length_ += t;
    seq.last_logits_.clear();  // no logits exist for positions computed elsewhere
    return absl::OkStatus();
  }

  absl::Status ReadKv(const Sequence& seq_base, int start, int rows,
                      ExternalKv* out) const override {
    const auto& seq = static_cast<const CpuSequence&>(seq_base);
    if (start < 0 || rows < 0 || start + rows > seq.length_) {
      return absl::OutOfRangeError(absl::StrCat("positions [", start, ", ", start + rows,
                                                ") are outside the sequence's ", seq.length_));
    }
    const ModelConfig& c = model_->config;
    const size_t n = static_cast<size_t>(rows) * c.kv_dim();
    const size_t offset = static_cast<size_t>(start) * c.kv_dim();
    out->num_tokens = rows;
    out->k_pre_rope.assign(c.num_layers, {});
    out->v.assign(c.num_layers, {});
    for (int l = 0; l < c.num_layers; ++l) {
      out->k_pre_rope[l].assign(seq.k_[l].get() + offset, seq.k_[l].get() + offset + n);
      out->v[l].assign(seq.v_[l].get() + offset, seq.v_[l].get() + offset + n);
    }
    return absl::OkStatus();
  }

  absl::Status Decode(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                      std::vector<float>* logits) override {
    SCD_RETURN_IF_ERROR(CheckDecodeBatch(seqs, tokens));
    return DecodeRows(seqs, tokens, ExternalRows{}, logits);
  }

  absl::Status DecodeMixed(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                           absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                           const ExternalRows& external,
                           std::vector<std::vector<float>>* external_logits) override {
    if (draws.size() != seqs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("decode batch has ", seqs.size(),
                                                     " sequences and ", draws.size(), " draws"));
    }
    std::vector<float> logits;
    SCD_RETURN_IF_ERROR(DecodeRows(seqs, tokens, external, &logits));
    const int vocab = model_->config.vocab_size;
    SampleHostRows(logits.data(), vocab, draws, next);
    external_logits->resize(external.size());
    for (size_t i = 0; i < external.size(); ++i) {
      const auto row = logits.begin() + static_cast<long>(seqs.size() + i) * vocab;
      (*external_logits)[i].assign(row, row + vocab);
    }
    return absl::OkStatus();
  }

  absl::Status RecomputeLayers(Sequence& seq_base, int start, int first_layer, int end_layer,
                               absl::Span<const float> residual_in) override {
    auto& seq = static_cast<CpuSequence&>(seq_base);
    const ModelConfig& c = model_->config;
    const int rows = static_cast<int>(residual_in.size() / c.hidden_size);
    if (first_layer < 0 || end_layer > c.num_layers || first_layer >= end_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "recompute layers [", first_layer, ", ", end_layer, ") outside [0, ", c.num_layers, ")"));
    }
    if (rows <= 0 || residual_in.size() != static_cast<size_t>(rows) * c.hidden_size) {
      return absl::InvalidArgumentError("recompute residual is not [rows, hidden_size]");
    }
    if (start < 0 || start + rows > seq.length_) {
      return absl::OutOfRangeError(absl::StrCat("recompute rows [", start, ", ", start + rows,
                                                ") are not all in the sequence (length ",
                                                seq.length_, ")"));
    }
    std::vector<RowGroup> groups = {{&seq, 0, rows, start}};
    std::vector<int32_t> positions(rows);
    for (int i = 0; i < rows; ++i) positions[i] = start + i;
    std::vector<float> x(residual_in.begin(), residual_in.end());
    return RunLayers(first_layer, end_layer, positions, groups, {}, nullptr, false, false, &x);
  }

 private:
  // One decode step: a row for each of `seqs` (tokens[i] at its next position), then one for
  // each of `external`'s rows (attention theirs); logits [B + E, vocab] into *logits. Every
  // input is checked first; the sequences advance only when the whole step succeeds.
  absl::Status DecodeRows(absl::Span<Sequence* const> seqs, absl::Span<const int32_t> tokens,
                          const ExternalRows& external, std::vector<float>* logits) {
    const ModelConfig& c = model_->config;
    const int b = static_cast<int>(seqs.size());
    const int e = static_cast<int>(external.size());
    SCD_RETURN_IF_ERROR(CheckDecodeRows(c, seqs, tokens, external));
    std::unordered_set<Sequence*> seen;
    std::vector<RowGroup> groups;
    std::vector<int32_t> ids(tokens.begin(), tokens.end()), positions(b);
    for (int i = 0; i < b; ++i) {
      auto* seq = static_cast<CpuSequence*>(seqs[i]);
      if (seq == nullptr || !seen.insert(seq).second) {
        return absl::InvalidArgumentError("decode batch holds a null or repeated sequence");
      }
      if (seq->length_ >= seq->capacity_) {
        return absl::OutOfRangeError(
            absl::StrCat("sequence ", i, " is full (capacity ", seq->capacity_, ")"));
      }
      groups.push_back({seq, i, 1, seq->length_});
      positions[i] = seq->length_;
    }
    ids.insert(ids.end(), external.tokens.begin(), external.tokens.end());
    positions.insert(positions.end(), external.positions.begin(), external.positions.end());
    logits->clear();
    if (b + e == 0) return absl::OkStatus();
    std::vector<float> hidden;
    SCD_RETURN_IF_ERROR(
        Forward(ids, positions, groups, external.attention, nullptr, false, false, &hidden));
    logits->resize(static_cast<size_t>(b + e) * c.vocab_size);
    weights_.output.Apply(hidden.data(), logits->data(), b + e);
    for (int i = 0; i < b; ++i) {
      groups[i].seq->length_ += 1;
      groups[i].seq->last_logits_.assign(logits->begin() + static_cast<long>(i) * c.vocab_size,
                                         logits->begin() + static_cast<long>(i + 1) * c.vocab_size);
    }
    return absl::OkStatus();
  }

  // Runs every layer on `ids` (one row each) and leaves the final-normed hidden states in
  // `out` [rows, d]. Writes K/V of each group's rows into its sequence cache (not committing
  // the sequence length; callers do that on success). The last external.size() rows belong to
  // no group: their attention is external's.
  absl::Status Forward(absl::Span<const int32_t> ids, const std::vector<int32_t>& positions,
                       const std::vector<RowGroup>& groups,
                       absl::Span<RowAttention* const> external, std::vector<LayerStates>* hooks,
                       bool keep_states, bool keep_residual, std::vector<float>* out) {
    const ModelConfig& c = model_->config;
    std::vector<float> x(static_cast<size_t>(ids.size()) * c.hidden_size);
    cpu::Embed(model_->weights.embed.data(), ids.data(), x.data(), static_cast<int>(ids.size()),
               c.hidden_size);
    SCD_RETURN_IF_ERROR(RunLayers(0, c.num_layers, positions, groups, external, hooks, keep_states,
                                  keep_residual, &x));
    cpu::RmsNorm(x.data(), model_->weights.final_norm.data(), x.data(),
                 static_cast<int>(ids.size()), c.hidden_size, c.rms_norm_eps);
    *out = std::move(x);
    return absl::OkStatus();
  }

  // The work buffers of one RunLayers call, carved out of arena_ (see LayerBuffers).
  struct LayerPointers {
    float *xn, *tmp, *q, *att, *k, *v, *gate, *up, *scratch;
    float *rope_cos, *rope_sin;  // [rows, head_dim / 2] RoPE table of the rows' positions
  };

  // Sizes the work buffers for `positions.size()` rows and `groups`' attention, and fills the
  // RoPE table. Work buffers live in the backend and only grow, so steady-state calls fault no
  // pages.
  LayerPointers LayerBuffers(const std::vector<int32_t>& positions,
                             const std::vector<RowGroup>& groups) {
    const ModelConfig& c = model_->config;
    const int rows = static_cast<int>(positions.size());
    const int d = c.hidden_size, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.intermediate_size;
    const size_t n = static_cast<size_t>(rows);
    LayerPointers b;
    b.xn = Buffer(arena_.xn, n * d);
    b.tmp = Buffer(arena_.tmp, n * d);
    b.q = Buffer(arena_.q, n * qd);
    b.att = Buffer(arena_.att, n * qd);
    b.k = Buffer(arena_.k, n * kvd);
    b.v = Buffer(arena_.v, n * kvd);
    b.gate = Buffer(arena_.gate, n * ffn);
    b.up = Buffer(arena_.up, n * ffn);
    long scratch_floats = 0;
    for (const RowGroup& g : groups) {
      scratch_floats =
          std::max(scratch_floats, cpu::AttentionScratchFloats(g.rows, g.start_pos, c.num_heads));
    }
    b.scratch = Buffer(arena_.scratch, static_cast<size_t>(scratch_floats));
    // RoPE angles depend only on position: one table for Q, K and every layer.
    const size_t half = static_cast<size_t>(c.head_dim / 2);
    b.rope_cos = Buffer(arena_.rope_cos, n * half);
    b.rope_sin = Buffer(arena_.rope_sin, n * half);
    cpu::RopeTable(rows, c.head_dim, positions.data(), inv_freq_.data(), b.rope_cos, b.rope_sin);
    return b;
  }

  // Layer `l`'s attention norm and Q, K and V projections of `x` into b.q, b.k and b.v.
  void ProjectQkv(int l, int rows, const std::vector<float>& x, const LayerPointers& b) {
    const ModelConfig& c = model_->config;
    cpu::RmsNorm(x.data(), model_->weights.layers[l].attn_norm.data(), b.xn, rows, c.hidden_size,
                 c.rms_norm_eps);
    const CpuLayerMatrices& m = weights_.layers[l];
    const CpuMatrix* qkv[] = {&m.q, &m.k, &m.v};
    float* const out[] = {b.q, b.k, b.v};
    CpuMatrix::ApplyMany(qkv, out, 3, b.xn, rows);
  }

  // Layer `l`'s attention into b.att: RoPE on b.q and b.k, each group's K/V written to its
  // cache and attended causally, the external rows through their RowAttention.
  absl::Status AttendLayer(int l, int rows, const std::vector<RowGroup>& groups,
                           absl::Span<RowAttention* const> external, const LayerPointers& b) {
    const ModelConfig& c = model_->config;
    const int qd = c.q_dim(), kvd = c.kv_dim();
    cpu::ApplyRopeTable(b.q, rows, c.num_heads, c.head_dim, b.rope_cos, b.rope_sin);
    cpu::ApplyRopeTable(b.k, rows, c.num_kv_heads, c.head_dim, b.rope_cos, b.rope_sin);
    for (const RowGroup& g : groups) {
      const size_t src = static_cast<size_t>(g.first_row) * kvd;
      const size_t dst = static_cast<size_t>(g.start_pos) * kvd;
      const size_t n = static_cast<size_t>(g.rows) * kvd;
      std::memcpy(g.seq->k_[l].get() + dst, b.k + src, n * sizeof(float));
      std::memcpy(g.seq->v_[l].get() + dst, b.v + src, n * sizeof(float));
      cpu::CausalAttention(b.q + static_cast<size_t>(g.first_row) * qd, g.seq->k_[l].get(),
                           g.seq->v_[l].get(), b.att + static_cast<size_t>(g.first_row) * qd,
                           g.rows, g.start_pos, c.num_heads, c.num_kv_heads, c.head_dim,
                           c.sliding_window, b.scratch);
    }
    const size_t n = static_cast<size_t>(rows);
    for (size_t i = 0; i < external.size(); ++i) {
      const size_t r = n - external.size() + i;
      SCD_RETURN_IF_ERROR(external[i]->Attend(l, b.q + r * qd, b.k + r * kvd, b.v + r * kvd,
                                              b.att + r * qd, nullptr));
    }
    return absl::OkStatus();
  }

  // Layer `l`'s SwiGLU feed-forward block on `x`, added to `x` in place.
  void FeedForward(int l, int rows, const LayerPointers& b, std::vector<float>& x) {
    const ModelConfig& c = model_->config;
    const CpuLayerMatrices& m = weights_.layers[l];
    cpu::RmsNorm(x.data(), model_->weights.layers[l].ffn_norm.data(), b.xn, rows, c.hidden_size,
                 c.rms_norm_eps);
    const CpuMatrix* gate_up[] = {&m.gate, &m.up};
    float* const out[] = {b.gate, b.up};
    CpuMatrix::ApplyMany(gate_up, out, 2, b.xn, rows);
    cpu::SwiGlu(b.gate, b.up, b.gate, rows * c.intermediate_size);  // elementwise, in place
    m.down.Apply(b.gate, b.tmp, rows);
    for (size_t i = 0; i < x.size(); ++i) x[i] += b.tmp[i];
  }

  // Runs layers [first, end) on the residual stream `x` [rows, d] in place (rows as Forward's).
  absl::Status RunLayers(int first, int end, const std::vector<int32_t>& positions,
                         const std::vector<RowGroup>& groups,
                         absl::Span<RowAttention* const> external, std::vector<LayerStates>* hooks,
                         bool keep_states, bool keep_residual, std::vector<float>* x_inout) {
    const ModelConfig& c = model_->config;
    std::vector<float>& x = *x_inout;
    const int rows = static_cast<int>(positions.size());
    const int d = c.hidden_size, kvd = c.kv_dim();
    const size_t n = static_cast<size_t>(rows);
    const LayerPointers b = LayerBuffers(positions, groups);
    for (int l = first; l < end; ++l) {
      if (hooks != nullptr && keep_residual) (*hooks)[l].residual = x;
      ProjectQkv(l, rows, x, b);
      if (hooks != nullptr && keep_states) {
        (*hooks)[l].h_in.assign(b.xn, b.xn + n * d);
        (*hooks)[l].k_pre_rope.assign(b.k, b.k + n * kvd);
        (*hooks)[l].v.assign(b.v, b.v + n * kvd);
      }
      SCD_RETURN_IF_ERROR(AttendLayer(l, rows, groups, external, b));
      weights_.layers[l].o.Apply(b.att, b.tmp, rows);
      for (size_t i = 0; i < x.size(); ++i) x[i] += b.tmp[i];
      FeedForward(l, rows, b, x);
    }
    return absl::OkStatus();
  }

  static float* Buffer(std::vector<float>& v, size_t n) {
    if (v.size() < n) ResizeWithHugePages(v, n);
    return v.data();
  }

  struct Arena {
    std::vector<float> xn, tmp, q, att, k, v, gate, up, scratch, logits;
    std::vector<float> rope_cos, rope_sin;
  };

  std::shared_ptr<const Model> model_;
  std::vector<float> inv_freq_;
  CpuWeights weights_;
  Arena arena_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(std::shared_ptr<const Model> model,
                                                          WeightDtype dtype) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateCpuBackend: null model");
  const ModelConfig& c = model->config;
  if (static_cast<int>(model->weights.layers.size()) != c.num_layers) {
    return absl::InvalidArgumentError("model weights do not match its config (layer count)");
  }
  return std::unique_ptr<Backend>(new CpuBackend(std::move(model), dtype));
}

size_t CpuBackendWeightBytes(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu != nullptr ? cpu->weight_bytes() : 0;
}

size_t CpuBackendStreamedBytes(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu != nullptr ? cpu->streamed_bytes() : 0;
}

bool IsCpuBackend(const Backend& backend) {
  return dynamic_cast<const CpuBackend*>(&backend) != nullptr;
}

}  // namespace scd
