// SekvCache's external-executor protocol (sekv_cache.h, "the same step with the resident tier
// held elsewhere"), the contract the GPU path (common/sekv/gpu_sekv.h) is built on: a host
// executor that computes the resident log-sum-exp, the gate and the final softmax itself,
// from the cache's public state only, gives the same outputs, step for step, as Attend.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "catch2/catch.hpp"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/zoom_router.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::Normal;

// The executor: everything Attend computes on the host, recomputed here from public state,
// as the GPU executor computes it on the device.
class HostExecutor {
 public:
  HostExecutor(const CacheShape& shape, SekvCache& cache) : shape_(shape), cache_(cache) {}

  void Attend(int l, const float* q, const float* k, const float* v, float* out) {
    cache_.ExternalAppend(l, k, v);
    if (!cache_.pins_done(l)) REQUIRE(cache_.ExternalPin(l, q, Lse(l, q, /*pins=*/false)).ok());
    const std::vector<float> lse = Lse(l, q, /*pins=*/true);
    const int ns = cache_.store(l).num_spans();
    std::vector<float> alpha(static_cast<size_t>(shape_.num_kv_heads) * ns, 0.0f);
    for (int g = 0; g < shape_.num_kv_heads; ++g) Gate(l, g, q, lse, alpha.data() + g * ns);
    REQUIRE(cache_.ExternalZoom(l, q, lse, alpha).ok());
    const bool zoom = cache_.zooms(l);
    const int hd = shape_.head_dim;
    for (int h = 0; h < shape_.num_heads; ++h) {
      const int g = h / shape_.group();
      std::vector<float> lc(cache_.summary_log_count(l, g), cache_.summary_log_count(l, g) + ns);
      std::vector<uint8_t> skip(ns, 0);
      for (int s = 0; s < ns; ++s) {
        const int left = cache_.summary_remaining(l, g)[s] - cache_.expanded(g)[s];
        skip[s] = left <= 0;
        if (cache_.expanded(g)[s] > 0 && left > 0) lc[s] = std::log(static_cast<float>(left));
      }
      std::vector<AttentionBlock> blocks = Resident(l, g, lc.data());
      std::vector<float> scores, scratch;
      PartialAttention p;
      p.Reset(hd);
      const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
      for (size_t i = 0; i < blocks.size(); ++i) {
        scores.resize(blocks[i].rows);
        ScoreBlock(q + h * hd, blocks[i], hd, scale, scores.data());
        AccumulateScored(scores.data(), blocks[i], hd, i == 1 ? skip.data() : nullptr, &p);
      }
      if (zoom) {
        const BufferView b = cache_.ExpandedRows(l, g);
        std::vector<uint8_t> inactive(b.rows);
        for (int i = 0; i < b.rows; ++i) inactive[i] = !b.active[i];
        const AttentionBlock e{b.k, b.v, b.rows, hd, nullptr};
        scores.resize(b.rows);
        ScoreBlock(q + h * hd, e, hd, scale, scores.data());
        AccumulateScored(scores.data(), e, hd, inactive.data(), &p);
      }
      FinishAttention(p, hd, out + h * hd);
    }
  }

 private:
  // anchors | summaries (log counts `lc`) | window | pins of KV head g.
  std::vector<AttentionBlock> Resident(int l, int g, const float* lc) const {
    const SpanStore& st = cache_.store(l);
    const int hd = shape_.head_dim, kvd = shape_.kv_dim(), np = cache_.options().pin_tokens;
    std::vector<AttentionBlock> b = {
        {st.anchor_k() + g * hd, st.anchor_v() + g * hd, st.num_anchors(), kvd, nullptr},
        {st.summary_k() + g * hd, st.summary_v() + g * hd, st.num_spans(), kvd, lc},
        {st.window_k() + g * hd, st.window_v() + g * hd, st.window_rows(), kvd, nullptr}};
    if (cache_.pin_rows(l, g) > 0) {
      const size_t off = static_cast<size_t>(g) * np * hd;
      b.push_back(
          {cache_.pin_k(l) + off, cache_.pin_v(l) + off, cache_.pin_rows(l, g), hd, nullptr});
    }
    return b;
  }

