// SpanStore: one layer's SEKV cache at two resolutions (SeKV "two resolutions per span";
// docs/METHOD.md "SEKV"). Keys are stored after RoPE, exactly as a KV cache holds them, so a
// summary or a rebuilt token is scored like any cached key.
//
// GPU tier (resident; read by every decode step):
//   - anchors: full K and V of every anchor position;
//   - span summaries, per span and KV head: k̄_S = Σ_t w_t k_t with surprisal weights
//     w_t = max(s_t, ε) / Σ_u max(s_u, ε) (normalised to sum 1), and v̄_S = mean of V;
//     plus log|S| for the size correction;
//   - the recent window: full K and V of the last prompt tokens and of every generated
//     token (it grows by one row per decode step).
// CPU tier (fetched on zoom-in): per span and KV head, truncated SVDs of K_S and V_S with an
// energy-adaptive rank (low_rank.h), their factors in one arena per layer.
//
// Memory accounting counts the bytes of these very vectors (capacity of what is logically
// resident, not a formula): GpuBytes() is what a GPU would hold for this layer, besides the
// expanded-span cache, which SpanFetcher accounts for.
#ifndef SCD_COMMON_SEKV_SPAN_STORE_H_
#define SCD_COMMON_SEKV_SPAN_STORE_H_

#include <cstddef>
#include <vector>

#include "absl/types/span.h"
#include "common/sekv/low_rank.h"
#include "common/sekv/surprisal_segmenter.h"

namespace scd::sekv {

enum class SummaryWeighting { kSurprisal, kUniform };

struct SpanStoreOptions {
  double energy = 0.999;  // spectral energy share kept by each CPU basis
  int r_max = 32;         // rank cap of a CPU basis
  bool build_cpu_tier = true;
  SummaryWeighting key_weighting = SummaryWeighting::kSurprisal;
};

// Byte counts of one or more layers' caches.
struct MemoryBreakdown {
  size_t anchors = 0, summaries = 0, window = 0, expanded_cache = 0;  // GPU tier
  size_t pinned = 0;     // GPU tier: SekvCache's observation-window anchors (sekv_cache.h)
  size_t cpu_bases = 0;  // CPU tier
  size_t full_kv = 0;    // a full KV cache of the same positions and layers, same dtype

  size_t gpu() const { return anchors + summaries + window + expanded_cache + pinned; }
  double gpu_ratio() const { return full_kv > 0 ? static_cast<double>(gpu()) / full_kv : 0; }
  MemoryBreakdown& operator+=(const MemoryBreakdown& o);
};

class SpanStore {
 public:
  // k, v: [T, kv_dim] post-RoPE keys and values of the prompt; surprisal [T].
  // `window_reserve` extra window rows are reserved for generated tokens.
  static SpanStore Build(const float* k, const float* v, absl::Span<const float> surprisal,
                         const Segmentation& seg, int num_kv_heads, int head_dim,
                         const SpanStoreOptions& options, int window_reserve = 0);

  int num_kv_heads() const { return num_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int kv_dim() const { return num_kv_heads_ * head_dim_; }
  int num_anchors() const { return static_cast<int>(anchor_k_.size()) / std::max(kv_dim(), 1); }
  int num_spans() const { return static_cast<int>(span_len_.size()); }
  int window_rows() const { return window_rows_; }
  int initial_window() const { return initial_window_; }  // window rows from the prompt
  int span_length(int s) const { return span_len_[s]; }

  // GPU tier, row-major [rows, kv_dim]; head h starts at column h * head_dim.
  const float* anchor_k() const { return anchor_k_.data(); }
  const float* anchor_v() const { return anchor_v_.data(); }
  const float* summary_k() const { return summary_k_.data(); }
  const float* summary_v() const { return summary_v_.data(); }
  const float* log_span_length() const { return log_len_.data(); }
  const float* window_k() const { return window_k_.data(); }
  const float* window_v() const { return window_v_.data(); }

  // Appends one generated token's K and V [kv_dim] to the window.
  void AppendWindow(const float* k, const float* v);

  // CPU tier: rebuilds span s for KV head h into k_out, v_out [length, head_dim].
  void Rebuild(int s, int h, float* k_out, float* v_out) const;
  // CPU tier: rebuilds token `offset` of span s for KV head h into k_out, v_out [head_dim].
  void RebuildRow(int s, int h, int offset, float* k_out, float* v_out) const;
  const LowRankBasis& key_basis(int s, int h) const {
    return k_basis_[static_cast<size_t>(s) * num_kv_heads_ + h];
  }
  const LowRankBasis& value_basis(int s, int h) const {
    return v_basis_[static_cast<size_t>(s) * num_kv_heads_ + h];
  }
  bool has_cpu_tier() const { return !k_basis_.empty(); }
  // The storage of the bases' factors (us, vt): every basis of this store points into them.
  std::vector<BasisArena::Block> basis_blocks() const { return arena_.blocks(); }

  // Anchors, summaries and window of this layer (expanded_cache stays 0), CPU bases, and
  // full_kv for the positions held (prompt + generated).
  MemoryBreakdown Memory() const;

 private:
  int num_kv_heads_ = 0, head_dim_ = 0;
  int prompt_tokens_ = 0;
  std::vector<float> anchor_k_, anchor_v_;
  std::vector<float> summary_k_, summary_v_;
  std::vector<int> span_len_;
  std::vector<float> log_len_;
  std::vector<float> window_k_, window_v_;
  int window_rows_ = 0;
  int initial_window_ = 0;
  std::vector<LowRankBasis> k_basis_, v_basis_;  // [span * num_kv_heads + head]
  BasisArena arena_;                             // their factors (so a store is move-only)
};

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_SPAN_STORE_H_
