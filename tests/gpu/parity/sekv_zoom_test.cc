// Parity of SekvZoom (kernels/cuda/scd_sekv_ops.h), the SEKV zoom-in on the device, with its
// CPU twins composed as SekvCache::Select does (SelectSpans, ScoreSpanTokens, KeepHeaviest,
// LowRankBasis::ReconstructRow and the summary-count edits of SekvSummaryStep), on a real
// SpanStore. Tolerances:
//   - the kept (span, offset) rows and their order exactly as the twins compose them
//     (SekvCache::Select); each row within 1e-5 + 1e-4 relative of ReconstructRow (the same
//     sums, fused on the device), BF16 rows within one ulp of the twin's row rounded; the log
//     counts of the step 1e-6 absolute, skips, row counts and stats exact. The inputs keep the
//     kept tokens' weights 1e-5 apart (checked), so the device's exp and FMAs cannot reorder
//     them.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/sekv/low_rank.h"
#include "common/sekv/span_store.h"
#include "common/sekv/surprisal_segmenter.h"
#include "common/sekv/token_zoom.h"
#include "common/sekv/zoom_router.h"
#include "kernels/cuda/scd_sekv_ops.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::CheckClose;
using testing::DeviceArray;
using testing::RandomFloats;
using testing::RequireOk;
using testing::RequireSynced;
using testing::Slice;
using testing::Widen;

using testing::kBf16StoreAtol;
using testing::kBf16StoreRtol;
using testing::kSentinel;

// ---- SekvZoom ----

constexpr int kZoomKvHeads = 2, kZoomGroup = 2, kZoomHeadDim = 32;
constexpr int kZoomHeads = kZoomKvHeads * kZoomGroup;

// The size of a layer for SekvZoom.
struct ZoomShape {
  int spans = 40;
  int max_length = 14;  // span lengths drawn from 1 to max_length
  int r_max = 8;        // rank cap of the bases (a span's rank is at most its length)
  int head_dim = kZoomHeadDim;
};

// One layer for SekvZoom: a SpanStore of `shape.spans` spans (by default 40 spans of 1 to 14
// tokens, r_max 8, so ranks vary from 1 to 8), pinned tokens scattered over the spans (span 5
// of KV head 0 wholly pinned; every seventh span without flags), and the zoom-in's other
// inputs.
struct ZoomLayer {
  int head_dim = 0;
  sekv::SpanStore store;
  std::vector<int> span_at;        // [num_spans]: first token of the span in `pins`' rows
  std::vector<uint8_t> pins;       // [num_kv_heads][Σ lengths] pinned flags
  std::vector<int64_t> pin_at;     // [num_kv_heads, num_spans]: offset in `pins`, -1: no flags
  std::vector<int32_t> remaining;  // [num_kv_heads, num_spans]: length − pinned tokens
  std::vector<float> alpha, base_lc, q, lse;
};

