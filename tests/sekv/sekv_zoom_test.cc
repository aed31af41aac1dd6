// Token-resolution zoom-in and observation-window anchors (pins): token scores in the CPU
// tier's low-rank coordinates, the heaviest-token pick, the row-level expansion buffer, and
// the cache-level invariants (each token counted once in the softmax, bytes from the
// structures, a single relevant token found inside a long span).
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "common/base/random.h"
#include "common/sekv/kv_cache.h"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/span_fetcher.h"
#include "common/sekv/span_store.h"
#include "common/sekv/token_zoom.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::Normal;

// Anchors {0}, spans of `span` tokens, then a window of `window` tokens.
Segmentation Chunks(int t, int span, int window) {
  return testing::ChunkedSegmentation(t, span, window, {0});
}

TEST_CASE("token scores in low-rank coordinates are the exact attention shares", "[cpu]") {
  const int t = 50, heads = 2, hd = 8, kvd = heads * hd, group = 3;
  const auto k = Normal(t * kvd, 1), v = Normal(t * kvd, 2);
  const std::vector<float> s(t, 1.0f);
  const Segmentation seg = Chunks(t, 9, 6);
  SpanStoreOptions o;
  o.energy = 1.0;  // lossless bases: the scores must be exact
  const SpanStore st = SpanStore::Build(k.data(), v.data(), s, seg, heads, hd, o);
  const auto q = Normal(group * hd, 3);
  const float lse[group] = {1.5f, -0.5f, 2.0f};
  const float scale = 1.0f / std::sqrt(float(hd));
  for (int g = 0; g < heads; ++g) {
    for (int sp = 0; sp < st.num_spans(); ++sp) {
      std::vector<ScoredToken> out;
      std::vector<float> scratch;
      std::vector<uint8_t> skip(seg.spans[sp].length(), 0);
      skip[1] = 1;
      ScoreSpanTokens(st, g, sp, q.data(), group, lse, scale, skip.data(), &out, &scratch);
      REQUIRE(int(out.size()) == seg.spans[sp].length() - 1);
      for (const ScoredToken& x : out) {
        REQUIRE(x.ref.span == sp);
        REQUIRE(x.ref.offset != 1);
        const float* kr = k.data() + (seg.spans[sp].begin + x.ref.offset) * kvd + g * hd;
        double w = 0;
        for (int h = 0; h < group; ++h) {
          double dot = 0;
          for (int c = 0; c < hd; ++c) dot += q[h * hd + c] * kr[c];
          w += std::exp(dot * scale - lse[h]);
        }
        REQUIRE(x.weight == Approx(w).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("the heaviest tokens are kept, ties by position", "[cpu]") {
  std::vector<ScoredToken> v = {{0.1f, {0, 0}}, {0.5f, {2, 1}}, {0.5f, {1, 3}},
                                {0.9f, {3, 0}}, {0.2f, {1, 0}}, {0.5f, {1, 2}}};
  KeepHeaviest(&v, 4);
  REQUIRE(v.size() == 4);
  REQUIRE(v[0].ref.span == 3);
  REQUIRE((v[1].ref.span == 1 && v[1].ref.offset == 2));
  REQUIRE((v[2].ref.span == 1 && v[2].ref.offset == 3));
  REQUIRE((v[3].ref.span == 2 && v[3].ref.offset == 1));
  KeepHeaviest(&v, 10);  // more than there are: all kept
  REQUIRE(v.size() == 4);
  KeepHeaviest(&v, 0);
  REQUIRE(v.empty());
}

TEST_CASE("expansion buffer: rows, hits, LRU eviction and capacity", "[cpu]") {
  const int t = 40, heads = 1, hd = 4;
  const auto k = Normal(t * hd, 5), v = Normal(t * hd, 6);
  const std::vector<float> s(t, 1.0f);
  const Segmentation seg = Chunks(t, 8, 7);
  SpanStoreOptions o;
  o.energy = 1.0;
  const SpanStore st = SpanStore::Build(k.data(), v.data(), s, seg, heads, hd, o);
  for (bool async : {false, true}) {
    SpanFetcher f(1, 1, hd, 4, async);
    REQUIRE(f.CapacityBytes() == 4 * 2 * hd * sizeof(float));
    auto check = [&](const std::vector<TokenRef>& rows) {
      const BufferView b = f.Get(0, 0);
      REQUIRE(b.rows == 4);
      int active = 0;
      for (int i = 0; i < b.rows; ++i) active += b.active[i] != 0;
      REQUIRE(active == int(std::min<size_t>(rows.size(), 4)));
      // Every requested row is in the buffer with the span's exact K and V.
      for (size_t r = 0; r < std::min<size_t>(rows.size(), 4); ++r) {
        const int pos = seg.spans[rows[r].span].begin + rows[r].offset;
        bool found = false;
        for (int i = 0; i < b.rows && !found; ++i) {
          if (!b.active[i]) continue;
          bool same = true;
          for (int c = 0; c < hd; ++c) {
            same = same && std::fabs(b.k[i * hd + c] - k[pos * hd + c]) < 1e-4 &&
                   std::fabs(b.v[i * hd + c] - v[pos * hd + c]) < 1e-4;
          }
          found = same;
        }
        REQUIRE(found);
      }
    };
    const std::vector<TokenRef> a = {{0, 0}, {0, 5}, {2, 3}};
    f.Request(0, 0, st, a);
    check(a);
    f.Request(0, 0, st, a);  // the same rows again: all hits
    check(a);
    REQUIRE(f.stats().hits == 3);
    const std::vector<TokenRef> b = {{1, 1}, {1, 2}, {0, 5}};  // two misses evict the oldest
    f.Request(0, 0, st, b);
    check(b);
    REQUIRE(f.stats().hits == 4);
    REQUIRE(f.stats().misses == 5);
    const std::vector<TokenRef> c = {{3, 0}, {3, 1}, {3, 2}, {3, 3}, {3, 4}, {3, 5}};
    f.Request(0, 0, st, c);  // more rows than the capacity: the last two are left out
    check(c);
    REQUIRE(f.stats().dropped == 2);
  }
}

// One layer, one KV head, two query heads: a cache driven directly through Attend.
struct Needle {
  static constexpr int kT = 61, kHd = 8;
  CacheShape shape{1, 2, 1, kHd};
  PrefixKv prefix;
  std::vector<float> q, k_new, v_new;
  Needle() {
    prefix.num_tokens = kT;
    prefix.surprisal.assign(kT, 1.0f);
    prefix.k.push_back(Normal(kT * kHd, 31, 0.3f));
    prefix.v.push_back(Normal(kT * kHd, 32));
    q = Normal(2 * kHd, 33);
    for (int c = 0; c < kHd; ++c) q[kHd + c] = q[c];  // both query heads ask the same
    // Token 26, in the middle of a 12-token span, is what the query looks for.
    for (int c = 0; c < kHd; ++c) prefix.k[0][26 * kHd + c] = 2.0f * q[c];
    k_new = Normal(kHd, 34, 0.3f);
    v_new = Normal(kHd, 35);
  }
  std::vector<float> Attend(KvCache& c) {
    std::vector<float> out(2 * kHd);
    c.Attend(0, q.data(), k_new.data(), v_new.data(), out.data());
    return out;
  }
};

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

TEST_CASE("token zoom finds one relevant token inside a long span; whole spans cannot", "[cpu]") {
  Needle n;
  FullKvCache full(n.shape, n.prefix);
  const std::vector<float> ref = n.Attend(full);
  SekvOptions o;
  o.expand_budget = 3;  // a buffer far smaller than a span
  o.candidate_factor = 12.0f;
  o.tau_override = 0.0f;
  o.async_fetch = false;
  auto run = [&](ZoomResolution r) {
    o.resolution = r;
    auto c =
        SekvCache::CreateWithSegmentation(n.shape, n.prefix, Chunks(Needle::kT, 12, 8), o, nullptr);
    REQUIRE(c.ok());
    return MaxAbsDiff(n.Attend(**c), ref);
  };
  const double token = run(ZoomResolution::kToken), span = run(ZoomResolution::kSpan);
  INFO("token zoom error " << token << ", span zoom error " << span);
  REQUIRE(token < 0.1 * span);
}

TEST_CASE("pins: chosen at the first step, counted once, in the GPU bytes", "[cpu]") {
  Needle n;
  FullKvCache full(n.shape, n.prefix);
  SekvOptions o;
  o.store.energy = 1.0;
  o.pin_tokens = 5;
  o.async_fetch = false;
  SECTION("with every other token expanded, SEKV equals the full cache") {
    o.expand_budget = Needle::kT;
    o.tau_override = 0.0f;
    for (ZoomResolution r : {ZoomResolution::kToken, ZoomResolution::kSpan}) {
      o.resolution = r;
      auto c = SekvCache::CreateWithSegmentation(n.shape, n.prefix, Chunks(Needle::kT, 12, 8), o,
                                                 nullptr);
      REQUIRE(c.ok());
      FullKvCache f(n.shape, n.prefix);
      for (int step = 0; step < 3; ++step) {
        REQUIRE(MaxAbsDiff(n.Attend(**c), n.Attend(f)) < 1e-4);
      }
      const ZoomStats z = (*c)->zoom_stats();
      REQUIRE(z.pinned_tokens == 5);
      // Pinned tokens never come back through the zoom-in: 52 span tokens, 5 pinned.
      REQUIRE(z.expanded_tokens == 3 * (52 - 5));
    }
  }
  SECTION("the needle is pinned and the bytes include the pins") {
    o.expand_budget = 2;
    auto c =
        SekvCache::CreateWithSegmentation(n.shape, n.prefix, Chunks(Needle::kT, 12, 8), o, nullptr);
    REQUIRE(c.ok());
    const std::vector<float> got = n.Attend(**c);
    REQUIRE(MaxAbsDiff(got, n.Attend(full)) < 0.1);
    const MemoryBreakdown m = (*c)->Memory();
    REQUIRE(m.pinned == size_t(5) * 2 * Needle::kHd * sizeof(float));
    REQUIRE(m.expanded_cache == size_t(2) * 2 * Needle::kHd * sizeof(float));
    // Per-head summary counts: one float per span and KV head on top of the store's log|S|.
    const size_t spans = (*c)->segmentation().spans.size();
    REQUIRE(m.summaries == (spans * 2 * Needle::kHd + spans + spans) * sizeof(float));
  }
  SECTION("pins need the zoom-in's CPU tier") {
    o.zoom = false;
    REQUIRE(
        !SekvCache::CreateWithSegmentation(n.shape, n.prefix, Chunks(Needle::kT, 12, 8), o, nullptr)
             .ok());
  }
}

}  // namespace
}  // namespace scd::sekv
