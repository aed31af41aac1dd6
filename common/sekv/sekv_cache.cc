// See sekv_cache.h.
#include "common/sekv/sekv_cache.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/base/parallel_for.h"

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

namespace {

// Checks that the prefix K/V match `shape`, the segmentation covers the prefix and the budgets
// are non-negative.
absl::Status CheckPrefix(const CacheShape& shape, const PrefixKv& prefix, const Segmentation& seg,
                         const SekvOptions& options) {
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
  return absl::OkStatus();
}

// The router to use: `router`, or the default one when null; refused unless it fits `shape`.
absl::StatusOr<std::shared_ptr<const ZoomRouter>> RouterFor(
    const CacheShape& shape, std::shared_ptr<const ZoomRouter> router) {
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
  return router;
}

// Checks the zoom-in options: the token candidate factor and the pins.
absl::Status CheckZoomOptions(const SekvOptions& options) {
  if (options.resolution == ZoomResolution::kToken && !(options.candidate_factor >= 1.0f)) {
    return absl::InvalidArgumentError("sekv candidate_factor must be >= 1");
  }
  if (options.pin_tokens < 0 || (options.pin_tokens > 0 && !options.zoom)) {
    return absl::InvalidArgumentError("sekv pin_tokens must be >= 0, and needs zoom-in");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SekvCache>> SekvCache::CreateWithSegmentation(
    const CacheShape& shape, const PrefixKv& prefix, Segmentation seg, const SekvOptions& options,
    std::shared_ptr<const ZoomRouter> router, RouterSampleSink* teacher) {
  if (auto st = CheckPrefix(shape, prefix, seg, options); !st.ok()) return st;
  auto checked_router = RouterFor(shape, std::move(router));
  if (!checked_router.ok()) return checked_router.status();
  if (auto st = CheckZoomOptions(options); !st.ok()) return st;
  std::unique_ptr<SekvCache> c(new SekvCache());
  c->shape_ = shape;
  c->options_ = options;
  c->BuildStores(prefix, seg);
  c->InitSpanCounts(seg);
  c->InitPins();
  const size_t per_layer = static_cast<size_t>(shape.num_kv_heads) * seg.spans.size();
  c->seg_ = std::move(seg);
  c->router_ = *std::move(checked_router);
  if (options.zoom) {
    const int cap = options.cache_tokens > 0 ? std::max(options.cache_tokens, options.expand_budget)
                                             : options.expand_budget;
    c->fetcher_ = std::make_unique<SpanFetcher>(shape.num_layers, shape.num_kv_heads,
                                                shape.head_dim, cap, options.async_fetch);
  }
  c->teacher_ = teacher;
  if (teacher != nullptr) c->prefix_ = &prefix;
  c->partial_.resize(shape.num_heads);
  c->expanded_.assign(per_layer, 0);
  return c;
}

void SekvCache::BuildStores(const PrefixKv& prefix, const Segmentation& seg) {
  SpanStoreOptions so = options_.store;
  so.build_cpu_tier = so.build_cpu_tier && options_.zoom;
  // The layers' stores are independent (summaries and per-span low-rank bases: seconds per
  // layer at 32K tokens), so they are built in parallel; each is the same on any thread count.
  stores_.resize(shape_.num_layers);
  ParallelFor(shape_.num_layers, [&](size_t l) {
    stores_[l] =
        SpanStore::Build(prefix.k[l].data(), prefix.v[l].data(), prefix.surprisal, seg,
                         shape_.num_kv_heads, shape_.head_dim, so, options_.generated_reserve);
  });
}

void SekvCache::InitSpanCounts(const Segmentation& seg) {
  const int ns = static_cast<int>(seg.spans.size());
  span_offset_.assign(ns + 1, 0);
  for (int s = 0; s < ns; ++s) span_offset_[s + 1] = span_offset_[s] + seg.spans[s].length();
  const size_t per_layer = static_cast<size_t>(shape_.num_kv_heads) * ns;
  remaining_.resize(shape_.num_layers);
  log_count_.resize(shape_.num_layers);
  for (int l = 0; l < shape_.num_layers; ++l) {
    remaining_[l].resize(per_layer);
    log_count_[l].resize(per_layer);
    for (size_t i = 0; i < per_layer; ++i) {
      remaining_[l][i] = seg.spans[i % ns].length();
      log_count_[l][i] = stores_[l].log_span_length()[i % ns];
    }
  }
}

void SekvCache::InitPins() {
  const int ns = static_cast<int>(span_offset_.size()) - 1;
  const int pins = std::min(options_.pin_tokens, span_offset_[ns]);
  options_.pin_tokens = pins;
  pins_done_.assign(shape_.num_layers, pins == 0);
  if (pins > 0) {
    const size_t rows = static_cast<size_t>(shape_.num_kv_heads) * pins * shape_.head_dim;
    pinned_.assign(
        shape_.num_layers,
        std::vector<uint8_t>(static_cast<size_t>(shape_.num_kv_heads) * span_offset_[ns]));
    pin_k_.assign(shape_.num_layers, std::vector<float>(rows, 0.0f));
    pin_v_ = pin_k_;
    pin_rows_.assign(shape_.num_layers, std::vector<int>(shape_.num_kv_heads, 0));
  }
}

void SekvCache::ResidentScores(int l, const float* q) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans(), nw = st.window_rows();
  const int np = options_.pin_tokens;
  const int n = na + ns + nw + np;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  scores_.resize(static_cast<size_t>(shape_.num_heads) * n);
  lse_.resize(shape_.num_heads);
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    const float* qh = q + h * hd;
    float* s = scores_.data() + static_cast<size_t>(h) * n;
    ScoreBlock(qh, {st.anchor_k() + g * hd, st.anchor_v() + g * hd, na, kvd, nullptr}, hd, scale,
               s);
    ScoreBlock(qh, {st.summary_k() + g * hd, st.summary_v() + g * hd, ns, kvd, log_count(l, g)}, hd,
               scale, s + na);
    ScoreBlock(qh, {st.window_k() + g * hd, st.window_v() + g * hd, nw, kvd, nullptr}, hd, scale,
               s + na + ns);
    const int pr = np > 0 ? pin_rows_[l][g] : 0;
    if (pr > 0) {
      const size_t off = static_cast<size_t>(g) * np * hd;
      ScoreBlock(qh, {pin_k_[l].data() + off, pin_v_[l].data() + off, pr, hd, nullptr}, hd, scale,
                 s + na + ns + nw);
    }
    for (int i = na + ns + nw + pr; i < n; ++i) s[i] = -1e30f;  // pin slots not filled
    float m = -1e30f;
    for (int i = 0; i < n; ++i) m = std::max(m, s[i]);
    double sum = 0;
    for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(s[i] - m));
    lse_[h] = static_cast<float>(m + std::log(sum));
  }
}

