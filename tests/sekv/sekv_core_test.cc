// SEKV building blocks: segmentation invariants, SVD energy rank, summary math, mixed
// attention (one softmax, log|S| correction), routing selection, memory accounting and the
// budget planner.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "common/base/random.h"
#include "common/sekv/budget_plan.h"
#include "common/sekv/chunk_cache.h"
#include "common/sekv/low_rank.h"
#include "common/sekv/mixed_attention.h"
#include "common/sekv/sekv_cache.h"
#include "common/sekv/span_store.h"
#include "common/sekv/surprisal_segmenter.h"
#include "common/sekv/zoom_router.h"
#include "tests/sekv/sekv_test_support.h"

namespace scd::sekv {
namespace {

using testing::Normal;

std::vector<float> Surprisal(int t, uint64_t seed) {
  std::vector<float> s(t);
  FillUniform(s.data(), t, seed, 0.0f, 1.0f);
  for (float& x : s) x = -std::log(1.0f - x) * 2.0f;  // exponential, mean 2
  s[0] = 0;
  return s;
}

void CheckPartition(const Segmentation& seg) {
  std::vector<int> cover(seg.num_tokens, 0);
  for (int a : seg.anchors) ++cover[a];
  for (const TokenSpan& s : seg.spans) {
    REQUIRE(s.length() > 0);
    for (int i = s.begin; i < s.end; ++i) ++cover[i];
  }
  for (int i = seg.window_begin; i < seg.num_tokens; ++i) ++cover[i];
  for (int i = 0; i < seg.num_tokens; ++i) REQUIRE(cover[i] == 1);
  REQUIRE(std::is_sorted(seg.anchors.begin(), seg.anchors.end()));
}

TEST_CASE("segmentation partitions the prompt with anchors at surprisal peaks", "[cpu]") {
  for (int t : {1, 5, 40, 300}) {
    SegmenterOptions o;
    o.alpha = 1.0f;
    o.min_span = 4;
    o.window = 16;
    auto seg_or = SurprisalSegmenter::Create(o);
    REQUIRE(seg_or.ok());
    const auto s = Surprisal(t, 7 + t);
    const Segmentation seg = seg_or->Segment(s);
    CheckPartition(seg);
    REQUIRE(seg.window_length() == std::min(t - std::min(t, 1), 16));
    int prev = 0;
    for (size_t i = 1; i < seg.anchors.size(); ++i) {
      const int a = seg.anchors[i];
      REQUIRE(s[a] > seg.threshold);        // a boundary is a surprisal peak
      REQUIRE(a - prev - 1 >= o.min_span);  // and respects the minimum span length
      prev = a;
    }
    // Spans between two anchors are at least min_span long.
    for (const TokenSpan& sp : seg.spans) {
      const bool before_anchor =
          std::find(seg.anchors.begin(), seg.anchors.end(), sp.end) != seg.anchors.end();
      if (before_anchor) REQUIRE(sp.length() >= o.min_span);
    }
  }
  SECTION("max_span cuts long spans") {
    SegmenterOptions o;
    o.alpha = 100.0f;  // no boundaries at all
    o.max_span = 10;
    o.window = 8;
    const auto seg = SurprisalSegmenter::Create(o)->Segment(Surprisal(100, 3));
    CheckPartition(seg);
    REQUIRE(seg.anchors.size() == 1);  // the sink only
    for (const TokenSpan& sp : seg.spans) REQUIRE(sp.length() <= 10);
  }
  SECTION("invalid options are errors") {
    SegmenterOptions o;
    o.min_span = 0;
    REQUIRE(!SurprisalSegmenter::Create(o).ok());
    o.min_span = 4;
    o.max_span = 2;
    REQUIRE(!SurprisalSegmenter::Create(o).ok());
  }
}

TEST_CASE("truncated SVD keeps the smallest rank that holds the energy share", "[cpu]") {
  const int n = 12, d = 8;
  SECTION("exact rank-2 data needs rank 2, and rebuilds exactly") {
    const auto a = Normal(n * 2, 1), b = Normal(2 * d, 2);
    std::vector<float> x(n * d, 0.0f);
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < d; ++c) x[i * d + c] = a[i * 2] * b[c] + a[i * 2 + 1] * b[d + c];
    const LowRankBasis lr = TruncatedSvd(x.data(), n, d, d, 0.9999, 32);
    REQUIRE(lr.rank == 2);
    std::vector<float> y(n * d);
    lr.Reconstruct(y.data(), d);
    for (int i = 0; i < n * d; ++i) REQUIRE(y[i] == Approx(x[i]).margin(1e-4));
  }
  SECTION("rank follows the spectrum, capped at r_max") {
    const auto x = Normal(n * d, 3);
    // Singular values from the Gram eigenvalues, to check the rank rule independently.
    std::vector<double> g(d * d, 0.0), lam, vec;
    for (int i = 0; i < d; ++i)
      for (int j = 0; j < d; ++j)
        for (int r = 0; r < n; ++r) g[i * d + j] += double(x[r * d + i]) * x[r * d + j];
    SymmetricEigenJacobi(g, d, &lam, &vec);
    const double total = std::accumulate(lam.begin(), lam.end(), 0.0);
    for (double e : {0.5, 0.8, 0.95}) {
      int want = 0;
      double kept = 0;
      while (kept < e * total) kept += lam[want++];
      const LowRankBasis lr = TruncatedSvd(x.data(), n, d, d, e, 32);
      REQUIRE(lr.rank == want);
      REQUIRE(lr.energy_kept >= e);
      // The reconstruction error is exactly the dropped energy.
      std::vector<float> y(n * d);
      lr.Reconstruct(y.data(), d);
      double err = 0;
      for (int i = 0; i < n * d; ++i) err += (y[i] - x[i]) * double(y[i] - x[i]);
      REQUIRE(err == Approx(total - kept).epsilon(1e-3).margin(1e-4));
    }
    REQUIRE(TruncatedSvd(x.data(), n, d, d, 1.0, 3).rank == 3);
    // Tall and wide inputs take different Gram sides; both are exact at full energy.
    const auto wide = Normal(4 * d, 4);
    const LowRankBasis lw = TruncatedSvd(wide.data(), 4, d, d, 1.0, 32);
    REQUIRE(lw.rank == 4);
    std::vector<float> y(4 * d);
    lw.Reconstruct(y.data(), d);
    for (int i = 0; i < 4 * d; ++i) REQUIRE(y[i] == Approx(wide[i]).margin(1e-4));
  }
}

// X's rank-r truncated SVD from the textbook formulas (the Gram matrix summed entry by entry,
// SymmetricEigen, the projections one sum at a time), as singular values and the projection
// X V_r V_rᵀ, which do not depend on the eigenvectors' signs.
struct TextbookSvd {
  std::vector<double> sigma;       // all min(n, d), descending
  std::vector<double> projection;  // [n, d], rank r
};
TextbookSvd Textbook(const float* x, int n, int d, int stride, int r) {
  const bool by_rows = n <= d;
  const int m = by_rows ? n : d;
  std::vector<double> g(static_cast<size_t>(m) * m, 0.0), lam, vec;
  auto xe = [&](int i, int c) { return double(x[static_cast<size_t>(i) * stride + c]); };
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j)
      for (int k = 0; k < (by_rows ? d : n); ++k)
        g[i * m + j] += by_rows ? xe(i, k) * xe(j, k) : xe(k, i) * xe(k, j);
  SymmetricEigenJacobi(g, m, &lam, &vec);
  TextbookSvd t;
  for (double l : lam) t.sigma.push_back(std::sqrt(std::max(l, 0.0)));
  // The right singular vectors V_r [d, r].
  std::vector<double> v(static_cast<size_t>(d) * r, 0.0);
  for (int j = 0; j < r; ++j) {
    for (int c = 0; c < d; ++c) {
      if (by_rows) {
        for (int i = 0; i < n; ++i) v[c * r + j] += xe(i, c) * vec[i * m + j] / t.sigma[j];
      } else {
        v[c * r + j] = vec[c * m + j];
      }
    }
  }
  t.projection.assign(static_cast<size_t>(n) * d, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < r; ++j) {
      double xv = 0;
      for (int c = 0; c < d; ++c) xv += xe(i, c) * v[c * r + j];
      for (int c = 0; c < d; ++c) t.projection[i * d + c] += xv * v[c * r + j];
    }
  }
  return t;
}