  std::vector<float> Lse(int l, const float* q, bool pins) const {
    const int hd = shape_.head_dim;
    std::vector<float> lse(shape_.num_heads), scratch;
    for (int h = 0; h < shape_.num_heads; ++h) {
      const int g = h / shape_.group();
      std::vector<AttentionBlock> blocks = Resident(l, g, cache_.summary_log_count(l, g));
      if (!pins) blocks.resize(3);
      PartialAttention p;
      p.Reset(hd);
      for (const AttentionBlock& b : blocks) {
        AccumulateBlock(q + h * hd, b, hd, 1.0f / std::sqrt(static_cast<float>(hd)), &p, &scratch);
      }
      lse[h] = static_cast<float>(LogSumExp(p));
    }
    return lse;
  }

  void Gate(int l, int g, const float* q, const std::vector<float>& lse, float* alpha) const {
    const SpanStore& st = cache_.store(l);
    const ZoomRouter& r = cache_.router();
    const int hd = shape_.head_dim, kvd = shape_.kv_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> q_route(hd);
    for (int h = g * shape_.group(); h < (g + 1) * shape_.group(); ++h) {
      r.RouteQuery(l, g, q + h * hd, q_route.data());
      for (int s = 0; s < st.num_spans(); ++s) {
        if (cache_.summary_remaining(l, g)[s] == 0) continue;
        const float* kbar = st.summary_k() + static_cast<size_t>(s) * kvd + g * hd;
        float bil = 0, dot = 0;
        for (int c = 0; c < hd; ++c) {
          bil += q_route[c] * kbar[c];
          dot += q[h * hd + c] * kbar[c];
        }
        const float lc = cache_.summary_log_count(l, g)[s];
        const float z = r.Logit(l, g, bil, lc, dot * scale + lc - lse[h]);
        alpha[s] = std::max(alpha[s], Sigmoid(z));
      }
    }
  }

  CacheShape shape_;
  SekvCache& cache_;
};

