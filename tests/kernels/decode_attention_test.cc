// Tests for kernels/cpu/decode_attention and the elementwise AVX2 loops of kernels/cpu/ops:
// a double-precision reference over odd shapes (head_dim off the vector width and past the
// 64-float chunk, key counts around the 8-key block, grouped heads, one head, a long cache),
// and the header's promises: the scalar twin and the AVX2 variant agree bit for bit, the
// thread count changes no bit, and CausalAttention's decode steps are these sums.
#include "kernels/cpu/decode_attention.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/ops.h"
#include "tests/test_support.h"

namespace scd::cpu {
namespace {

// Restores the process's ISA choice when a test that lowers it ends.
struct AttentionIsaRestorer {
  CpuIsa saved = ActiveIsa();
  ~AttentionIsaRestorer() { SetActiveIsa(saved); }
};

std::vector<float> AttentionNormal(size_t n, uint32_t seed, float sd = 1.0f) {
  return testing::NormalFloats(n, seed, sd);
}

struct DecodeShape {
  int heads, kv_heads, head_dim, keys;
};

// head_dim: one vector, a tail of 4 (the scalar loops on every ISA), 3 vectors, one 64-float
// chunk, a chunk and a vector, two chunks and one. keys: 1, around the 8-key block and the
// 16-key block, and a long cache that takes the threads.
constexpr DecodeShape kDecodeShapes[] = {
    {1, 1, 8, 1},   {4, 4, 8, 7},    {8, 4, 20, 9},    {6, 3, 24, 8},  {12, 12, 64, 17},
    {8, 2, 72, 33}, {4, 1, 136, 15}, {12, 4, 64, 300}, {2, 2, 128, 1}, {16, 8, 64, 4099}};

struct DecodeCase {
  std::vector<float> q, k, v;
  float scale;
};

DecodeCase MakeDecodeCase(const DecodeShape& s, uint32_t seed) {
  const size_t kv = static_cast<size_t>(s.keys) * s.kv_heads * s.head_dim;
  // Scores of a few units, so that the softmax is neither flat nor one-hot.
  return DecodeCase{AttentionNormal(static_cast<size_t>(s.heads) * s.head_dim, seed),
                    AttentionNormal(kv, seed + 1), AttentionNormal(kv, seed + 2),
                    1.0f / std::sqrt(static_cast<float>(s.head_dim))};
}

std::vector<float> RunDecode(const DecodeShape& s, const DecodeCase& c, int threads) {
  std::vector<float> out(static_cast<size_t>(s.heads) * s.head_dim, -1.0f);
  std::vector<float> scores(static_cast<size_t>(s.heads) * s.keys, -1.0f);
  DecodeAttention(c.q.data(), c.k.data(), c.v.data(), out.data(), s.keys, s.heads, s.kv_heads,
                  s.head_dim, c.scale, scores.data(), threads);
  return out;
}

std::vector<double> ReferenceDecode(const DecodeShape& s, const DecodeCase& c) {
  const int stride = s.kv_heads * s.head_dim, group = s.heads / s.kv_heads;
  std::vector<double> out(static_cast<size_t>(s.heads) * s.head_dim, 0.0);
  for (int h = 0; h < s.heads; ++h) {
    const size_t off = static_cast<size_t>(h / group) * s.head_dim;
    std::vector<double> w(s.keys);
    double max_w = -1e300, sum = 0;
    for (int j = 0; j < s.keys; ++j) {
      double dot = 0;
      for (int i = 0; i < s.head_dim; ++i) {
        dot += double(c.q[static_cast<size_t>(h) * s.head_dim + i]) *
               c.k[static_cast<size_t>(j) * stride + off + i];
      }
      w[j] = dot * c.scale;
      max_w = std::max(max_w, w[j]);
    }
    for (double& x : w) sum += (x = std::exp(x - max_w));
    for (int j = 0; j < s.keys; ++j) {
      for (int i = 0; i < s.head_dim; ++i) {
        out[static_cast<size_t>(h) * s.head_dim + i] +=
            w[j] / sum * c.v[static_cast<size_t>(j) * stride + off + i];
      }
    }
  }
  return out;
}

TEST_CASE("DecodeAttention matches attention in double at odd shapes in every variant", "[cpu]") {
  AttentionIsaRestorer restore;
  for (const DecodeShape& s : kDecodeShapes) {
    const DecodeCase c = MakeDecodeCase(s, 11);
    const std::vector<double> want = ReferenceDecode(s, c);
    for (CpuIsa isa : RunnableIsas()) {
      SetActiveIsa(isa);
      const std::vector<float> got = RunDecode(s, c, 0);
      INFO(IsaName(isa) << " heads " << s.heads << "/" << s.kv_heads << " head_dim " << s.head_dim
                        << " keys " << s.keys);
      // Outputs are averages of unit-variance V entries: an absolute bound is the scale.
      for (size_t i = 0; i < got.size(); ++i) REQUIRE(std::abs(got[i] - want[i]) < 2e-5);
    }
  }
}

TEST_CASE("DecodeAttention's scalar twin, vector variant and thread counts agree bit for bit",
          "[cpu]") {
  AttentionIsaRestorer restore;
  for (const DecodeShape& s : kDecodeShapes) {
    const DecodeCase c = MakeDecodeCase(s, 21);
    SetActiveIsa(CpuIsa::kScalar);
    const std::vector<float> scalar = RunDecode(s, c, 1);
    for (CpuIsa isa : RunnableIsas()) {
      SetActiveIsa(isa);
      INFO(IsaName(isa) << " heads " << s.heads << "/" << s.kv_heads << " head_dim " << s.head_dim
                        << " keys " << s.keys);
      for (int threads : {0, 1, 2, 3}) CHECK(RunDecode(s, c, threads) == scalar);
    }
  }
}

TEST_CASE("CausalAttention's decode step is DecodeAttention over the window's keys", "[cpu]") {
  const int heads = 8, kv_heads = 2, head_dim = 32, start = 40, window = 16;
  const int kv_dim = kv_heads * head_dim, keys = start + 1;
  const auto q = AttentionNormal(static_cast<size_t>(heads) * head_dim, 31);
  const auto k = AttentionNormal(static_cast<size_t>(keys) * kv_dim, 32);
  const auto v = AttentionNormal(static_cast<size_t>(keys) * kv_dim, 33);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  for (int w : {0, window}) {
    std::vector<float> got(q.size()), want(q.size());
    std::vector<float> scratch(AttentionScratchFloats(1, start, heads));
    CausalAttention(q.data(), k.data(), v.data(), got.data(), 1, start, heads, kv_heads, head_dim,
                    w, scratch.data());
    const int first = w > 0 ? keys - w : 0;  // the window's first key
    std::vector<float> scores(static_cast<size_t>(heads) * keys);
    DecodeAttention(q.data(), k.data() + static_cast<size_t>(first) * kv_dim,
                    v.data() + static_cast<size_t>(first) * kv_dim, want.data(), keys - first,
                    heads, kv_heads, head_dim, scale, scores.data(), 1);
    INFO("window " << w);
    CHECK(got == want);
  }
}

TEST_CASE("SwiGlu and SoftmaxRows give the same bits in every variant", "[cpu]") {
  AttentionIsaRestorer restore;
  // Sizes around the 8-float vector; magnitudes from tiny to past exp's -87 clamp; signed
  // zeros and the clamp's edge among them.
  for (int n : {1, 7, 8, 9, 31, 2051}) {
    for (float sd : {0.01f, 1.0f, 30.0f, 200.0f}) {
      std::vector<float> gate = AttentionNormal(n, 41, sd), up = AttentionNormal(n, 42);
      const float edges[] = {0.0f, -0.0f, -87.0f, 87.0f, -90.0f};
      for (int i = 0; i < n && i < 5; ++i) gate[static_cast<size_t>(n - 1 - i)] = edges[i];
      SetActiveIsa(CpuIsa::kScalar);
      std::vector<float> swiglu_scalar(n), softmax_scalar = gate;
      SwiGlu(gate.data(), up.data(), swiglu_scalar.data(), n);
      SoftmaxRows(softmax_scalar.data(), 1, n);
      for (CpuIsa isa : RunnableIsas()) {
        SetActiveIsa(isa);
        std::vector<float> swiglu(n), softmax = gate;
        SwiGlu(gate.data(), up.data(), swiglu.data(), n);
        SoftmaxRows(softmax.data(), 1, n);
        INFO(IsaName(isa) << " n " << n << " sd " << sd);
        CHECK(swiglu == swiglu_scalar);
        CHECK(softmax == softmax_scalar);
      }
    }
  }
}

}  // namespace
}  // namespace scd::cpu