// Keys of similar tokens: a rank-3 signal over `rows` rows of `stride` floats (each head of
// `d` columns the same signal) with a little of `noise` added.
std::vector<float> RankThreeKeys(const std::vector<float>& noise, int rows, int d, int stride) {
  const auto a = Normal(rows * 3, 92), b = Normal(3 * d, 93);
  std::vector<float> low(noise.size());
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < stride; ++c)
      low[i * stride + c] = a[i * 3] * b[c % d] + a[i * 3 + 1] * b[d + c % d] +
                            a[i * 3 + 2] * b[2 * d + c % d] + 0.01f * noise[i * stride + c];
  return low;
}

// Through an arena, TruncatedSvd gives `lr`'s floats, in the arena, within MaxBasisFloats.
void CheckArenaBasis(const float* block, int n, int d, int stride, const LowRankBasis& lr) {
  BasisArena arena;
  const LowRankBasis la = TruncatedSvd(block, n, d, stride, 0.99, 16, &arena);
  REQUIRE(la.owned == nullptr);
  REQUIRE(la.rank == lr.rank);
  REQUIRE(std::equal(la.us, la.us + la.us_size(), lr.us));
  REQUIRE(std::equal(la.vt, la.vt + la.vt_size(), lr.vt));
  REQUIRE(arena.allocated() == la.us_size() + la.vt_size());
  REQUIRE(arena.allocated() <= MaxBasisFloats(n, d, 16));
  const std::vector<BasisArena::Block> blocks = arena.blocks();
  REQUIRE(blocks.size() == 1);
  REQUIRE(blocks[0].data == la.us);
  REQUIRE(blocks[0].floats == arena.allocated());
}