ZoomLayer MakeZoomLayer(uint64_t seed, const ZoomShape& shape = {}) {
  const int spans = shape.spans, hd = shape.head_dim, kv_dim = kZoomKvHeads * hd, window = 8;
  const std::vector<int32_t> lengths = testing::RandomInts(spans, seed++, shape.max_length);
  sekv::Segmentation seg;
  seg.anchors = {0};
  int t = 1;
  for (int s = 0; s < spans; ++s) {
    seg.spans.push_back({t, t + lengths[s] + 1});
    t += lengths[s] + 1;
  }
  seg.window_begin = t;
  seg.num_tokens = t + window;
  std::vector<float> k = RandomFloats(static_cast<size_t>(seg.num_tokens) * kv_dim, seed++);
  std::vector<float> v = RandomFloats(k.size(), seed++);
  std::vector<float> surprisal = RandomFloats(seg.num_tokens, seed++);
  for (float& x : surprisal) x += 1.5f;
  sekv::SpanStoreOptions options;
  options.r_max = shape.r_max;
  ZoomLayer layer;
  layer.head_dim = hd;
  layer.store =
      sekv::SpanStore::Build(k.data(), v.data(), surprisal, seg, kZoomKvHeads, hd, options);
  const int in_spans = t - 1;  // tokens of all spans
  const std::vector<int32_t> draw =
      testing::RandomInts(static_cast<size_t>(kZoomKvHeads) * in_spans, seed++, 6);
  layer.pins.resize(draw.size());
  for (size_t i = 0; i < draw.size(); ++i) layer.pins[i] = draw[i] == 0;  // about 1 in 6
  const size_t total = static_cast<size_t>(kZoomKvHeads) * spans;
  layer.pin_at.assign(total, -1);
  layer.remaining.assign(total, 0);
  for (int s = 0; s < spans; ++s) layer.span_at.push_back(seg.spans[s].begin - 1);
  for (int g = 0; g < kZoomKvHeads; ++g) {
    for (int s = 0; s < spans; ++s) {
      const size_t gs = static_cast<size_t>(g) * spans + s;
      const int len = seg.spans[s].length();
      const int64_t at = int64_t{g} * in_spans + layer.span_at[s];
      if (g == 0 && s == 5) std::fill_n(layer.pins.begin() + at, len, uint8_t{1});
      if (s % 7 == 3) {  // no flags: none of its tokens pinned
        std::fill_n(layer.pins.begin() + at, len, uint8_t{0});
      } else {
        layer.pin_at[gs] = at;
      }
      const auto flags = layer.pins.begin() + at;
      layer.remaining[gs] = len - static_cast<int32_t>(std::count(flags, flags + len, 1));
    }
  }
  REQUIRE(layer.remaining[5] == 0);
  layer.alpha = RandomFloats(total, seed++, 0.5f);
  for (float& a : layer.alpha) a += 0.5f;  // gate values in [0, 1]
  std::vector<float> sorted = layer.alpha;
  std::sort(sorted.begin(), sorted.end());
  REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());  // distinct
  layer.base_lc = RandomFloats(total, seed++, 2.0f);
  layer.q = RandomFloats(static_cast<size_t>(kZoomHeads) * hd, seed++, 2.0f);
  layer.lse = RandomFloats(kZoomHeads, seed++);
  for (float& x : layer.lse) x += 3.0f;
  return layer;
}

struct ZoomCase {
  const char* name;
  bool by_token;
  int budget;
  float candidate_factor;  // kToken: candidate_budget = lround(factor · budget)
  cuda::KvType out_type;
  float tau0, tau1;   // tau of KV heads 0 and 1
  bool pinned_bases;  // the bases in one pinned host buffer, else in device memory
  bool with_pins;     // the pinned flags passed, else null (remaining = span length)
  bool expect_rows;   // some KV head keeps a token
};

constexpr int kZoomExpansionStride = 3;            // segments per KV head in the expansion table
constexpr int64_t kZoomStats0[4] = {3, 5, 7, 11};  // stats before the call (added to)

// What a case made the zoom-in do, over both KV heads (from the twins): the most candidate
// spans, scored tokens and kept rows of a head, the most candidates of a head that one of
// SekvZoom's 256 threads walks (spans equal mod 256), and the highest key rank among the
// candidates.
struct ZoomReach {
  int candidates = 0;
  int one_thread = 0;
  long scored = 0;
  int rows = 0;
  int rank = 0;
};

// What the twins composed as SekvCache::Select does expect of a case: each KV head's kept rows
// in order, the step's log counts and skips, and the stats after the call.
struct ZoomWant {
  std::vector<std::vector<sekv::TokenRef>> rows;
  std::vector<float> lc;
  std::vector<uint8_t> skip;
  std::vector<int64_t> stats;
};

// A case's inputs as SekvZoom takes them: the tau of each KV head, the candidate budget, and
// the tokens left per (KV head, span) (the span lengths where the pinned flags are not passed).
struct ZoomInputs {
  std::vector<float> tau;
  int candidate_budget = 0;
  std::vector<int32_t> remaining;
};

