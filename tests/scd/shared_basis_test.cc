// The shared producer basis: with one consumer the stacked fit is that pair's own reduced-rank
// regression; with two, one encoder serves both, each decoder is least squares on its codes
// (its reported error is the measured one), the codes nest, and the fit refuses statistics
// taken over different producer states.
#include "common/scd/shared_basis.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "common/scd/reduced_rank.h"
#include "tests/scd/gaussian.h"

namespace scd {
namespace {

// y = x A + noise + offset, A [p, q] of rank `rank`.
std::vector<float> PlantedTarget(const std::vector<float>& x, int n, int p, int q, int rank,
                                 std::mt19937& rng, float offset, float noise) {
  const std::vector<float> u = testing::Gaussian(static_cast<size_t>(p) * rank, rng);
  const std::vector<float> v = testing::Gaussian(static_cast<size_t>(rank) * q, rng);
  std::vector<float> y = testing::Gaussian(static_cast<size_t>(n) * q, rng, noise);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < rank; ++a) {
      float xa = 0;
      for (int b = 0; b < p; ++b) xa += x[static_cast<size_t>(i) * p + b] * u[b * rank + a];
      for (int j = 0; j < q; ++j) y[static_cast<size_t>(i) * q + j] += xa * v[a * q + j];
    }
  for (float& t : y) t += offset;
  return y;
}

// ‖ŷ − y‖² / ‖y − ȳ‖² of `code` at rank r' on the data.
double CodeError(const LinearCode& code, const std::vector<float>& x, const std::vector<float>& y,
                 int n, int use_rank = -1) {
  const int r = use_rank < 0 ? code.rank : use_rank, q = code.out_dim;
  std::vector<float> z(static_cast<size_t>(n) * r), yh(static_cast<size_t>(n) * q);
  code.Encode(x.data(), n, z.data(), r);
  code.Decode(z.data(), n, yh.data(), r);
  std::vector<double> mu(q, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < q; ++j) mu[j] += y[static_cast<size_t>(i) * q + j] / n;
  double sse = 0, sst = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    sse += std::pow(double(yh[i]) - y[i], 2);
    sst += std::pow(double(y[i]) - mu[i % q], 2);
  }
  return sse / sst;
}

TEST_CASE("With one consumer the stacked basis is that pair's own fit", "[cpu]") {
  std::mt19937 rng(11);
  const int n = 3000, p = 12, q = 10, r = 4;
  const std::vector<float> x = testing::Gaussian(static_cast<size_t>(n) * p, rng);
  const std::vector<float> y = PlantedTarget(x, n, p, q, 6, rng, 0.7f, 0.2f);
  CrossMoments m(p, q);
  m.Add(x.data(), y.data(), n);
  FitReport own_report, shared_report;
  auto own = m.Fit(r, 1e-9, &own_report);
  auto basis = FitSharedEncoder({&m}, r, 1e-9, SharedBasisKind::kStackedRrr);
  REQUIRE(own.ok());
  REQUIRE(basis.ok());
  CHECK(basis->out_dim == 0);
  CHECK(basis->decoder.empty());
  auto code = FitDecoderOnBasis(m, *basis, &shared_report);
  REQUIRE(code.ok());
  // The same fitted map E·D (the encoder's scale differs by the stacking's normalisation).
  CHECK(shared_report.relative_error == Approx(own_report.relative_error).epsilon(1e-6));
  CHECK(CodeError(*code, x, y, n) == Approx(own_report.relative_error).epsilon(1e-3));
  for (int rr = 1; rr < r; ++rr) {  // and it nests like the pair's own
    INFO("r' = " << rr);
    auto lower = m.Fit(rr, 1e-9);
    REQUIRE(lower.ok());
    CHECK(CodeError(*code, x, y, n, rr) == Approx(CodeError(*lower, x, y, n)).epsilon(1e-3));
  }
}