// `lr` (energy 0.99, rank at most 16) against the textbook SVD of the same block: its rank,
// energy, orthogonal factors and rebuilt block.
void CheckAgainstTextbook(const float* block, int n, int d, int stride, const LowRankBasis& lr) {
  const TextbookSvd t = Textbook(block, n, d, stride, lr.rank);
  // The rank rule on the textbook spectrum, unless the cut falls within rounding.
  double total = 0, kept = 0;
  for (double s : t.sigma) total += s * s;
  int want = 0;
  while (want < 16 && want < int(t.sigma.size()) && kept < 0.99 * total) {
    kept += t.sigma[want] * t.sigma[want];
    ++want;
  }
  if (std::fabs(kept - 0.99 * total) > 1e-6 * total) REQUIRE(lr.rank == want);
  REQUIRE(lr.energy_kept == Approx(kept / total).epsilon(1e-9));
  // Vᵀ's rows are orthonormal, UΣ's columns are orthogonal with norms σ.
  for (int j = 0; j < lr.rank; ++j) {
    for (int k = j; k < lr.rank; ++k) {
      double vv = 0, uu = 0;
      for (int c = 0; c < d; ++c) vv += double(lr.vt[j * d + c]) * lr.vt[k * d + c];
      for (int i = 0; i < n; ++i) uu += double(lr.us[i * lr.rank + j]) * lr.us[i * lr.rank + k];
      REQUIRE(vv == Approx(j == k ? 1.0 : 0.0).margin(1e-5));
      const double s2 = j == k ? t.sigma[j] * t.sigma[j] : 0.0;
      REQUIRE(uu == Approx(s2).margin(1e-5 * total));
    }
  }
  // The rebuilt block is X's projection on its top singular directions.
  std::vector<float> y(static_cast<size_t>(n) * d);
  lr.Reconstruct(y.data(), d);
  const double scale = std::sqrt(total / (n * d));
  for (size_t i = 0; i < y.size(); ++i)
    REQUIRE(y[i] == Approx(t.projection[i]).margin(1e-5 * scale));
}

TEST_CASE("TruncatedSvd at SEKV's shapes agrees with the textbook SVD", "[cpu]") {
  // One KV head of a 4-head cache (head_dim 36, so row stride 144), spans of 1 token to
  // several times head_dim: both Gram sides, Jacobi and QL orders. Full-rank noise, and a
  // rank-3 signal with a little noise, as keys of similar tokens look.
  const int d = 36, stride = 4 * d, rows = 200;
  const auto noise = Normal(static_cast<size_t>(rows) * stride, 91);
  const std::vector<float> low = RankThreeKeys(noise, rows, d, stride);
  const std::vector<float>* inputs[] = {&noise, &low};
  for (const std::vector<float>* x : inputs) {
    for (const int n : {1, 5, kJacobiMaxOrder, kJacobiMaxOrder + 1, 20, d, d + 1, 3 * d}) {
      const float* block = x->data() + 2 * stride + d;  // from row 2, head 1
      const LowRankBasis lr = TruncatedSvd(block, n, d, stride, 0.99, 16);
      INFO("n " << n << (x == &low ? ", rank-3 signal" : ", noise") << ", rank " << lr.rank);
      REQUIRE(lr.rows == n);
      REQUIRE(lr.cols == d);
      REQUIRE(lr.us_size() == size_t(n) * lr.rank);
      REQUIRE(lr.vt_size() == size_t(lr.rank) * d);
      REQUIRE(lr.owned != nullptr);  // no arena: the basis holds its floats
      CheckArenaBasis(block, n, d, stride, lr);
      CheckAgainstTextbook(block, n, d, stride, lr);
    }
  }
  SECTION("a zero block, and a block of one row repeated") {
    std::vector<float> x(static_cast<size_t>(20) * d, 0.0f);
    const LowRankBasis zero = TruncatedSvd(x.data(), 20, d, d, 0.99, 16);
    REQUIRE(zero.energy_kept == 1.0);
    std::vector<float> y(x.size(), 1.0f);
    zero.Reconstruct(y.data(), d);
    for (float v : y) REQUIRE(v == 0.0f);
    for (int i = 0; i < 20; ++i) std::copy(noise.begin(), noise.begin() + d, x.begin() + i * d);
    for (const int n : {6, 20}) {  // Jacobi and QL
      const LowRankBasis one = TruncatedSvd(x.data(), n, d, d, 1.0, 16);
      REQUIRE(one.rank == 1);
      one.Reconstruct(y.data(), d);
      for (int i = 0; i < n * d; ++i) REQUIRE(y[i] == Approx(x[i]).margin(1e-5));
    }
  }
  SECTION("the working memory a thread keeps does not leak from one call into the next") {
    // The same calls, in another order and on a fresh thread, give the same bases bit for bit.
    const std::vector<int> sizes = {3 * d, 5, d + 1, 1, 20, kJacobiMaxOrder};
    std::vector<LowRankBasis> here;
    for (int n : sizes) here.push_back(TruncatedSvd(low.data() + d, n, d, stride, 0.99, 16));
    std::vector<LowRankBasis> there(sizes.size());
    std::thread([&] {
      for (size_t i = sizes.size(); i-- > 0;)
        there[i] = TruncatedSvd(low.data() + d, sizes[i], d, stride, 0.99, 16);
    }).join();
    for (size_t i = 0; i < sizes.size(); ++i) {
      REQUIRE(here[i].rank == there[i].rank);
      REQUIRE(std::equal(here[i].us, here[i].us + here[i].us_size(), there[i].us));
      REQUIRE(std::equal(here[i].vt, here[i].vt + here[i].vt_size(), there[i].vt));
    }
  }
}