void SekvCache::Pin(int l, const float* q) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, group = shape_.group(), ns = st.num_spans();
  const int np = options_.pin_tokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    scored_.clear();
    for (int s = 0; s < ns; ++s) {
      ScoreSpanTokens(st, g, s, q + static_cast<size_t>(g) * group * hd, group,
                      lse_.data() + g * group, scale, nullptr, &scored_, &zoom_scratch_);
    }
    KeepHeaviest(&scored_, np);
    uint8_t* pinned = pinned_[l].data() + static_cast<size_t>(g) * span_offset_[ns];
    int* rem = remaining(l, g);
    float* lc = log_count(l, g);
    int row = 0;
    for (const ScoredToken& t : scored_) {
      const size_t off = (static_cast<size_t>(g) * np + row) * hd;
      st.RebuildRow(t.ref.span, g, t.ref.offset, pin_k_[l].data() + off, pin_v_[l].data() + off);
      pinned[span_offset_[t.ref.span] + t.ref.offset] = 1;
      const int left = --rem[t.ref.span];
      lc[t.ref.span] = left > 0 ? std::log(static_cast<float>(left)) : -1e30f;
      ++row;
    }
    pin_rows_[l][g] = row;
    zoom_stats_.pinned_tokens += row;
  }
  pins_done_[l] = 1;
}

void SekvCache::GateAlpha(int l, int g, const float* q) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans();
  const int n = static_cast<int>(scores_.size()) / shape_.num_heads;
  const int* rem = remaining(l, g);
  const float* lc = log_count(l, g);
  // α_S, the maximum over the group's query heads; spans with no token left are out.
  alpha_.assign(ns, 0.0f);
  for (int h = g * group; h < (g + 1) * group; ++h) {
    router_->RouteQuery(l, g, q + h * hd, q_route_.data());
    const float* s_scores = scores_.data() + static_cast<size_t>(h) * n + na;
    for (int s = 0; s < ns; ++s) {
      if (rem[s] == 0) continue;
      const float* kbar = st.summary_k() + static_cast<size_t>(s) * kvd + g * hd;
      float bil = 0;
      for (int c = 0; c < hd; ++c) bil += q_route_[c] * kbar[c];
      const float z = router_->Logit(l, g, bil, lc[s], s_scores[s] - lse_[h]);
      alpha_[s] = std::max(alpha_[s], Sigmoid(z));
    }
  }
}