ZoomInputs MakeZoomInputs(const ZoomLayer& layer, const ZoomCase& c) {
  const sekv::SpanStore& st = layer.store;
  const int ns = st.num_spans();
  ZoomInputs in;
  in.tau = {c.tau0, c.tau1};
  in.candidate_budget =
      c.by_token ? static_cast<int>(std::lround(c.candidate_factor * c.budget)) : c.budget;
  in.remaining = layer.remaining;
  if (!c.with_pins) {
    for (size_t gs = 0; gs < in.remaining.size(); ++gs) {
      in.remaining[gs] = st.span_length(gs % ns);
    }
  }
  return in;
}

// KV head g's kept rows among `candidates`, by token (scored, the heaviest kept) or whole
// spans; *scored: the tokens scored.
std::vector<sekv::TokenRef> TwinRows(const ZoomLayer& layer, const ZoomCase& c, int g,
                                     const std::vector<int>& candidates, long* scored) {
  const sekv::SpanStore& st = layer.store;
  const int ns = st.num_spans(), hd = layer.head_dim, group = kZoomGroup;
  const size_t row0 = static_cast<size_t>(g) * ns;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  auto flags = [&](int s) -> const uint8_t* {
    const int64_t at = layer.pin_at[row0 + s];
    return c.with_pins && at >= 0 ? layer.pins.data() + at : nullptr;
  };
  std::vector<sekv::TokenRef> rows;
  *scored = 0;
  if (!c.by_token) {
    for (int s : candidates) {
      const uint8_t* f = flags(s);
      for (int i = 0; i < st.span_length(s); ++i) {
        if (f == nullptr || !f[i]) rows.push_back({s, i});
      }
    }
    return rows;
  }
  std::vector<sekv::ScoredToken> tokens;
  std::vector<float> scratch;
  for (int s : candidates) {
    sekv::ScoreSpanTokens(st, g, s, layer.q.data() + g * group * hd, group,
                          layer.lse.data() + g * group, scale, flags(s), &tokens, &scratch);
  }
  *scored = static_cast<long>(tokens.size());
  // The device's exp and FMAs may move a weight by a few ulps: these inputs keep every kept
  // weight 1e-5 (relative) from the next one, so no order can depend on them.
  std::vector<float> w;
  for (const sekv::ScoredToken& x : tokens) w.push_back(x.weight);
  std::sort(w.begin(), w.end(), std::greater<float>());
  for (int i = 0; i + 1 < static_cast<int>(w.size()) && i < c.budget; ++i) {
    INFO("KV head " << g << ": weights " << i << " and " << i + 1 << ": " << w[i] << ", "
                    << w[i + 1]);
    REQUIRE(w[i] - w[i + 1] > 1e-5f * w[i]);
  }
  sekv::KeepHeaviest(&tokens, c.budget);
  for (const sekv::ScoredToken& x : tokens) rows.push_back(x.ref);
  return rows;
}