TEST_CASE("BasisArena hands out floats in order and lists the used part of each block", "[cpu]") {
  BasisArena arena;
  REQUIRE(arena.blocks().empty());
  arena.Reserve(10);
  REQUIRE(arena.blocks().empty());  // nothing handed out yet
  float* a = arena.Allocate(6);
  float* b = arena.Allocate(4);
  REQUIRE(b == a + 6);           // the reservation, in order
  float* c = arena.Allocate(3);  // does not fit: a new block (of 4 MB)
  arena.Reserve(5);              // fits in that block
  REQUIRE(arena.Allocate(1) == c + 3);
  arena.Reserve(size_t{2} << 20);  // 8 MB: a block that stays unused, as ...
  arena.Reserve(size_t{3} << 20);  // ... this one does not fit in it
  float* d = arena.Allocate(2);
  REQUIRE(arena.allocated() == 16);
  const std::vector<BasisArena::Block> blocks = arena.blocks();
  REQUIRE(blocks.size() == 3);
  CHECK(blocks[0].data == a);
  CHECK(blocks[0].floats == 10);
  CHECK(blocks[1].data == c);
  CHECK(blocks[1].floats == 4);
  CHECK(blocks[2].data == d);
  CHECK(blocks[2].floats == 2);
  for (const BasisArena::Block& x : blocks) {
    CHECK(reinterpret_cast<uintptr_t>(x.data) % 4096 == 0);  // pages of their own
  }
  std::fill(a, a + 10, 1.0f);  // every float handed out is writable
  std::fill(c, c + 4, 2.0f);
  std::fill(d, d + 2, 3.0f);
  REQUIRE(arena.Allocate(0) == nullptr);
  REQUIRE(arena.blocks().size() == 3);
}

TEST_CASE("SymmetricEigen (tridiagonal QL above kJacobiMaxOrder) agrees with Jacobi", "[cpu]") {
  for (const int n : {5, kJacobiMaxOrder, kJacobiMaxOrder + 1, 16, 40, 64, 128}) {
    INFO("order " << n);
    // A Gram matrix of 2n random rows (positive definite), a rank-deficient one of n / 2 rows
    // (a span shorter than head_dim, seen from the d side: repeated zero eigenvalues), and
    // one that is already diagonal in its lower rows (reflections skipped).
    for (const int rows : {2 * n, std::max(1, n / 2), -1}) {
      std::vector<double> g(static_cast<size_t>(n) * n, 0.0);
      if (rows > 0) {
        const auto x = Normal(static_cast<size_t>(rows) * n, 40 + n + rows);
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n; ++j)
            for (int r = 0; r < rows; ++r) g[i * n + j] += double(x[r * n + i]) * x[r * n + j];
      } else {
        const auto x = Normal(static_cast<size_t>(n) * 3, 7 + n);
        for (int i = 0; i < n; ++i) g[i * n + i] = 4 + x[i];
        for (int j = 1; j < 3 && j < n; ++j) g[j] = g[j * n] = x[n + j];  // first row only
      }
      std::vector<double> lam, vec, lam_j, vec_j;
      SymmetricEigen(g, n, &lam, &vec);
      SymmetricEigenJacobi(g, n, &lam_j, &vec_j);
      REQUIRE(lam.size() == size_t(n));
      REQUIRE(vec.size() == size_t(n) * n);
      const double scale = std::max(std::fabs(lam_j[0]), std::fabs(lam_j[n - 1]));
      for (int j = 0; j < n; ++j) {
        REQUIRE(std::fabs(lam[j] - lam_j[j]) <= 1e-10 * scale);
        if (j > 0) REQUIRE(lam[j] <= lam[j - 1]);
      }
      // V Λ Vᵀ = G and Vᵀ V = I.
      double rebuild = 0, ortho = 0;
      for (int i = 0; i < n; ++i) {
        for (int k = 0; k < n; ++k) {
          double a = 0, o = 0;
          for (int j = 0; j < n; ++j) {
            a += vec[i * n + j] * lam[j] * vec[k * n + j];
            o += vec[j * n + i] * vec[j * n + k];
          }
          rebuild = std::max(rebuild, std::fabs(a - g[i * n + k]));
          ortho = std::max(ortho, std::fabs(o - (i == k ? 1.0 : 0.0)));
        }
      }
      REQUIRE(rebuild <= 1e-10 * scale);
      REQUIRE(ortho <= 1e-10);
      // Each eigenvector of a well separated eigenvalue is Jacobi's up to sign.
      for (int j = 0; j < n; ++j) {
        const double gap = std::min(j > 0 ? lam_j[j - 1] - lam_j[j] : scale,
                                    j + 1 < n ? lam_j[j] - lam_j[j + 1] : scale);
        if (gap < 1e-6 * scale) continue;
        double dot = 0;
        for (int i = 0; i < n; ++i) dot += vec[i * n + j] * vec_j[i * n + j];
        REQUIRE(std::fabs(std::fabs(dot) - 1.0) <= 1e-8);
      }
    }
  }
}