void SekvCache::AddZoomStats(const ZoomStats& z) {
  zoom_stats_.steps += z.steps;
  zoom_stats_.expanded_spans += z.expanded_spans;
  zoom_stats_.expanded_tokens += z.expanded_tokens;
  zoom_stats_.candidate_tokens += z.candidate_tokens;
  zoom_stats_.pinned_tokens += z.pinned_tokens;
}

void SekvCache::Select(int l, int g, const float* q) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, group = shape_.group();
  const int ns = st.num_spans();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int* rem = remaining(l, g);
  const uint8_t* pinned =
      pinned_.empty() ? nullptr : pinned_[l].data() + static_cast<size_t>(g) * span_offset_[ns];
  int* expanded = expanded_.data() + static_cast<size_t>(g) * ns;
  std::fill(expanded, expanded + ns, 0);
  const std::vector<int> lengths(rem, rem + ns);
  const float tau = options_.tau_override >= 0 ? options_.tau_override : router_->gate(l, g).tau;
  const bool by_token = options_.resolution == ZoomResolution::kToken;
  const int budget = options_.expand_budget;
  const int candidate_budget =
      by_token ? static_cast<int>(std::lround(options_.candidate_factor * budget)) : budget;
  const std::vector<int> candidates = SelectSpans(alpha_, lengths, tau, candidate_budget);
  rows_.clear();
  if (by_token) {
    scored_.clear();
    for (int s : candidates) {
      ScoreSpanTokens(
          st, g, s, q + static_cast<size_t>(g) * group * hd, group, lse_.data() + g * group, scale,
          pinned != nullptr ? pinned + span_offset_[s] : nullptr, &scored_, &zoom_scratch_);
    }
    zoom_stats_.candidate_tokens += static_cast<long>(scored_.size());
    KeepHeaviest(&scored_, budget);
    for (const ScoredToken& t : scored_) rows_.push_back(t.ref);
  } else {
    for (int s : candidates) {
      for (int i = 0; i < st.span_length(s); ++i) {
        if (pinned == nullptr || !pinned[span_offset_[s] + i]) rows_.push_back({s, i});
      }
    }
  }
  for (const TokenRef& r : rows_) ++expanded[r.span];
  for (int s = 0; s < ns; ++s) zoom_stats_.expanded_spans += expanded[s] > 0;
  zoom_stats_.expanded_tokens += static_cast<long>(rows_.size());
  ++zoom_stats_.steps;
  fetcher_->Request(l, g, st, rows_);
}