// The twins over both KV heads, and in *reach how far the case took the zoom-in.
ZoomWant ZoomTwins(const ZoomLayer& layer, const ZoomCase& c, const ZoomInputs& in,
                   ZoomReach* reach) {
  const sekv::SpanStore& st = layer.store;
  const int ns = st.num_spans();
  const size_t total = static_cast<size_t>(kZoomKvHeads) * ns;
  ZoomWant want{std::vector<std::vector<sekv::TokenRef>>(kZoomKvHeads), layer.base_lc,
                std::vector<uint8_t>(total), std::vector<int64_t>(4 * kZoomKvHeads)};
  long scored_all = 0, kept_all = 0;
  for (int g = 0; g < kZoomKvHeads; ++g) {
    const size_t row0 = static_cast<size_t>(g) * ns;
    const std::vector<int> lengths(in.remaining.begin() + row0, in.remaining.begin() + row0 + ns);
    const std::vector<int> candidates =
        sekv::SelectSpans(absl::MakeConstSpan(layer.alpha.data() + row0, ns), lengths, in.tau[g],
                          in.candidate_budget);
    reach->candidates = std::max(reach->candidates, static_cast<int>(candidates.size()));
    std::vector<int> per_thread(256, 0);
    for (int s : candidates) {
      reach->rank = std::max(reach->rank, st.key_basis(s, g).rank);
      reach->one_thread = std::max(reach->one_thread, ++per_thread[s % 256]);
    }
    long scored = 0;
    std::vector<sekv::TokenRef>& rows = want.rows[g];
    rows = TwinRows(layer, c, g, candidates, &scored);
    std::vector<int> kept(ns, 0);
    for (const sekv::TokenRef& r : rows) ++kept[r.span];
    int spans = 0;
    for (int s = 0; s < ns; ++s) {
      const int left = in.remaining[row0 + s] - kept[s];
      want.skip[row0 + s] = in.remaining[row0 + s] <= 0;
      if (kept[s] == 0) continue;
      ++spans;
      want.skip[row0 + s] = left <= 0;
      if (left > 0) want.lc[row0 + s] = std::log(static_cast<float>(left));
    }
    const int64_t add[4] = {1, spans, static_cast<int64_t>(rows.size()), scored};
    for (int i = 0; i < 4; ++i) want.stats[4 * g + i] = kZoomStats0[i] + add[i];
    scored_all += scored;
    kept_all += static_cast<long>(rows.size());
    reach->scored = std::max(reach->scored, scored);
    reach->rows = std::max(reach->rows, static_cast<int>(rows.size()));
  }
  if (c.expect_rows) {
    CHECK(kept_all > 0);
    if (c.by_token && in.candidate_budget > c.budget) CHECK(scored_all > kept_all);  // some dropped
  }
  return want;
}

// The layer's bases, copied into one pinned or device buffer (held here), and their table
// [G, num_spans].
struct ZoomBases {
  cuda::PinnedBuffer pinned_blob;
  std::unique_ptr<DeviceArray<float>> device_blob;
  std::vector<cuda::SpanBasisRef> refs;
};

void MakeZoomBases(const ZoomLayer& layer, const ZoomCase& c, ZoomBases* bases) {
  const sekv::SpanStore& st = layer.store;
  const int ns = st.num_spans();
  std::vector<float> blob;
  std::vector<size_t> at;  // 4 offsets per (g, s): us_k, vt_k, us_v, vt_v
  for (int g = 0; g < kZoomKvHeads; ++g) {
    for (int s = 0; s < ns; ++s) {
      for (const sekv::LowRankBasis* b : {&st.key_basis(s, g), &st.value_basis(s, g)}) {
        REQUIRE(b->rank >= 1);
        REQUIRE(b->rank <= cuda::kMaxBasisRank);
        at.push_back(blob.size());
        blob.insert(blob.end(), b->us, b->us + b->us_size());
        at.push_back(blob.size());
        blob.insert(blob.end(), b->vt, b->vt + b->vt_size());
      }
    }
  }
  const float* base = nullptr;
  if (c.pinned_bases) {
    RequireOk(bases->pinned_blob.Reserve(blob.size() * sizeof(float)));
    std::memcpy(bases->pinned_blob.data(), blob.data(), blob.size() * sizeof(float));
    base = bases->pinned_blob.as<float>();
  } else {
    bases->device_blob = std::make_unique<DeviceArray<float>>(blob);
    base = bases->device_blob->get();
  }
  bases->refs.resize(static_cast<size_t>(kZoomKvHeads) * ns);
  for (size_t gs = 0; gs < bases->refs.size(); ++gs) {
    const int g = static_cast<int>(gs / ns), s = static_cast<int>(gs % ns);
    cuda::SpanBasisRef& r = bases->refs[gs];
    r.us_k = base + at[4 * gs];
    r.vt_k = base + at[4 * gs + 1];
    r.us_v = base + at[4 * gs + 2];
    r.vt_v = base + at[4 * gs + 3];
    r.pinned = layer.pin_at[gs];
    r.length = st.span_length(s);
    r.rank_k = st.key_basis(s, g).rank;
    r.rank_v = st.value_basis(s, g).rank;
  }
}