// Each span's summary is the surprisal-weighted mean of its keys and the plain mean of its
// values, with the log of its length beside.
void CheckSpanSummaries(const SpanStore& st, const Segmentation& seg, const std::vector<float>& s,
                        const std::vector<float>& k, const std::vector<float>& v, int kvd) {
  for (int sp = 0; sp < st.num_spans(); ++sp) {
    const TokenSpan span = seg.spans[sp];
    double wsum = 0;
    for (int i = span.begin; i < span.end; ++i) wsum += std::max(s[i], 1e-3f);
    for (int c = 0; c < kvd; ++c) {
      double kk = 0, vv = 0;
      for (int i = span.begin; i < span.end; ++i) {
        kk += std::max(s[i], 1e-3f) / wsum * k[i * kvd + c];
        vv += v[i * kvd + c] / span.length();
      }
      REQUIRE(st.summary_k()[sp * kvd + c] == Approx(kk).margin(1e-5));
      REQUIRE(st.summary_v()[sp * kvd + c] == Approx(vv).margin(1e-5));
    }
    REQUIRE(st.log_span_length()[sp] == Approx(std::log(float(span.length()))));
  }
}

// The CPU tier's bases live in the store's arena, whose blocks hold every factor and nothing
// else, and Memory() counts their bytes.
void CheckBasisArena(const SpanStore& st, int heads) {
  const MemoryBreakdown m = st.Memory();
  REQUIRE(m.cpu_bases > 0);
  size_t basis_bytes = 0;
  for (int sp = 0; sp < st.num_spans(); ++sp) {
    for (int h = 0; h < heads; ++h) {
      basis_bytes += st.key_basis(sp, h).bytes() + st.value_basis(sp, h).bytes();
      REQUIRE(st.key_basis(sp, h).owned == nullptr);  // in the store's arena
    }
  }
  REQUIRE(m.cpu_bases == basis_bytes);
  const std::vector<BasisArena::Block> blocks = st.basis_blocks();
  size_t block_floats = 0;
  for (const BasisArena::Block& b : blocks) block_floats += b.floats;
  REQUIRE(block_floats * sizeof(float) == basis_bytes);
  auto in_blocks = [&](const float* p, size_t n) {
    return std::any_of(blocks.begin(), blocks.end(), [&](const BasisArena::Block& b) {
      return p >= b.data && p + n <= b.data + b.floats;
    });
  };
  for (int sp = 0; sp < st.num_spans(); ++sp) {
    for (int h = 0; h < heads; ++h) {
      for (const LowRankBasis* b : {&st.key_basis(sp, h), &st.value_basis(sp, h)}) {
        REQUIRE(in_blocks(b->us, b->us_size()));
        REQUIRE(in_blocks(b->vt, b->vt_size()));
      }
    }
  }
}