TEST_CASE("One encoder serves two consumers, each decoding by least squares", "[cpu]") {
  std::mt19937 rng(12);
  const int n = 4000, p = 16, q = 12, r = 5;
  // Both consumers read the same few producer directions, each in its own way, plus some of
  // their own: the stacked basis finds what they share.
  const std::vector<float> x = testing::Gaussian(static_cast<size_t>(n) * p, rng);
  std::vector<float> common = PlantedTarget(x, n, p, q, 3, rng, 0.f, 0.f);
  std::vector<float> y1 = PlantedTarget(x, n, p, q, 2, rng, 0.5f, 0.1f);
  std::vector<float> y2 = PlantedTarget(x, n, p, q, 2, rng, -0.3f, 0.1f);
  for (size_t i = 0; i < common.size(); ++i) {
    y1[i] += common[i];
    y2[i] += 0.8f * common[i];
  }
  CrossMoments m1(p, q), m2(p, q);
  m1.Add(x.data(), y1.data(), n);
  m2.Add(x.data(), y2.data(), n);
  for (SharedBasisKind kind : {SharedBasisKind::kStackedRrr, SharedBasisKind::kPca}) {
    INFO(SharedBasisKindName(kind));
    auto basis = FitSharedEncoder({&m1, &m2}, r, 1e-9, kind);
    REQUIRE(basis.ok());
    for (auto [m, y] : {std::pair{&m1, &y1}, std::pair{&m2, &y2}}) {
      FitReport shared, own;
      auto code = FitDecoderOnBasis(*m, *basis, &shared);
      REQUIRE(code.ok());
      CHECK(code->encoder == basis->encoder);  // the same codes for both
      REQUIRE(m->Fit(r, 1e-9, &own).ok());
      // The reported error is the measured one, and no better than the pair's own optimum.
      CHECK(shared.relative_error == Approx(CodeError(*code, x, *y, n)).epsilon(1e-3));
      CHECK(shared.relative_error >= own.relative_error - 1e-6);
      // Nested: each shorter code is no better than the longer one.
      double previous = 1.0 + 1e-6;
      for (int rr = 1; rr <= r; ++rr) {
        const double e = CodeError(*code, x, *y, n, rr);
        CHECK(e <= previous);
        previous = e;
      }
    }
  }
  // Stacked regression serves both better than the targets-blind PCA at this rank.
  auto stacked = FitSharedEncoder({&m1, &m2}, r, 1e-9, SharedBasisKind::kStackedRrr);
  auto pca = FitSharedEncoder({&m1, &m2}, r, 1e-9, SharedBasisKind::kPca);
  REQUIRE(stacked.ok());
  REQUIRE(pca.ok());
  FitReport s1, s2, p1, p2;
  REQUIRE(FitDecoderOnBasis(m1, *stacked, &s1).ok());
  REQUIRE(FitDecoderOnBasis(m2, *stacked, &s2).ok());
  REQUIRE(FitDecoderOnBasis(m1, *pca, &p1).ok());
  REQUIRE(FitDecoderOnBasis(m2, *pca, &p2).ok());
  CHECK(s1.relative_error + s2.relative_error < p1.relative_error + p2.relative_error);
}

TEST_CASE("A consumer fitted later on other passages decodes the basis's own codes", "[cpu]") {
  std::mt19937 rng(13);
  const int n = 3000, p = 10, q = 8, r = 4;
  std::vector<float> x = testing::Gaussian(static_cast<size_t>(n) * p, rng);
  const std::vector<float> y = PlantedTarget(x, n, p, q, 4, rng, 1.0f, 0.05f);
  CrossMoments first(p, q);
  first.Add(x.data(), y.data(), n / 2);
  auto basis = FitSharedEncoder({&first}, r, 1e-9, SharedBasisKind::kStackedRrr);
  REQUIRE(basis.ok());
  // The later consumer's passages: the second half, with the producer's mean moved.
  std::vector<float> x2(x.begin() + static_cast<size_t>(n / 2) * p, x.end());
  std::vector<float> y2(y.begin() + static_cast<size_t>(n / 2) * q, y.end());
  CrossMoments later(p, q);
  later.Add(x2.data(), y2.data(), n - n / 2);
  FitReport rep;
  auto code = FitDecoderOnBasis(later, *basis, &rep);
  REQUIRE(code.ok());
  CHECK(code->mu_in == basis->mu_in);
  CHECK(rep.relative_error < 0.05);
  CHECK(rep.relative_error == Approx(CodeError(*code, x2, y2, n - n / 2)).epsilon(1e-3));
}

TEST_CASE("A shared basis refuses statistics of other producer states", "[cpu]") {
  std::mt19937 rng(14);
  const int n = 500, p = 6, q = 6;
  const std::vector<float> x = testing::Gaussian(static_cast<size_t>(n) * p, rng);
  const std::vector<float> x_other = testing::Gaussian(static_cast<size_t>(n) * p, rng);
  const std::vector<float> y = testing::Gaussian(static_cast<size_t>(n) * q, rng);
  CrossMoments a(p, q), b(p, q), wide(p + 1, q);
  a.Add(x.data(), y.data(), n);
  b.Add(x_other.data(), y.data(), n);
  auto mixed = FitSharedEncoder({&a, &b}, 2, 1e-9, SharedBasisKind::kStackedRrr);
  REQUIRE_FALSE(mixed.ok());
  CHECK(mixed.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(mixed.status().message()), Catch::Contains("same producer and passages"));
  CHECK_FALSE(FitSharedEncoder({}, 2, 1e-9, SharedBasisKind::kPca).ok());
  CHECK_FALSE(FitSharedEncoder({&a}, 7, 1e-9, SharedBasisKind::kPca).ok());
  auto basis = FitSharedEncoder({&a}, 2, 1e-9, SharedBasisKind::kPca);
  REQUIRE(basis.ok());
  std::vector<float> xw(static_cast<size_t>(n) * (p + 1), 0.5f);
  wide.Add(xw.data(), y.data(), n);
  auto refused = FitDecoderOnBasis(wide, *basis);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(ParseSharedBasisKind("pca").value() == SharedBasisKind::kPca);
  CHECK_FALSE(ParseSharedBasisKind("svd").ok());
}

}  // namespace
}  // namespace scd