// What SekvZoom wrote, read back: the kept rows (F32, BF16 widened), the expansion table, the
// step's log counts and skips, and the stats.
struct ZoomGot {
  std::vector<float> k, v;
  std::vector<cuda::AttentionSegment> expansion;
  std::vector<float> lc;
  std::vector<uint8_t> skip;
  std::vector<int64_t> stats;
};

// The expansion table before the call: only each KV head's first entry's rows may change.
std::vector<cuda::AttentionSegment> ZoomExpansionBefore() {
  std::vector<cuda::AttentionSegment> expansion(kZoomKvHeads * kZoomExpansionStride);
  for (size_t i = 0; i < expansion.size(); ++i) {
    expansion[i].rows = -1 - static_cast<int>(i);
    expansion[i].stride = 100 + static_cast<int>(i);
  }
  return expansion;
}

ZoomGot RunSekvZoom(const ZoomLayer& layer, const ZoomCase& c, const ZoomInputs& in,
                    const std::vector<cuda::SpanBasisRef>& refs) {
  const int ns = layer.store.num_spans(), hd = layer.head_dim;
  const size_t total = static_cast<size_t>(kZoomKvHeads) * ns;
  const bool bf16 = c.out_type == cuda::KvType::kBf16;
  DeviceArray<float> q_dev(layer.q), lse_dev(layer.lse), alpha_dev(layer.alpha);
  DeviceArray<float> tau_dev(in.tau);
  DeviceArray<int32_t> rem_dev(in.remaining);
  DeviceArray<float> base_lc_dev(layer.base_lc);
  DeviceArray<cuda::SpanBasisRef> refs_dev(refs);
  DeviceArray<uint8_t> pins_dev(layer.pins);
  const size_t out_elems = static_cast<size_t>(kZoomKvHeads) * c.budget * hd;
  const std::vector<float> sentinel(std::max<size_t>(out_elems, 1), kSentinel);
  DeviceArray<float> k_f32(sentinel), v_f32(sentinel);
  DeviceArray<Bf16> k_bf16(testing::ToBf16(sentinel)), v_bf16(testing::ToBf16(sentinel));
  DeviceArray<cuda::AttentionSegment> expansion_dev(ZoomExpansionBefore());
  DeviceArray<float> lc_dev(std::vector<float>(total, 1e9f));  // must be overwritten
  DeviceArray<uint8_t> skip_dev(std::vector<uint8_t>(total, 7));
  std::vector<int64_t> stats0;
  for (int g = 0; g < kZoomKvHeads; ++g) stats0.insert(stats0.end(), kZoomStats0, kZoomStats0 + 4);
  DeviceArray<int64_t> stats_dev(stats0);
  const int64_t ws_bytes = cuda::SekvZoomWorkspaceBytes(kZoomKvHeads, in.candidate_budget);
  REQUIRE(ws_bytes > 0);
  DeviceArray<int32_t> ws(static_cast<size_t>(ws_bytes / sizeof(int32_t)));

  cuda::ZoomParams params;
  params.budget = c.budget;
  params.candidate_budget = in.candidate_budget;
  params.by_token = c.by_token ? 1 : 0;
  void* out_k = bf16 ? static_cast<void*>(k_bf16.get()) : k_f32.get();
  void* out_v = bf16 ? static_cast<void*>(v_bf16.get()) : v_f32.get();
  RequireOk(cuda::SekvZoom(
      q_dev.get(), lse_dev.get(), alpha_dev.get(), tau_dev.get(), rem_dev.get(), base_lc_dev.get(),
      refs_dev.get(), c.with_pins ? pins_dev.get() : nullptr, ns, kZoomHeads, kZoomKvHeads, hd,
      params, out_k, out_v, c.out_type, expansion_dev.get(), kZoomExpansionStride, lc_dev.get(),
      skip_dev.get(), stats_dev.get(), ws.get(), ws_bytes, nullptr));
  RequireSynced();
  return {bf16 ? Widen(k_bf16.ToHost()) : k_f32.ToHost(),
          bf16 ? Widen(v_bf16.ToHost()) : v_f32.ToHost(),
          expansion_dev.ToHost(),
          lc_dev.ToHost(),
          skip_dev.ToHost(),
          stats_dev.ToHost()};
}