TEST_CASE("span store: summaries, tiers and memory accounting", "[cpu]") {
  const int t = 40, heads = 2, hd = 4, kvd = heads * hd;
  const auto k = Normal(t * kvd, 11), v = Normal(t * kvd, 12);
  auto s = Surprisal(t, 13);
  Segmentation seg;
  seg.num_tokens = t;
  seg.anchors = {0, 10};
  seg.spans = {{1, 10}, {11, 30}};
  seg.window_begin = 30;
  SpanStoreOptions o;
  o.energy = 1.0;
  SpanStore st = SpanStore::Build(k.data(), v.data(), s, seg, heads, hd, o);
  REQUIRE(st.num_anchors() == 2);
  REQUIRE(st.num_spans() == 2);
  REQUIRE(st.window_rows() == 10);
  CheckSpanSummaries(st, seg, s, k, v, kvd);
  // CPU tier at full energy rebuilds the span exactly.
  std::vector<float> rk(19 * hd), rv(19 * hd);
  st.Rebuild(1, 1, rk.data(), rv.data());
  for (int i = 0; i < 19; ++i)
    for (int c = 0; c < hd; ++c) {
      REQUIRE(rk[i * hd + c] == Approx(k[(11 + i) * kvd + hd + c]).margin(1e-4));
      REQUIRE(rv[i * hd + c] == Approx(v[(11 + i) * kvd + hd + c]).margin(1e-4));
    }
  // Bytes come from the structures: 2 anchors + 2 summaries (+2 log lengths) + 10 window rows.
  const MemoryBreakdown m = st.Memory();
  REQUIRE(m.anchors == 2 * kvd * 2 * sizeof(float));
  REQUIRE(m.summaries == (2 * kvd * 2 + 2) * sizeof(float));
  REQUIRE(m.window == 10 * kvd * 2 * sizeof(float));
  REQUIRE(m.full_kv == size_t(t) * kvd * 2 * sizeof(float));
  CheckBasisArena(st, heads);
  // A store moves with its arena: the bases still rebuild the span.
  SpanStore grown = std::move(st);
  std::vector<float> again_k(19 * hd), again_v(19 * hd);
  grown.Rebuild(1, 1, again_k.data(), again_v.data());
  REQUIRE(again_k == rk);
  REQUIRE(again_v == rv);
  grown.AppendWindow(k.data(), v.data());
  REQUIRE(grown.Memory().window == 11 * kvd * 2 * sizeof(float));
  REQUIRE(grown.Memory().full_kv == size_t(t + 1) * kvd * 2 * sizeof(float));
}

TEST_CASE("mixed attention is one softmax over its blocks", "[cpu]") {
  const int d = 8, n = 37;
  const auto q = Normal(d, 21), k = Normal(n * d, 22), v = Normal(n * d, 23);
  std::vector<float> scratch, ref(d), out(d);
  const AttentionBlock all{k.data(), v.data(), n, d, nullptr};
  MixedAttention(q.data(), {&all, 1}, d, ref.data(), &scratch);
  // Reference softmax by hand.
  std::vector<double> s(n);
  double m = -1e30, sum = 0;
  for (int i = 0; i < n; ++i) {
    s[i] = 0;
    for (int c = 0; c < d; ++c) s[i] += q[c] * k[i * d + c];
    s[i] /= std::sqrt(double(d));
    m = std::max(m, s[i]);
  }
  for (int i = 0; i < n; ++i) sum += std::exp(s[i] - m);
  for (int c = 0; c < d; ++c) {
    double o = 0;
    for (int i = 0; i < n; ++i) o += std::exp(s[i] - m) / sum * v[i * d + c];
    REQUIRE(ref[c] == Approx(o).margin(1e-5));
  }
  // Split into blocks in any order: the same output.
  const AttentionBlock a{k.data(), v.data(), 10, d, nullptr};
  const AttentionBlock b{k.data() + 10 * d, v.data() + 10 * d, 20, d, nullptr};
  const AttentionBlock c{k.data() + 30 * d, v.data() + 30 * d, 7, d, nullptr};
  const AttentionBlock blocks[] = {c, a, b};
  MixedAttention(q.data(), blocks, d, out.data(), &scratch);
  for (int i = 0; i < d; ++i) REQUIRE(out[i] == Approx(ref[i]).margin(1e-6));
}

TEST_CASE("log|S| correction: a summary of identical tokens equals the expanded tokens", "[cpu]") {
  const int d = 8, len = 9;
  const auto q = Normal(d, 31), others_k = Normal(5 * d, 32), others_v = Normal(5 * d, 33);
  const auto kbar = Normal(d, 34), vbar = Normal(d, 35);
  std::vector<float> span_k, span_v;
  for (int i = 0; i < len; ++i) {
    span_k.insert(span_k.end(), kbar.begin(), kbar.end());
    span_v.insert(span_v.end(), vbar.begin(), vbar.end());
  }
  const float log_len = std::log(float(len));
  const AttentionBlock others{others_k.data(), others_v.data(), 5, d, nullptr};
  const AttentionBlock expanded{span_k.data(), span_v.data(), len, d, nullptr};
  const AttentionBlock summary{kbar.data(), vbar.data(), 1, d, &log_len};
  const AttentionBlock without_correction{kbar.data(), vbar.data(), 1, d, nullptr};
  std::vector<float> scratch, a(d), b(d), c(d);
  const AttentionBlock e1[] = {others, expanded}, e2[] = {others, summary},
                       e3[] = {others, without_correction};
  MixedAttention(q.data(), e1, d, a.data(), &scratch);
  MixedAttention(q.data(), e2, d, b.data(), &scratch);
  MixedAttention(q.data(), e3, d, c.data(), &scratch);
  double diff_without = 0;
  for (int i = 0; i < d; ++i) {
    REQUIRE(b[i] == Approx(a[i]).margin(1e-6));
    diff_without += std::fabs(c[i] - a[i]);
  }
  REQUIRE(diff_without > 1e-3);  // the correction matters
}

