// See sekv_cache.h.
#include "common/sekv/sekv_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace scd::sekv {

absl::StatusOr<std::unique_ptr<SekvCache>> SekvCache::Create(
    const CacheShape& shape, const PrefixKv& prefix, const SekvOptions& options,
    std::shared_ptr<const ZoomRouter> router, RouterSampleSink* teacher) {
  if (auto st = options.segmenter.Validate(); !st.ok()) return st;
  if (static_cast<int>(prefix.surprisal.size()) != prefix.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("prefix has ", prefix.num_tokens, " tokens but ",
                                                   prefix.surprisal.size(), " surprisal values"));
  }
  auto seg = SurprisalSegmenter::Create(options.segmenter);
  if (!seg.ok()) return seg.status();
  return CreateWithSegmentation(shape, prefix, seg->Segment(prefix.surprisal), options,
                                std::move(router), teacher);
}

absl::StatusOr<std::unique_ptr<SekvCache>> SekvCache::CreateWithSegmentation(
    const CacheShape& shape, const PrefixKv& prefix, Segmentation seg, const SekvOptions& options,
    std::shared_ptr<const ZoomRouter> router, RouterSampleSink* teacher) {
  const size_t want = static_cast<size_t>(prefix.num_tokens) * shape.kv_dim();
  if (static_cast<int>(prefix.k.size()) != shape.num_layers ||
      static_cast<int>(prefix.v.size()) != shape.num_layers) {
    return absl::InvalidArgumentError("prefix K/V do not have one entry per layer");
  }
  for (int l = 0; l < shape.num_layers; ++l) {
    if (prefix.k[l].size() != want || prefix.v[l].size() != want) {
      return absl::InvalidArgumentError(absl::StrCat("prefix K/V of layer ", l, " is not [",
                                                     prefix.num_tokens, ", ", shape.kv_dim(), "]"));
    }
  }
  if (seg.num_tokens != prefix.num_tokens) {
    return absl::InvalidArgumentError("segmentation does not cover the prefix");
  }
  if (options.expand_budget < 0 || options.cache_tokens < 0) {
    return absl::InvalidArgumentError("sekv expand_budget and cache_tokens must be >= 0");
  }
  if (router == nullptr) {
    router = std::make_shared<ZoomRouter>(
        ZoomRouter::Default(shape.num_layers, shape.num_kv_heads, shape.head_dim, 0.05f));
  }
  if (router->num_layers() != shape.num_layers || router->num_kv_heads() != shape.num_kv_heads ||
      router->head_dim() != shape.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zoom router shape (", router->num_layers(), " layers, ", router->num_kv_heads(),
        " KV heads, head_dim ", router->head_dim(), ") does not match the model"));
  }
  std::unique_ptr<SekvCache> c(new SekvCache());
  c->shape_ = shape;
  c->options_ = options;
  SpanStoreOptions so = options.store;
  so.build_cpu_tier = so.build_cpu_tier && options.zoom;
  c->stores_.reserve(shape.num_layers);
  for (int l = 0; l < shape.num_layers; ++l) {
    c->stores_.push_back(SpanStore::Build(prefix.k[l].data(), prefix.v[l].data(), prefix.surprisal,
                                          seg, shape.num_kv_heads, shape.head_dim, so,
                                          options.generated_reserve));
  }
  c->seg_ = std::move(seg);
  c->router_ = std::move(router);
  if (options.zoom) {
    const int cap = options.cache_tokens > 0 ? std::max(options.cache_tokens, options.expand_budget)
                                             : options.expand_budget;
    c->fetcher_ = std::make_unique<SpanFetcher>(shape.num_layers, shape.num_kv_heads,
                                                shape.head_dim, cap, options.async_fetch);
  }
  c->teacher_ = teacher;
  if (teacher != nullptr) c->prefix_ = &prefix;
  c->partial_.resize(shape.num_heads);
  c->selected_.resize(shape.num_kv_heads);
  return c;
}

