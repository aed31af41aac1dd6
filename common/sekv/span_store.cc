// See span_store.h.
#include "common/sekv/span_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace scd::sekv {
namespace {

constexpr float kMinWeight = 1e-3f;

void AppendRow(std::vector<float>& dst, const float* row, int n) {
  dst.insert(dst.end(), row, row + n);
}

}  // namespace

MemoryBreakdown& MemoryBreakdown::operator+=(const MemoryBreakdown& o) {
  anchors += o.anchors;
  summaries += o.summaries;
  window += o.window;
  expanded_cache += o.expanded_cache;
  pinned += o.pinned;
  cpu_bases += o.cpu_bases;
  full_kv += o.full_kv;
  return *this;
}

SpanStore SpanStore::Build(const float* k, const float* v, absl::Span<const float> surprisal,
                           const Segmentation& seg, int num_kv_heads, int head_dim,
                           const SpanStoreOptions& options, int window_reserve) {
  SpanStore st;
  st.num_kv_heads_ = num_kv_heads;
  st.head_dim_ = head_dim;
  st.prompt_tokens_ = seg.num_tokens;
  const int kvd = num_kv_heads * head_dim;
  const size_t row = static_cast<size_t>(kvd);
  st.anchor_k_.reserve(seg.anchors.size() * row);
  st.anchor_v_.reserve(seg.anchors.size() * row);
  for (int a : seg.anchors) {
    AppendRow(st.anchor_k_, k + a * row, kvd);
    AppendRow(st.anchor_v_, v + a * row, kvd);
  }
  const size_t num_spans = seg.spans.size();
  st.summary_k_.assign(num_spans * row, 0.0f);
  st.summary_v_.assign(num_spans * row, 0.0f);
  st.span_len_.resize(num_spans);
  st.log_len_.resize(num_spans);
  if (options.build_cpu_tier) {
    st.k_basis_.resize(num_spans * num_kv_heads);
    st.v_basis_.resize(num_spans * num_kv_heads);
  }
  std::vector<double> w;
  for (size_t s = 0; s < num_spans; ++s) {
    const TokenSpan sp = seg.spans[s];
    const int len = sp.length();
    st.span_len_[s] = len;
    st.log_len_[s] = std::log(static_cast<float>(len));
    w.assign(len, 1.0 / len);
    if (options.key_weighting == SummaryWeighting::kSurprisal) {
      double total = 0;
      for (int i = 0; i < len; ++i) total += w[i] = std::max(surprisal[sp.begin + i], kMinWeight);
      for (double& x : w) x /= total;
    }
    float* sk = st.summary_k_.data() + s * row;
    float* sv = st.summary_v_.data() + s * row;
    for (int i = 0; i < len; ++i) {
      const float* kr = k + (sp.begin + i) * row;
      const float* vr = v + (sp.begin + i) * row;
      const float wk = static_cast<float>(w[i]), wv = 1.0f / len;
      for (int c = 0; c < kvd; ++c) {
        sk[c] += wk * kr[c];
        sv[c] += wv * vr[c];
      }
    }
    if (options.build_cpu_tier) {
      for (int h = 0; h < num_kv_heads; ++h) {
        const size_t off = sp.begin * row + static_cast<size_t>(h) * head_dim;
        st.k_basis_[s * num_kv_heads + h] =
            TruncatedSvd(k + off, len, head_dim, kvd, options.energy, options.r_max);
        st.v_basis_[s * num_kv_heads + h] =
            TruncatedSvd(v + off, len, head_dim, kvd, options.energy, options.r_max);
      }
    }
  }
  const int wl = seg.window_length();
  st.window_k_.reserve((wl + window_reserve) * row);
  st.window_v_.reserve((wl + window_reserve) * row);
  st.window_k_.assign(k + seg.window_begin * row, k + seg.num_tokens * row);
  st.window_v_.assign(v + seg.window_begin * row, v + seg.num_tokens * row);
  st.window_rows_ = st.initial_window_ = wl;
  return st;
}

void SpanStore::AppendWindow(const float* k, const float* v) {
  AppendRow(window_k_, k, kv_dim());
  AppendRow(window_v_, v, kv_dim());
  ++window_rows_;
}

void SpanStore::Rebuild(int s, int h, float* k_out, float* v_out) const {
  key_basis(s, h).Reconstruct(k_out, head_dim_);
  value_basis(s, h).Reconstruct(v_out, head_dim_);
}

void SpanStore::RebuildRow(int s, int h, int offset, float* k_out, float* v_out) const {
  key_basis(s, h).ReconstructRow(offset, k_out);
  value_basis(s, h).ReconstructRow(offset, v_out);
}

MemoryBreakdown SpanStore::Memory() const {
  MemoryBreakdown m;
  const size_t f = sizeof(float);
  m.anchors = (anchor_k_.size() + anchor_v_.size()) * f;
  m.summaries = (summary_k_.size() + summary_v_.size() + log_len_.size()) * f;
  m.window = static_cast<size_t>(window_rows_) * kv_dim() * 2 * f;
  for (const auto& b : k_basis_) m.cpu_bases += b.bytes();
  for (const auto& b : v_basis_) m.cpu_bases += b.bytes();
  const size_t positions = static_cast<size_t>(prompt_tokens_ + window_rows_ - initial_window_);
  m.full_kv = positions * kv_dim() * 2 * f;
  return m;
}

}  // namespace scd::sekv