TEST_CASE("span selection ranks by gate and respects the token budget", "[cpu]") {
  const std::vector<float> alpha = {0.9f, 0.2f, 0.7f, 0.95f, 0.6f};
  const std::vector<int> len = {10, 5, 4, 30, 6};
  REQUIRE(SelectSpans(alpha, len, 0.5f, 20) == std::vector<int>{0, 2, 4});  // 3 does not fit
  REQUIRE(SelectSpans(alpha, len, 0.8f, 100) == std::vector<int>{3, 0});
  REQUIRE(SelectSpans(alpha, len, 0.5f, 0).empty());
  // Against the definition (stable sort by descending alpha, then greedy by fit) on random
  // gates with many ties and spans of 1 to 40 tokens, at budgets from none to all.
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const int n = 1 + static_cast<int>(seed * 37 % 300);
    std::vector<float> a(n);
    std::vector<int> l(n);
    SplitMix64 rng(seed);
    for (int s = 0; s < n; ++s) {
      a[s] = static_cast<float>(rng.NextBelow(20)) / 19.0f;  // ties
      l[s] = 1 + static_cast<int>(rng.NextBelow(40));
    }
    const float tau = static_cast<float>(seed % 5) / 5.0f;
    const int budget = static_cast<int>(seed * 13 % 400);
    std::vector<int> order;
    for (int s = 0; s < n; ++s) {
      if (a[s] > tau) order.push_back(s);
    }
    std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return a[x] > a[y]; });
    std::vector<int> want;
    int used = 0;
    for (int s : order) {
      if (used + l[s] > budget) continue;
      used += l[s];
      want.push_back(s);
    }
    INFO("seed " << seed);
    REQUIRE(SelectSpans(a, l, tau, budget) == want);
  }
  REQUIRE(Sigmoid(0.0f) == Approx(0.5f));
  // The default router's logit is the log-share minus log θ.
  const ZoomRouter r = ZoomRouter::Default(2, 2, 4, 0.1f);
  REQUIRE(r.Logit(1, 1, 0.0f, 1.0f, std::log(0.1f)) == Approx(0.0f).margin(1e-6));
  REQUIRE(r.Validate().ok());
}

TEST_CASE("budget plan fits every cache into the same GPU budget", "[cpu]") {
  const int t = 384;
  const auto s = Surprisal(t, 41);
  for (double f : {0.2, 0.4, 0.6}) {
    const BudgetPlan p = PlanBudget(s, f, SekvOptions{}, BudgetShares{}, 8);
    const Segmentation& seg = p.segmentation;
    CheckPartition(seg);
    const int count_table = (int(seg.spans.size()) + 15) / 16;  // per-head counts, head_dim 8
    const int sekv_tokens = int(seg.anchors.size() + seg.spans.size()) + seg.window_length() +
                            p.sekv.expand_budget + p.sekv.pin_tokens + count_table;
    REQUIRE(p.sekv.pin_tokens > 0);
    REQUIRE(sekv_tokens <= p.budget_tokens);
    REQUIRE(p.budget_tokens <= int(f * t));
    REQUIRE(p.h2o.budget_tokens == p.budget_tokens);
    const Segmentation chunks = ChunkSegmentation(t, p.chunk);
    CheckPartition(chunks);
    REQUIRE(int(chunks.anchors.size() + chunks.spans.size()) + chunks.window_length() <=
            p.budget_tokens);
  }
}

TEST_CASE("budget plan fits a tier's rows and overheads into the budget", "[cpu]") {
  const int t = 384;
  const auto s = Surprisal(t, 41);
  // A tier whose rows cost twice the full cache's, with counts per span, a flag per span
  // token, scratch per expansion slot and a fixed part (all in token-equivalents).
  TierOverhead tier;
  tier.row = 2;
  tier.per_span = 1.5;
  tier.per_span_token = 1.0 / 32;
  tier.per_zoom_slot = 0.5;
  tier.fixed = 0.25;
  tier.counts_included = true;
  for (double f : {0.2, 0.4, 0.6}) {
    INFO("budget " << f);
    const BudgetPlan plain = PlanBudget(s, f, SekvOptions{}, BudgetShares{}, 8);
    const BudgetPlan p = PlanBudget(s, f, SekvOptions{}, BudgetShares{}, 8, tier);
    const Segmentation& seg = p.segmentation;
    CheckPartition(seg);
    double span_tokens = 0;
    for (const TokenSpan& sp : seg.spans) span_tokens += sp.length();
    const double rows = double(seg.anchors.size() + seg.spans.size()) + seg.window_length() +
                        p.sekv.pin_tokens + p.sekv.expand_budget;
    const double cost = tier.row * rows + tier.per_span * double(seg.spans.size()) +
                        tier.per_span_token * span_tokens +
                        tier.per_zoom_slot * p.sekv.expand_budget + tier.fixed;
    CHECK(cost <= p.budget_tokens);
    CHECK(cost >= 0.8 * p.budget_tokens);               // what is left is less than a few rows
    CHECK(p.budget_tokens == plain.budget_tokens - 1);  // a tier row (2) kept in reserve
    CHECK(p.sekv.expand_budget > 0);
    // Dearer rows and overheads: fewer, longer spans and fewer zoom-in slots than the host's.
    CHECK(seg.spans.size() <= plain.segmentation.spans.size());
    CHECK(p.sekv.expand_budget + p.sekv.pin_tokens <
          plain.sekv.expand_budget + plain.sekv.pin_tokens);
  }
}