// Each KV head's rows: the twin's tokens at their places, then the untouched slots.
void CheckZoomRows(const ZoomLayer& layer, const ZoomCase& c, const ZoomWant& want,
                   const ZoomGot& got) {
  const sekv::SpanStore& st = layer.store;
  const int hd = layer.head_dim;
  const bool bf16 = c.out_type == cuda::KvType::kBf16;
  for (int g = 0; g < kZoomKvHeads; ++g) {
    const std::vector<sekv::TokenRef>& rows = want.rows[g];
    std::string list;
    for (const sekv::TokenRef& r : rows) list += absl::StrCat(" ", r.span, ":", r.offset);
    INFO("KV head " << g << ", rows (span:offset) expected in order:" << list);
    REQUIRE(got.expansion[g * kZoomExpansionStride].rows == static_cast<int>(rows.size()));
    // Each row is the twin's token at that place: a token out of place or order shows here.
    std::vector<float> want_k(static_cast<size_t>(c.budget) * hd, kSentinel), want_v = want_k;
    for (size_t i = 0; i < rows.size(); ++i) {
      st.key_basis(rows[i].span, g).ReconstructRow(rows[i].offset, want_k.data() + i * hd);
      st.value_basis(rows[i].span, g).ReconstructRow(rows[i].offset, want_v.data() + i * hd);
    }
    const size_t n = rows.size() * hd, per_head = static_cast<size_t>(c.budget) * hd;
    const size_t from = g * per_head;
    std::vector<float> wk = Slice(want_k, 0, n), wv = Slice(want_v, 0, n);
    if (bf16) {
      wk = testing::RoundedBf16(wk);
      wv = testing::RoundedBf16(wv);
    }
    const double atol = bf16 ? kBf16StoreAtol : 1e-5, rtol = bf16 ? kBf16StoreRtol : 1e-4;
    CheckClose(Slice(got.k, from, n), wk, atol, rtol, "SekvZoom K rows");
    CheckClose(Slice(got.v, from, n), wv, atol, rtol, "SekvZoom V rows");
    CheckClose(Slice(got.k, from + n, per_head - n), Slice(want_k, n, per_head - n), 0, 0,
               "SekvZoom K slots past the kept rows");
    CheckClose(Slice(got.v, from + n, per_head - n), Slice(want_v, n, per_head - n), 0, 0,
               "SekvZoom V slots past the kept rows");
  }
}

// Runs SekvZoom on `layer` and compares it with the twins composed as SekvCache::Select does.
ZoomReach CheckSekvZoom(const ZoomLayer& layer, const ZoomCase& c) {
  INFO(c.name);
  const int ns = layer.store.num_spans();
  ZoomReach reach;
  const ZoomInputs in = MakeZoomInputs(layer, c);
  const ZoomWant want = ZoomTwins(layer, c, in, &reach);
  ZoomBases bases;
  MakeZoomBases(layer, c, &bases);
  const ZoomGot got = RunSekvZoom(layer, c, in, bases.refs);

  CheckZoomRows(layer, c, want, got);
  const std::vector<cuda::AttentionSegment> expansion = ZoomExpansionBefore();
  for (size_t i = 0; i < expansion.size(); ++i) {
    INFO("expansion entry " << i);
    if (i % kZoomExpansionStride != 0) CHECK(got.expansion[i].rows == expansion[i].rows);
    CHECK(got.expansion[i].stride == expansion[i].stride);
  }
  CheckClose(got.lc, want.lc, 1e-6, 0, "SekvZoom step_lc");
  for (size_t gs = 0; gs < want.skip.size(); ++gs) {
    INFO("step_skip of span " << gs % ns << ", KV head " << gs / ns);
    CHECK(int{got.skip[gs]} == int{want.skip[gs]});
  }
  for (size_t i = 0; i < want.stats.size(); ++i) {
    INFO("stats[" << i << "] (KV head " << i / 4 << ", field " << i % 4 << ")");
    CHECK(got.stats[i] == want.stats[i]);
  }
  return reach;
}

}  // namespace

