// See span_store.h.
#include "common/sekv/span_store.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/base/huge_pages.h"

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
  // The GPU tier's rows are tens of MB per layer at long prompts: huge pages (huge_pages.h),
  // so that they are not faulted in 4 KB at a time.
  const size_t na = seg.anchors.size();
  ResizeWithHugePages(st.anchor_k_, na * row);
  ResizeWithHugePages(st.anchor_v_, na * row);
  for (size_t i = 0; i < na; ++i) {
    std::memcpy(st.anchor_k_.data() + i * row, k + seg.anchors[i] * row, row * sizeof(float));
    std::memcpy(st.anchor_v_.data() + i * row, v + seg.anchors[i] * row, row * sizeof(float));
  }
  const size_t num_spans = seg.spans.size();
  ResizeWithHugePages(st.summary_k_, num_spans * row);
  ResizeWithHugePages(st.summary_v_, num_spans * row);
  st.span_len_.resize(num_spans);
  st.log_len_.resize(num_spans);
  if (options.build_cpu_tier) {
    st.k_basis_.resize(num_spans * num_kv_heads);
    st.v_basis_.resize(num_spans * num_kv_heads);
    size_t most = 0;  // the layer's bases at full rank: one reservation, faulted in as written
    for (const TokenSpan& sp : seg.spans) {
      most += 2 * static_cast<size_t>(num_kv_heads) *
              MaxBasisFloats(sp.length(), head_dim, options.r_max);
    }
    st.arena_.Reserve(most);
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
            TruncatedSvd(k + off, len, head_dim, kvd, options.energy, options.r_max, &st.arena_);
        st.v_basis_[s * num_kv_heads + h] =
            TruncatedSvd(v + off, len, head_dim, kvd, options.energy, options.r_max, &st.arena_);
      }
    }
  }
  const int wl = seg.window_length();
  for (std::vector<float>* w : {&st.window_k_, &st.window_v_}) {
    ResizeWithHugePages(*w, (wl + window_reserve) * row);  // room to grow, then the prompt's
    w->resize(wl * row);
  }
  std::copy(k + seg.window_begin * row, k + seg.num_tokens * row, st.window_k_.begin());
  std::copy(v + seg.window_begin * row, v + seg.num_tokens * row, st.window_v_.begin());
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