PrefixKv RandomPrefix(const CacheShape& shape, std::vector<float> surprisal, uint64_t seed) {
  PrefixKv p;
  p.num_tokens = static_cast<int>(surprisal.size());
  const size_t n = surprisal.size() * shape.kv_dim();
  for (int l = 0; l < shape.num_layers; ++l) {
    p.k.push_back(Normal(n, seed + 2 * l));
    p.v.push_back(Normal(n, seed + 2 * l + 1));
  }
  p.surprisal = std::move(surprisal);
  return p;
}

TEST_CASE("MaxHostBytes bounds the host memory of every cache the budget plan builds", "[cpu]") {
  // Random K/V: every span's bases are of full rank, the CPU tier's worst case.
  struct Shape {
    CacheShape shape;
    int r_max;
  };
  for (const Shape& sh : {Shape{{2, 4, 2, 8}, 32}, Shape{{2, 4, 2, 32}, 16}}) {
    SekvOptions o;
    o.store.r_max = sh.r_max;
    const int d = sh.shape.head_dim;
    const double full_per_token = 2.0 * sizeof(float) * sh.shape.num_layers * sh.shape.kv_dim();
    for (int t : {3, 40, 300}) {
      // Surprisal peaks at random, none at all (few long spans), and at every fourth token
      // (spans as short as min_span allows).
      std::vector<std::vector<float>> surprisals = {Surprisal(t, 43), std::vector<float>(t, 1.0f),
                                                    std::vector<float>(t, 0.1f)};
      for (int i = 0; i < t; i += 4) surprisals[2][i] = 9.0f;
      for (size_t which = 0; which < surprisals.size(); ++which) {
        for (double f : {0.1, 0.4, 0.9}) {
          for (bool device_tier : {false, true}) {
            INFO("head_dim " << d << ", " << t << " tokens, surprisal " << which << ", budget " << f
                             << (device_tier ? ", a device tier's overheads" : ""));
            TierOverhead tier;
            if (device_tier) {
              tier.per_span = 0.5;
              tier.per_zoom_slot = 0.25;
              tier.counts_included = true;
            }
            const BudgetPlan plan = PlanBudget(surprisals[which], f, o, BudgetShares{}, d, tier);
            const PrefixKv prefix = RandomPrefix(sh.shape, surprisals[which], 100 + t);
            auto cache = SekvCache::CreateWithSegmentation(sh.shape, prefix, plan.segmentation,
                                                           plan.sekv, nullptr);
            REQUIRE(cache.ok());
            const MemoryBreakdown m = (*cache)->Memory();
            const HostBound bound = MaxHostBytes(sh.shape, o, f, t);
            CHECK(m.gpu() <= bound.gpu_tier);
            CHECK(m.cpu_bases <= bound.cpu_tier);
            // Neither part is far above what the cache holds: the GPU tier's host rows are
            // about the budget's share of the full cache, the bound's at least as many.
            if (t >= 40)
              CHECK(bound.gpu_tier <= (f + 0.2) * full_per_token * t + 4 * full_per_token);
          }
        }
      }
    }
    // The CPU tier's bound is reached: spans of min(r_max, head_dim) tokens over the whole
    // prompt at full rank hold (m + d)/d times the prompt's K/V (2 at head_dim 8, 1.5 at 32).
    const int m = std::min(sh.r_max, d), t = 32 * m;
    o.store.energy = 1.0;
    const PrefixKv prefix = RandomPrefix(sh.shape, std::vector<float>(t, 1.0f), 7);
    auto cache = SekvCache::CreateWithSegmentation(
        sh.shape, prefix, testing::ChunkedSegmentation(t, m, 0, {}), o, nullptr);
    REQUIRE(cache.ok());
    const size_t cpu = (*cache)->Memory().cpu_bases;
    CHECK(cpu == MaxHostBytes(sh.shape, o, 0.4, t).cpu_tier);
    CHECK(static_cast<double>(cpu) == Approx(full_per_token * t * (m + d) / d));
  }
}

}  // namespace
}  // namespace scd::sekv