void SekvCache::Attend(int l, const float* q, const float* k, const float* v, float* out) {
  SpanStore& st = stores_[l];
  st.AppendWindow(k, v);
  if (teacher_ == nullptr && !pins_done_[l]) {
    ResidentScores(l, q);
    Pin(l, q);
  }
  ResidentScores(l, q);
  if (teacher_ != nullptr) {
    TeacherAttend(l, q, out);
    return;
  }
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans(), nw = st.window_rows();
  const int np = options_.pin_tokens;
  const int n = static_cast<int>(scores_.size()) / shape_.num_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  // Route and request the expansions of every KV head before any accumulation, so that the
  // fetch worker rebuilds while the resident part is accumulated below.
  q_route_.resize(hd);
  const bool zoom = zooms(l);
  std::fill(expanded_.begin(), expanded_.end(), 0);
  if (zoom) {
    for (int g = 0; g < shape_.num_kv_heads; ++g) {
      GateAlpha(l, g, q);
      Select(l, g, q);
    }
  }

  // Resident part of the softmax. A summary stands for the tokens of its span neither pinned
  // nor expanded now: its log-count term is adjusted, and it drops out when none is left.
  skip_.resize(ns);
  for (int h = 0; h < shape_.num_heads; ++h) {
    const int g = h / group;
    float* s = scores_.data() + static_cast<size_t>(h) * n;
    const int* rem = remaining(l, g);
    const int* expanded = expanded_.data() + static_cast<size_t>(g) * ns;
    for (int j = 0; j < ns; ++j) {
      const int left = rem[j] - expanded[j];
      skip_[j] = left <= 0;
      if (left > 0 && expanded[j] > 0) {
        s[na + j] += std::log(static_cast<float>(left)) - log_count(l, g)[j];
      }
    }
    PartialAttention& p = partial_[h];
    p.Reset(hd);
    AccumulateScored(s, {st.anchor_k() + g * hd, st.anchor_v() + g * hd, na, kvd, nullptr}, hd,
                     nullptr, &p);
    AccumulateScored(s + na, {st.summary_k() + g * hd, st.summary_v() + g * hd, ns, kvd, nullptr},
                     hd, skip_.data(), &p);
    AccumulateScored(s + na + ns,
                     {st.window_k() + g * hd, st.window_v() + g * hd, nw, kvd, nullptr}, hd,
                     nullptr, &p);
    if (np > 0 && pin_rows_[l][g] > 0) {
      const size_t off = static_cast<size_t>(g) * np * hd;
      AccumulateScored(
          s + na + ns + nw,
          {pin_k_[l].data() + off, pin_v_[l].data() + off, pin_rows_[l][g], hd, nullptr}, hd,
          nullptr, &p);
    }
  }
  // The expansion buffer's rows of this round join the same softmax.
  if (zoom) {
    for (int g = 0; g < shape_.num_kv_heads; ++g) {
      const BufferView b = fetcher_->Get(l, g);
      inactive_.resize(b.rows);
      for (int i = 0; i < b.rows; ++i) inactive_[i] = !b.active[i];
      tmp_.resize(b.rows);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        ScoreBlock(q + h * hd, {b.k, b.v, b.rows, hd, nullptr}, hd, scale, tmp_.data());
        AccumulateScored(tmp_.data(), {b.k, b.v, b.rows, hd, nullptr}, hd, inactive_.data(),
                         &partial_[h]);
      }
    }
  }
  for (int h = 0; h < shape_.num_heads; ++h) FinishAttention(partial_[h], hd, out + h * hd);
}

absl::Status SekvCache::ExternalPin(int l, const float* q, absl::Span<const float> lse) {
  if (l < 0 || l >= shape_.num_layers || pins_done(l) ||
      static_cast<int>(lse.size()) != shape_.num_heads) {
    return absl::InvalidArgumentError(
        absl::StrCat("sekv ExternalPin: layer ", l, " has its pins or is out of range, or ",
                     lse.size(), " log-sum-exps for ", shape_.num_heads, " heads"));
  }
  lse_.assign(lse.begin(), lse.end());
  Pin(l, q);
  return absl::OkStatus();
}

absl::Status SekvCache::ExternalZoom(int l, const float* q, absl::Span<const float> lse,
                                     absl::Span<const float> alpha) {
  const size_t ns = seg_.spans.size();
  if (l < 0 || l >= shape_.num_layers || static_cast<int>(lse.size()) != shape_.num_heads ||
      alpha.size() != ns * shape_.num_kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sekv ExternalZoom: layer ", l, " with ", lse.size(), " log-sum-exps and ", alpha.size(),
        " gates, for ", shape_.num_heads, " heads and ", ns * shape_.num_kv_heads, " spans"));
  }
  std::fill(expanded_.begin(), expanded_.end(), 0);
  if (!zooms(l)) return absl::OkStatus();
  lse_.assign(lse.begin(), lse.end());
  for (int g = 0; g < shape_.num_kv_heads; ++g) {
    alpha_.assign(alpha.begin() + g * ns, alpha.begin() + (g + 1) * ns);
    Select(l, g, q);
  }
  return absl::OkStatus();
}

void SekvCache::TeacherAttend(int l, const float* q, float* out) {
  const SpanStore& st = stores_[l];
  const int hd = shape_.head_dim, kvd = shape_.kv_dim(), group = shape_.group();
  const int na = st.num_anchors(), ns = st.num_spans();
  const int n = static_cast<int>(scores_.size()) / shape_.num_heads;
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
  for (size_t l = 0; l < pin_k_.size(); ++l) {
    m.pinned += (pin_k_[l].size() + pin_v_[l].size()) * sizeof(float);
  }
  // With pins each head keeps its own summary counts (beyond the store's log|S| per span).
  if (options_.pin_tokens > 0) {
    for (const auto& lc : log_count_) m.summaries += lc.size() * sizeof(float);
  }
  return m;
}

}  // namespace scd::sekv