TEST_CASE("CUDA SekvZoom matches SelectSpans, ScoreSpanTokens, KeepHeaviest and ReconstructRow",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  using cuda::KvType;
  const ZoomLayer layer = MakeZoomLayer(1000);
  // name, by_token, budget, candidate factor, out_type, tau of KV heads 0 and 1, pinned bases,
  // pins, rows expected
  const ZoomCase cases[] = {
      {"kToken, 3x candidates, F32 rows, pinned bases", true, 12, 3.0f, KvType::kF32, 0.3f, 0.45f,
       true, true, true},
      {"kToken, 2.5x candidates, BF16 rows, device bases", true, 16, 2.5f, KvType::kBf16, 0.3f,
       0.3f, false, true, true},
      {"kToken without pinned flags", true, 10, 4.0f, KvType::kF32, 0.2f, 0.5f, true, false, true},
      {"kSpan, F32 rows, pinned bases", false, 30, 1.0f, KvType::kF32, 0.3f, 0.45f, true, true,
       true},
      {"kSpan, BF16 rows, device bases", false, 24, 1.0f, KvType::kBf16, 0.3f, 0.3f, false, true,
       true},
      {"no eligible span (tau 1)", true, 12, 3.0f, KvType::kF32, 1.0f, 1.0f, true, true, false},
      {"kSpan, budget 0: no span fits", false, 0, 1.0f, KvType::kF32, 0.3f, 0.3f, true, true,
       false},
  };
  for (const ZoomCase& c : cases) CheckSekvZoom(layer, c);
}

// SekvZoom copies each candidate's bases into shared memory (8192 floats) before it reads them,
// each array that still fits, and reads the others where they lie. Spans of up to 80 tokens
// of rank up to 64 at head_dim 128 fill that space with one basis (64 x 128) and leave the
// rest to be read in place; the scores' and the rebuild's copies then take some arrays and
// not others. Many short spans give more candidates and tokens than a block has threads, so
// the block-wide scans and lists run over several rounds, and one thread's spans lead the
// walk, so that it takes more than the 4 keys it holds.
TEST_CASE("CUDA SekvZoom with bases past its shared staging and more candidates than threads",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  using cuda::KvType;
  ZoomShape large;
  large.spans = 6;
  large.max_length = 80;
  large.r_max = 64;
  large.head_dim = 128;
  const ZoomLayer large_layer = MakeZoomLayer(2000, large);
  const ZoomCase large_cases[] = {
      {"large bases: kToken, F32 rows, pinned bases", true, 40, 3.0f, KvType::kF32, 0.1f, 0.1f,
       true, true, true},
      {"large bases: kSpan, BF16 rows, device bases", false, 150, 1.0f, KvType::kBf16, 0.1f, 0.1f,
       false, true, true},
  };
  for (const ZoomCase& c : large_cases) {
    const ZoomReach reach = CheckSekvZoom(large_layer, c);
    CHECK(reach.rank == 64);  // a candidate's key basis fills the staging space alone
  }

  ZoomShape many;
  many.spans = 1800;
  many.max_length = 3;
  many.r_max = 2;
  many.head_dim = 8;
  ZoomLayer many_layer = MakeZoomLayer(3000, many);
  // The spans of one thread (0, 256, ..., 1792) first in the walk: it holds its 4 largest keys,
  // so taking more than 4 makes it look through its spans again.
  for (size_t gs = 0; gs < many_layer.alpha.size(); ++gs) {
    const int s = static_cast<int>(gs % many.spans);
    float& a = many_layer.alpha[gs];
    a = s % 256 == 0 ? 0.95f + 0.001f * static_cast<float>(s / 256) : 0.9f * a;
  }
  const ZoomCase many_cases[] = {
      {"many spans: kToken, 40 of 900 candidate tokens", true, 40, 22.5f, KvType::kF32, 0.05f,
       0.05f, true, true, true},
      {"many spans: kSpan, 1000 tokens", false, 1000, 1.0f, KvType::kF32, 0.05f, 0.05f, false,
       false, true},
  };
  const ZoomReach by_token = CheckSekvZoom(many_layer, many_cases[0]);
  CHECK(by_token.candidates > 256);  // the block's 256 threads: several rounds of each scan
  CHECK(by_token.one_thread > 4);
  CHECK(by_token.scored > 256);
  const ZoomReach by_span = CheckSekvZoom(many_layer, many_cases[1]);
  CHECK(by_span.candidates > 256);
  CHECK(by_span.rows > 256);
  CHECK(by_span.one_thread > 4);
}

