// The calibration math: reduced-rank regression recovers a planted low-rank map and reports
// its own error exactly; the patch aligner improves on its linear start when the true map is
// nonlinear; artifacts round-trip through disk and refuse the wrong pair.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "common/scd/artifact.h"
#include "common/scd/patch_aligner.h"
#include "common/scd/reduced_rank.h"
#include "tests/scd/gaussian.h"
#include "tests/test_support.h"

namespace scd {

TEST_CASE("Reduced-rank regression recovers a planted rank-r map", "[cpu]") {
  std::mt19937 rng(3);
  const int n = 4000, p = 12, q = 10, r = 3;
  auto x = testing::Gaussian(n * p, rng);
  auto u = testing::Gaussian(p * r, rng), v = testing::Gaussian(r * q, rng);
  std::vector<float> y(n * q, 0.5f);  // mean offset 0.5
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < q; ++j)
      for (int a = 0; a < r; ++a) {
        float xa = 0;
        for (int b = 0; b < p; ++b) xa += x[i * p + b] * u[b * r + a];
        y[i * q + j] += xa * v[a * q + j];
      }
  CrossMoments m(p, q);
  m.Add(x.data(), y.data(), n / 2);
  m.Add(x.data() + (n / 2) * p, y.data() + (n / 2) * q, n - n / 2);  // streaming
  FitReport rep;
  auto code = m.Fit(r, 1e-9, &rep);
  REQUIRE(code.ok());
  CHECK(rep.relative_error < 1e-6);
  CHECK(rep.energy_kept == Approx(1.0).margin(1e-6));
  std::vector<float> z(n * r), yh(n * q);
  code->Encode(x.data(), n, z.data());
  code->Decode(z.data(), n, yh.data());
  double err = 0;
  for (int i = 0; i < n * q; ++i) err = std::max(err, double(std::abs(yh[i] - y[i])));
  CHECK(err < 1e-3);

  // At a lower rank the reported error equals the measured one.
  auto low = m.Fit(1, 1e-9, &rep);
  REQUIRE(low.ok());
  std::vector<float> z1(n), y1(n * q);
  low->Encode(x.data(), n, z1.data());
  low->Decode(z1.data(), n, y1.data());
  double sse = 0, sst = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < q; ++j) {
      double mean = 0;
      for (int k = 0; k < n; ++k) mean += y[k * q + j];
      (void)mean;
    }
  std::vector<double> mu(q, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < q; ++j) mu[j] += y[i * q + j] / n;
  for (int i = 0; i < n * q; ++i) {
    sse += std::pow(y1[i] - y[i], 2);
    sst += std::pow(y[i] - mu[i % q], 2);
  }
  CHECK(rep.relative_error == Approx(sse / sst).epsilon(1e-3));
  CHECK(rep.relative_error > 0.05);
  CHECK(!m.Fit(0, 1e-9).ok());
  CHECK(!m.Fit(11, 1e-9).ok());
}

TEST_CASE("The patch aligner learns a nonlinear map its linear skip cannot", "[cpu]") {
  std::mt19937 rng(5);
  const int n = 6000, d = 8, r = 4, g = 6;
  auto hp = testing::Gaussian(n * d, rng);
  std::vector<float> hc(n * d);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < d; ++j) {
      const float a = hp[i * d + (j % r)];
      hc[i * d + j] = a + 0.8f * std::tanh(2 * a) * (j % 2 ? 1.f : -1.f) + 0.3f * a * a;
    }
  CrossMoments m(d, d);
  m.Add(hp.data(), hc.data(), n);
  auto code = m.Fit(r, 1e-6);
  REQUIRE(code.ok());
  std::vector<float> z(n * r);
  code->Encode(hp.data(), n, z.data());
  auto gmat = testing::Gaussian(g * d, rng);
  AlignerTrainOptions o;
  o.hidden_dim = 32;
  o.steps = 800;
  AlignerReport rep;
  auto f = TrainPatchAligner(z, hc, n, *code, gmat, g, o, &rep);
  REQUIRE(f.ok());
  INFO("linear " << rep.linear_loss << " trained " << rep.trained_loss);
  CHECK(rep.trained_loss < 0.5 * rep.linear_loss);
  CHECK(rep.linear_loss < rep.target_energy);
}

TEST_CASE("Artifacts round-trip through disk and check their pair", "[cpu]") {
  std::mt19937 rng(9);
  ScdArtifact a;
  a.producer_digest = "aaaa";
  a.consumer_digest = "bbbb";
  a.producer_name = "p";
  a.consumer_name = "c";
  a.num_layers = 2;
  a.hidden_size = 6;
  a.kv_dim = 4;
  a.rank_k = 2;
  a.rank_v = 3;
  a.rank_h = 2;
  auto code = [&](int in, int r, int out) {
    LinearCode c;
    c.in_dim = in, c.rank = r, c.out_dim = out;
    c.mu_in = testing::Gaussian(in, rng);
    c.encoder = testing::Gaussian(in * r, rng);
    c.decoder = testing::Gaussian(r * out, rng);
    c.mu_out = testing::Gaussian(out, rng);
    return c;
  };
  a.reuse = {{code(4, 2, 4), code(4, 3, 4)}, {code(4, 2, 4), code(4, 3, 4)}};
  PatchLayer pl;
  pl.code = code(6, 2, 6);
  pl.aligner = {2,
                5,
                6,
                testing::Gaussian(12, rng),
                testing::Gaussian(6, rng),
                testing::Gaussian(10, rng),
                testing::Gaussian(5, rng),
                testing::Gaussian(30, rng),
                testing::Gaussian(6, rng)};
  a.patches[1] = pl;
  a.patch_order = {1};
  a.patch_budget = 1;
  a.recompute_first = 0;
  a.recompute_end = 1;
  a.report = {{"note", "test"}};
  const std::string path = testing::TempDir() + "/a.safetensors";
  REQUIRE(a.Save(path).ok());
  auto b = ScdArtifact::Load(path);
  INFO(b.status());
  REQUIRE(b.ok());
  CHECK(b->id == a.id);
  CHECK(b->reuse[1].value.decoder == a.reuse[1].value.decoder);
  CHECK(b->patches.at(1).aligner.w2 == pl.aligner.w2);
  CHECK(b->PatchLayers() == std::vector<int>{1});
  CHECK(b->report["note"] == "test");

  Model wrong;
  wrong.set_digest("cccc");
  wrong.config.name = "other";
  auto st = b->CheckPair(nullptr, &wrong);
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(st.message().find("other") != absl::string_view::npos);

  // Truncated artifact files are errors, not crashes.
  std::string bytes = testing::ReadFileOrFail(path);
  const std::string cut = testing::TempDir() + "/cut.safetensors";
  FILE* f = fopen(cut.c_str(), "wb");
  fwrite(bytes.data(), 1, bytes.size() / 2, f);
  fclose(f);
  CHECK(!ScdArtifact::Load(cut).ok());
}

}  // namespace scd