TEST_CASE("the external-executor protocol reproduces Attend step for step", "[cpu]") {
  const CacheShape shape{2, 4, 2, 8};
  const int t = 90;
  PrefixKv prefix;
  prefix.num_tokens = t;
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 10 + l));
    prefix.v.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 20 + l));
  }
  prefix.surprisal = Normal(t, 5);
  for (float& s : prefix.surprisal) s = std::fabs(s);
  const std::shared_ptr<const ZoomRouter> router = testing::RandomRouter(shape);

  struct Case {
    const char* name;
    ZoomResolution resolution;
    int pins, budget;
    bool zoom;
  };
  const Case cases[] = {{"token zoom with pins", ZoomResolution::kToken, 4, 6, true},
                        {"span zoom, no pins", ZoomResolution::kSpan, 0, 10, true},
                        {"token zoom, no pins, small buffer", ZoomResolution::kToken, 0, 2, true},
                        {"summaries only", ZoomResolution::kToken, 0, 6, false}};
  for (const Case& c : cases) {
    SECTION(c.name) {
      SekvOptions o;
      o.resolution = c.resolution;
      o.pin_tokens = c.pins;
      o.expand_budget = c.budget;
      o.zoom = c.zoom;
      o.async_fetch = true;
      auto a = SekvCache::CreateWithSegmentation(
          shape, prefix, testing::ChunkedSegmentation(t, 7, 10, {0, 17}), o, router);
      auto b = SekvCache::CreateWithSegmentation(
          shape, prefix, testing::ChunkedSegmentation(t, 7, 10, {0, 17}), o, router);
      REQUIRE(a.ok());
      REQUIRE(b.ok());
      HostExecutor exec(shape, **b);
      long expanded = 0;
      for (int step = 0; step < 4; ++step) {
        for (int l = 0; l < shape.num_layers; ++l) {
          const uint64_t seed = 100 + step * 10 + l;
          const auto q = Normal(shape.q_dim(), seed, 2.0f);
          const auto k = Normal(shape.kv_dim(), seed + 1000),
                     v = Normal(shape.kv_dim(), seed + 2000);
          std::vector<float> want(shape.q_dim()), got(shape.q_dim());
          (*a)->Attend(l, q.data(), k.data(), v.data(), want.data());
          exec.Attend(l, q.data(), k.data(), v.data(), got.data());
          for (int i = 0; i < shape.q_dim(); ++i) {
            INFO("step " << step << " layer " << l << " element " << i);
            REQUIRE(got[i] == Approx(want[i]).margin(1e-5));
          }
          if (c.zoom) {
            for (int g = 0; g < shape.num_kv_heads; ++g) {
              for (int s = 0; s < (*b)->store(l).num_spans(); ++s) expanded += (*b)->expanded(g)[s];
            }
          }
        }
      }
      const ZoomStats za = (*a)->zoom_stats(), zb = (*b)->zoom_stats();
      REQUIRE(za.expanded_tokens == zb.expanded_tokens);
      REQUIRE(za.pinned_tokens == zb.pinned_tokens);
      REQUIRE(zb.expanded_tokens == expanded);
      REQUIRE(zb.pinned_tokens ==
              (c.pins > 0 ? c.pins * shape.num_layers * shape.num_kv_heads : 0));
      if (c.zoom) REQUIRE(expanded > 0);  // the gate opened: the protocol was exercised
    }
  }
}

TEST_CASE("the external protocol refuses wrong sizes and a second pinning", "[cpu]") {
  const CacheShape shape{2, 4, 2, 8};
  const int t = 60;
  PrefixKv prefix;
  prefix.num_tokens = t;
  for (int l = 0; l < shape.num_layers; ++l) {
    prefix.k.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 30 + l));
    prefix.v.push_back(Normal(static_cast<size_t>(t) * shape.kv_dim(), 40 + l));
  }
  prefix.surprisal.assign(t, 1.0f);
  SekvOptions o;
  o.pin_tokens = 2;
  auto c = SekvCache::CreateWithSegmentation(
      shape, prefix, testing::ChunkedSegmentation(t, 7, 8, {0}), o, nullptr);
  REQUIRE(c.ok());
  SekvCache& cache = **c;
  const int ns = static_cast<int>(cache.segmentation().spans.size());
  const std::vector<float> q = Normal(shape.q_dim(), 1);
  const std::vector<float> lse(shape.num_heads, 0.0f), alpha(ns * shape.num_kv_heads, 0.0f);
  CHECK(!cache.ExternalPin(0, q.data(), std::vector<float>(3, 0.0f)).ok());
  CHECK(!cache.ExternalPin(2, q.data(), lse).ok());
  CHECK(!cache.pins_done(0));
  REQUIRE(cache.ExternalPin(0, q.data(), lse).ok());
  CHECK(cache.pins_done(0));
  CHECK(!cache.ExternalPin(0, q.data(), lse).ok());  // pinned once only
  CHECK(!cache.ExternalZoom(0, q.data(), lse, std::vector<float>(ns, 0.0f)).ok());
  CHECK(!cache.ExternalZoom(-1, q.data(), lse, alpha).ok());
  REQUIRE(cache.ExternalZoom(0, q.data(), lse, alpha).ok());  // α = 0 everywhere: nothing
  for (int g = 0; g < shape.num_kv_heads; ++g) {
    for (int s = 0; s < ns; ++s) CHECK(cache.expanded(g)[s] == 0);
  }
}

}  // namespace
}  // namespace scd::sekv