TEST_CASE("CUDA SekvZoom refuses a candidate budget over kMaxZoomCandidates or a short workspace",
          "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  const int hd = kZoomHeadDim, budget = 4;
  DeviceArray<float> q_dev(RandomFloats(kZoomHeads * hd, 1100)), lse_dev(kZoomHeads);
  DeviceArray<float> tau_dev(std::vector<float>(kZoomKvHeads, 0.5f));
  DeviceArray<float> out_k(kZoomKvHeads * budget * hd), out_v(kZoomKvHeads * budget * hd);
  DeviceArray<cuda::AttentionSegment> expansion(kZoomKvHeads);
  DeviceArray<int64_t> stats_dev(std::vector<int64_t>(4 * kZoomKvHeads, 0));
  DeviceArray<float> scratch(1);  // no spans: the per-span arrays are never read
  DeviceArray<int32_t> rem_dev(1);
  DeviceArray<uint8_t> skip_dev(1);
  DeviceArray<cuda::SpanBasisRef> refs_dev(1);
  const int64_t limit_bytes = cuda::SekvZoomWorkspaceBytes(kZoomKvHeads, cuda::kMaxZoomCandidates);
  REQUIRE(limit_bytes >= cuda::SekvZoomWorkspaceBytes(kZoomKvHeads, 40));
  DeviceArray<int32_t> ws(static_cast<size_t>(limit_bytes / sizeof(int32_t)));
  auto zoom = [&](int candidate_budget, int64_t ws_bytes, void* workspace) {
    cuda::ZoomParams params;
    params.budget = budget;
    params.candidate_budget = candidate_budget;
    return cuda::SekvZoom(q_dev.get(), lse_dev.get(), scratch.get(), tau_dev.get(), rem_dev.get(),
                          scratch.get(), refs_dev.get(), nullptr, 0, kZoomHeads, kZoomKvHeads, hd,
                          params, out_k.get(), out_v.get(), cuda::KvType::kF32, expansion.get(), 1,
                          scratch.get(), skip_dev.get(), stats_dev.get(), workspace, ws_bytes,
                          nullptr);
  };
  const int64_t need = cuda::SekvZoomWorkspaceBytes(kZoomKvHeads, 40);
  const std::pair<const char*, absl::Status> refused[] = {
      {"candidate budget kMaxZoomCandidates + 1",
       zoom(cuda::kMaxZoomCandidates + 1, limit_bytes, ws.get())},
      {"workspace one int short", zoom(40, need - 4, ws.get())},
      {"no workspace", zoom(40, need, nullptr)},
  };
  for (const auto& [what, status] : refused) {
    INFO(what << ": " << status);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  }
  RequireSynced();
  CHECK(stats_dev.ToHost() == std::vector<int64_t>(4 * kZoomKvHeads, 0));  // nothing ran
  // At the limit it runs: no span, so one routing round and no row per KV head.
  RequireOk(zoom(cuda::kMaxZoomCandidates, limit_bytes, ws.get()));
  RequireSynced();
  const std::vector<int64_t> want = {1, 0, 0, 0, 1, 0, 0, 0};
  CHECK(stats_dev.ToHost() == want);
  for (const cuda::AttentionSegment& e : expansion.ToHost()) CHECK(e.rows == 0);
}

}  // namespace scd