void SekvCache::Attend(int l, const float* q, const float* k, const float* v, float* out) {
  SpanStore& st = stores_[l];
  st.AppendWindow(k, v);
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans(), nw = st.window_rows();
  const int n = na + ns + nw;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  scores_.resize(static_cast<size_t>(shape_.num_heads) * n);
  lse_.resize(shape_.num_heads);

  // Resident scores for every query head: anchors | summaries (+log|S|) | window.
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    const float* qh = q + h * hd;
    float* s = scores_.data() + static_cast<size_t>(h) * n;
    ScoreBlock(qh, {st.anchor_k() + g * hd, st.anchor_v() + g * hd, na, kvd, nullptr}, hd, scale,
               s);
    ScoreBlock(qh,
               {st.summary_k() + g * hd, st.summary_v() + g * hd, ns, kvd, st.log_span_length()},
               hd, scale, s + na);
    ScoreBlock(qh, {st.window_k() + g * hd, st.window_v() + g * hd, nw, kvd, nullptr}, hd, scale,
               s + na + ns);
    float m = -1e30f;
    for (int i = 0; i < n; ++i) m = std::max(m, s[i]);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(s[i] - m));
    lse_[h] = static_cast<float>(m + std::log(sum));
  }

  // Route and request the expansions of every KV head before any accumulation, so that the
  // fetch worker rebuilds while the resident part is accumulated below.
  skip_.assign(static_cast<size_t>(shape_.num_kv_heads) * ns, 0);
  q_route_.resize(hd);
  if (teacher_ != nullptr) {
    TeacherAttend(l, q, out);
    return;
  }
  if (fetcher_ != nullptr && ns > 0 && options_.expand_budget > 0) {
    std::vector<int> lengths(ns);
    for (int s = 0; s < ns; ++s) lengths[s] = st.span_length(s);
    alpha_.resize(ns);
    for (int g = 0; g < shape_.num_kv_heads; ++g) {
      std::fill(alpha_.begin(), alpha_.end(), 0.0f);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        router_->RouteQuery(l, g, q + h * hd, q_route_.data());
        const float* s_scores = scores_.data() + static_cast<size_t>(h) * n + na;
        for (int s = 0; s < ns; ++s) {
          const float* kbar = st.summary_k() + static_cast<size_t>(s) * kvd + g * hd;
          float bil = 0;
          for (int c = 0; c < hd; ++c) bil += q_route_[c] * kbar[c];
          const float z = router_->Logit(l, g, bil, st.log_span_length()[s], s_scores[s] - lse_[h]);
          alpha_[s] = std::max(alpha_[s], Sigmoid(z));
        }
      }
      const float tau =
          options_.tau_override >= 0 ? options_.tau_override : router_->gate(l, g).tau;
      selected_[g] = SelectSpans(alpha_, lengths, tau, options_.expand_budget);
      for (int s : selected_[g]) {
        skip_[static_cast<size_t>(g) * ns + s] = 1;
        ++zoom_stats_.expanded_spans;
        zoom_stats_.expanded_tokens += lengths[s];
      }
      ++zoom_stats_.steps;
      fetcher_->Request(l, g, st, selected_[g]);
    }
  } else {
    for (auto& sel : selected_) sel.clear();
  }

  // Resident part of the softmax.
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    const float* s = scores_.data() + static_cast<size_t>(h) * n;
    PartialAttention& p = partial_[h];
    p.Reset(hd);
    AccumulateScored(s, {st.anchor_k() + g * hd, st.anchor_v() + g * hd, na, kvd, nullptr}, hd,
                     nullptr, &p);
    AccumulateScored(s + na, {st.summary_k() + g * hd, st.summary_v() + g * hd, ns, kvd, nullptr},
                     hd, skip_.data() + static_cast<size_t>(g) * ns, &p);
    AccumulateScored(s + na + ns,
                     {st.window_k() + g * hd, st.window_v() + g * hd, nw, kvd, nullptr}, hd,
                     nullptr, &p);
  }
  // Expanded spans' rebuilt tokens join the same softmax.
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    for (int s : selected_[g]) {
      auto e = fetcher_->Get(l, g, s);
      const AttentionBlock b{e->k.data(), e->v.data(), e->length, hd, nullptr};
      for (int h = g * group; h < (g + 1) * group; ++h) {
        AccumulateBlock(q + h * hd, b, hd, scale, &partial_[h], &tmp_);
      }
    }
  }
  for (int h = 0; h < shape_.num_heads; ++h) FinishAttention(partial_[h], hd, out + h * hd);
}

void SekvCache::TeacherAttend(int l, const float* q, float* out) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans();
  const int n = na + ns + st.window_rows();
  const int t = prefix_->num_tokens;
  const int generated = st.window_rows() - st.initial_window();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> p(t + generated);
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    const float* qh = q + h * hd;
    const AttentionBlock prompt{prefix_->k[l].data() + g * hd, prefix_->v[l].data() + g * hd, t,
                                kvd, nullptr};
    const AttentionBlock gen{
        st.window_k() + static_cast<size_t>(st.initial_window()) * kvd + g * hd,
        st.window_v() + static_cast<size_t>(st.initial_window()) * kvd + g * hd, generated, kvd,
        nullptr};
    ScoreBlock(qh, prompt, hd, scale, p.data());
    ScoreBlock(qh, gen, hd, scale, p.data() + t);
    PartialAttention acc;
    acc.Reset(hd);
    AccumulateScored(p.data(), prompt, hd, nullptr, &acc);
    AccumulateScored(p.data() + t, gen, hd, nullptr, &acc);
    FinishAttention(acc, hd, out + h * hd);
    const double lse = LogSumExp(acc);
    const float* s_scores = scores_.data() + static_cast<size_t>(h) * n + na;
    for (int s = 0; s < ns; ++s) {
      const TokenSpan sp = seg_.spans[s];
      double mass = 0;
      for (int i = sp.begin; i < sp.end; ++i) mass += std::exp(p[i] - lse);
      teacher_->Add(l, g, qh, st.summary_k() + static_cast<size_t>(s) * kvd + g * hd, hd,
                    st.log_span_length()[s], s_scores[s] - lse_[h], static_cast<float>(mass));
    }
  }
}

MemoryBreakdown SekvCache::Memory() const {
  MemoryBreakdown m;
  for (const SpanStore& st : stores_) m += st.Memory();
  if (fetcher_ != nullptr) m.expanded_cache = fetcher_->CapacityBytes();
  return m;
}

}  // namespace scd::sekv
