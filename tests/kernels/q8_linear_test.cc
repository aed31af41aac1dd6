// Tests for kernels/cpu/q8_linear: the Q8_0 format's round-trip bound, Q8Linear against
// double-precision references (tight: the same quantized operands; loose: the F32 product),
// odd sizes, the prefill path, bias, zero blocks, and the bit-identity invariants (a row alone
// or in a batch, any thread cap, the scalar variant against every vector one).
#include "kernels/cpu/q8_linear.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_isa.h"

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace scd::cpu {
namespace {

// Gaussian values whose spread changes from block to block (as trained weights' do), so that
// the per-block scales matter.
std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::uniform_real_distribution<float> spread(0.05f, 2.0f);
  std::vector<float> v(n);
  float s = scale;
  for (size_t i = 0; i < n; ++i) {
    if (i % kQ8Block == 0) s = scale * spread(rng);
    v[i] = s * dist(rng);
  }
  return v;
}

std::vector<float> Dequantized(const Q8Matrix& w) {
  std::vector<float> out(static_cast<size_t>(w.rows) * w.cols);
  DequantizeQ8Rows(w, 0, w.rows, out.data());
  return out;
}

// The activations as the decode kernel sees them, written from the definition: per block of
// 32, t = max|x| / 127 and p = round-half-even(x / t).
std::vector<double> QuantizedActivations(const std::vector<float>& x, int m, int cols) {
  std::vector<double> out(x.size());
  for (int r = 0; r < m; ++r) {
    for (int b0 = 0; b0 < cols; b0 += kQ8Block) {
      const int b1 = std::min(cols, b0 + kQ8Block);
      float amax = 0.0f;
      for (int i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[r * cols + i]));
      const float t = amax / 127.0f;
      for (int i = b0; i < b1; ++i) {
        out[r * cols + i] = t == 0.0f ? 0.0 : double{t} * std::nearbyint(x[r * cols + i] / t);
      }
    }
  }
  return out;
}

struct Reference {
  std::vector<double> y;    // Σ_i w_ji · x_ri (+ bias_j)
  std::vector<double> mag;  // Σ_i |w_ji · x_ri|, the scale of the rounding error
};

template <typename X>
Reference Product(const std::vector<X>& x, const std::vector<float>& w, const float* bias, int m,
                  int n, int k) {
  Reference ref{std::vector<double>(static_cast<size_t>(m) * n),
                std::vector<double>(static_cast<size_t>(m) * n)};
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double s = bias != nullptr ? bias[j] : 0.0, a = 0.0;
      for (int i = 0; i < k; ++i) {
        const double p =
            double{w[static_cast<size_t>(j) * k + i]} * x[static_cast<size_t>(r) * k + i];
        s += p;
        a += std::fabs(p);
      }
      ref.y[static_cast<size_t>(r) * n + j] = s;
      ref.mag[static_cast<size_t>(r) * n + j] = a;
    }
  }
  return ref;
}

std::vector<float> Run(const std::vector<float>& x, const Q8Matrix& w, const float* bias, int m,
                       int max_threads = 0) {
  std::vector<float> y(static_cast<size_t>(m) * w.rows, -1.0f);
  Q8Linear(x.data(), w, bias, y.data(), m, max_threads);
  return y;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST_CASE("Q8 half conversions are exact one way and round up the other", "[cpu]") {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if ((h & 0x7c00) == 0x7c00) continue;  // inf and NaN: never a scale
#if defined(__F16C__)
    REQUIRE(f == _cvtsh_ss(static_cast<uint16_t>(h)));
#endif
    if (h > 0 && h <= 0x7bff) {
      REQUIRE(FloatToHalfUp(f) == h);  // a half is its own rounding
      // Just above a half rounds to the next one.
      REQUIRE(FloatToHalfUp(std::nextafter(f, 1e9f)) == (h < 0x7bff ? h + 1 : h));
    }
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-30.0f, 16.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = std::exp2(exponent(rng));
    const uint16_t h = FloatToHalfUp(f);
    INFO(f);
    if (f <= 65504.0f) {
      REQUIRE(HalfToFloat(h) >= f);
      REQUIRE(HalfToFloat(static_cast<uint16_t>(h - 1)) < f);
    } else {
      REQUIRE(h == 0x7bff);
    }
  }
  CHECK(FloatToHalfUp(0.0f) == 0);
}

TEST_CASE("QuantizeQ8 keeps every weight within half a step of its block's scale", "[cpu]") {
  for (int cols : {1, 7, 31, 32, 33, 767, 1 << 16}) {
    const int rows = cols > 4096 ? 3 : 19;
    std::vector<float> w = Random(static_cast<size_t>(rows) * cols, cols, 0.02f);
    // A row of tiny weights (subnormal half scales) and a block of zeros.
    for (int i = 0; i < cols; ++i) w[i] *= 1e-6f;
    for (int i = 0; i < std::min(cols, kQ8Block); ++i) w[cols + i] = 0.0f;
    const Q8Matrix q = QuantizeQ8(w.data(), rows, cols);
    INFO("cols " << cols);
    REQUIRE(q.blocks == (cols + 31) / 32);
    REQUIRE(reinterpret_cast<uintptr_t>(q.data) % 64 == 0);
    const std::vector<float> deq = Dequantized(q);
    for (int r = 0; r < rows; ++r) {
      for (int b = 0; b < q.blocks; ++b) {
        const float scale = HalfToFloat(q.block_scale(r, b));
        float amax = 0.0f;
        for (int i = b * 32; i < std::min(cols, b * 32 + 32); ++i) {
          amax = std::max(amax, std::fabs(w[static_cast<size_t>(r) * cols + i]));
        }
        REQUIRE(q.block_scale(r, b) == FloatToHalfUp(amax / 127.0f));
        // Whole blocks, 32-byte aligned, for the kernel's aligned loads.
        REQUIRE(reinterpret_cast<uintptr_t>(q.block_quants(r, b)) % 32 == 0);
        for (int i = b * 32; i < b * 32 + 32; ++i) {
          const int qi = q.block_quants(r, b)[i - b * 32];
          REQUIRE(std::abs(qi) <= 127);
          if (i >= cols) {
            REQUIRE(qi == 0);  // the padded tail
            continue;
          }
          const size_t at = static_cast<size_t>(r) * cols + i;
          REQUIRE(deq[at] == scale * static_cast<float>(qi));
          // Half a step, plus the division's rounding (127 · 2^-24 of a step).
          REQUIRE(std::fabs(double{w[at]} - deq[at]) <= scale * (0.5 + 1e-5));
        }
      }
    }
    if (cols >= 32) {
      REQUIRE(q.block_scale(1, 0) == 0);  // the zero block
    }
  }
}

TEST_CASE("Q8LinearMany gives each product Q8Linear's bits, decode rows or not", "[cpu]") {
  // Three matrices of one input (odd row counts, one below a task and one of many tasks), then
  // one of other columns (run apart); 1, 3 and 16 decode rows and 17 prefill rows.
  const int cols = 300;
  const int rows[] = {37, 5, 2900};
  std::vector<Q8Matrix> ws;
  std::vector<std::vector<float>> biases;
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> w = Random(static_cast<size_t>(rows[i]) * cols, 50 + i);
    ws.push_back(QuantizeQ8(w.data(), rows[i], cols));
    biases.push_back(Random(static_cast<size_t>(rows[i]), 60 + i));
  }
  const std::vector<float> other_w = Random(static_cast<size_t>(9) * 64, 70);
  const Q8Matrix other = QuantizeQ8(other_w.data(), 9, 64);
  for (int m : {1, 3, 16, 17}) {
    INFO("rows " << m);
    const std::vector<float> x = Random(static_cast<size_t>(m) * cols, 80 + m);
    std::vector<std::vector<float>> got(3);
    std::vector<Q8Product> products;
    for (int i = 0; i < 3; ++i) {
      got[i].assign(static_cast<size_t>(m) * rows[i], -1.0f);
      products.push_back(Q8Product{&ws[i], i == 1 ? nullptr : biases[i].data(), got[i].data()});
    }
    Q8LinearMany(x.data(), products.data(), 3, m);
    for (int i = 0; i < 3; ++i) {
      CHECK(got[i] == Run(x, ws[i], i == 1 ? nullptr : biases[i].data(), m));
    }
    // Matrices of different widths are run apart: each reads x as [m, its own columns].
    std::vector<float> y_first(static_cast<size_t>(m) * rows[0], -1.0f);
    std::vector<float> y_other(static_cast<size_t>(m) * 9, -1.0f);
    const Q8Product mixed[] = {{&ws[0], nullptr, y_first.data()},
                               {&other, nullptr, y_other.data()}};
    Q8LinearMany(x.data(), mixed, 2, m);
    CHECK(y_first == Run(x, ws[0], nullptr, m));
    const std::vector<float> x64(x.begin(), x.begin() + static_cast<size_t>(m) * 64);
    CHECK(y_other == Run(x64, other, nullptr, m));
  }
}

TEST_CASE("Q8 matrices share one store on huge pages, each as if it had its own", "[cpu]") {
  // Three matrices back to back in one store of at least a huge page (so that it is mapped),
  // each at the offset after the last: the same bytes as a store of its own, and products
  // reading only their own slice.
  const int shapes[][2] = {{37, 300}, {2600, 768}, {5, 33}};
  size_t total = 0;
  for (const auto& s : shapes) total += Q8MatrixBytes(s[0], s[1]);
  REQUIRE(total >= kHugePageBytes);
  auto store = std::make_shared<AlignedArray<int8_t>>(total, /*huge_pages=*/true);
  REQUIRE(reinterpret_cast<uintptr_t>(store->data()) % kHugePageBytes == 0);
  REQUIRE(std::all_of(store->data(), store->data() + total, [](int8_t b) { return b == 0; }));
  size_t offset = 0;
  for (const auto& s : shapes) {
    INFO("rows " << s[0] << ", cols " << s[1]);
    const std::vector<float> w = Random(static_cast<size_t>(s[0]) * s[1], s[0] + s[1]);
    const Q8Matrix shared = QuantizeQ8(w.data(), s[0], s[1], store, offset);
    const Q8Matrix own = QuantizeQ8(w.data(), s[0], s[1]);
    REQUIRE(shared.data == store->data() + offset);
    REQUIRE(shared.bytes() == own.bytes());
    REQUIRE(std::memcmp(shared.data, own.data, own.bytes()) == 0);
    const std::vector<float> x = Random(static_cast<size_t>(s[1]), 99);
    CHECK(Run(x, shared, nullptr, 1) == Run(x, own, nullptr, 1));
    offset += Q8MatrixBytes(s[0], s[1]);
  }
  // A matrix that would not fit, or an offset off a cache line, is refused.
  const std::vector<float> w(64, 1.0f);
  CHECK_THROWS_AS(QuantizeQ8(w.data(), 2, 32, store, total - 64), std::invalid_argument);
  CHECK_THROWS_AS(QuantizeQ8(w.data(), 2, 32, store, 32), std::invalid_argument);
}

TEST_CASE("Q8Matrix's grouped layout round-trips any row count", "[cpu]") {
  for (int rows : {1, 2, 3, 4, 5, 6, 7, 9, 13}) {
    for (int cols : {1, 32, 100, 256, 300, 1000}) {
      INFO("rows " << rows << ", cols " << cols);
      const std::vector<float> w = Random(static_cast<size_t>(rows) * cols, rows * 7 + cols);
      const Q8Matrix q = QuantizeQ8(w.data(), rows, cols);
      // Whole groups of kQ8Group rows, each a 64-byte scales line per span of kQ8Span blocks
      // and the group's quant blocks.
      const size_t groups = (rows + kQ8Group - 1) / kQ8Group;
      const size_t spans = (q.blocks + kQ8Span - 1) / kQ8Span;
      REQUIRE(q.group_bytes == spans * 64 + static_cast<size_t>(q.blocks) * kQ8Group * 32);
      REQUIRE(q.bytes() == groups * q.group_bytes);
      // Every row as if quantized alone, through the accessors and through DequantizeQ8Rows
      // (from any first row).
      const std::vector<float> deq = Dequantized(q);
      for (int r = 0; r < rows; ++r) {
        const Q8Matrix alone = QuantizeQ8(w.data() + static_cast<size_t>(r) * cols, 1, cols);
        for (int b = 0; b < q.blocks; ++b) {
          REQUIRE(q.block_scale(r, b) == alone.block_scale(0, b));
          REQUIRE(std::memcmp(q.block_quants(r, b), alone.block_quants(0, b), 32) == 0);
        }
        std::vector<float> one(cols);
        DequantizeQ8Rows(q, r, 1, one.data());
        REQUIRE(SameBits(one.data(), deq.data() + static_cast<size_t>(r) * cols, cols));
      }
      // The padding rows hold zeros only.
      for (int r = rows; r < static_cast<int>(groups) * kQ8Group; ++r) {
        for (int b = 0; b < q.blocks; ++b) {
          REQUIRE(q.block_scale(r, b) == 0);
          for (int i = 0; i < 32; ++i) REQUIRE(q.block_quants(r, b)[i] == 0);
        }
      }
      // The product writes exactly rows outputs per input row, on every variant.
      const int m = 3;
      const std::vector<float> x = Random(static_cast<size_t>(m) * cols, 5);
      const CpuIsa saved = ActiveIsa();
      for (CpuIsa isa : RunnableIsas()) {
        SetActiveIsa(isa);
        std::vector<float> y(static_cast<size_t>(m) * rows + 8, -7.0f);
        Q8Linear(x.data(), q, nullptr, y.data(), m);
        for (size_t i = 0; i < y.size(); ++i) REQUIRE((i < y.size() - 8) == (y[i] != -7.0f));
      }
      SetActiveIsa(saved);
    }
  }
}

// Q8Linear on one shape against both references; returns its output for further checks.
std::vector<float> CheckAgainstReferences(int m, int rows, int cols, bool with_bias,
                                          uint32_t seed) {
  INFO("m " << m << ", rows " << rows << ", cols " << cols << ", bias " << with_bias);
  const std::vector<float> x = Random(static_cast<size_t>(m) * cols, seed);
  const std::vector<float> wf = Random(static_cast<size_t>(rows) * cols, seed + 1, 0.05f);
  const std::vector<float> bias = Random(rows, seed + 2);
  const float* b = with_bias ? bias.data() : nullptr;
  const Q8Matrix w = QuantizeQ8(wf.data(), rows, cols);
  const std::vector<float> y = Run(x, w, b, m);
  // Tight: the same operands the kernel multiplies, so only float accumulation differs.
  const bool decode = m <= kQ8DecodeMaxRows;
  const Reference exact =
      decode ? Product(QuantizedActivations(x, m, cols), Dequantized(w), b, m, rows, cols)
             : Product(x, Dequantized(w), b, m, rows, cols);
  // Loose: the F32 product the int8 one stands for.
  const Reference f32 = Product(x, wf, b, m, rows, cols);
  for (int r = 0; r < m; ++r) {
    double x_norm = 0.0;
    for (int i = 0; i < cols; ++i) x_norm += double{x[r * cols + i]} * x[r * cols + i];
    for (int j = 0; j < rows; ++j) {
      const size_t at = static_cast<size_t>(r) * rows + j;
      double w_norm = 0.0;
      for (int i = 0; i < cols; ++i) {
        w_norm +=
            double{wf[static_cast<size_t>(j) * cols + i]} * wf[static_cast<size_t>(j) * cols + i];
      }
      const double bias_mag = with_bias ? std::fabs(bias[j]) : 0.0;
      REQUIRE(std::fabs(y[at] - exact.y[at]) <= 1e-5 * (exact.mag[at] + bias_mag) + 1e-30);
      REQUIRE(std::fabs(y[at] - f32.y[at]) <= 2e-2 * std::sqrt(x_norm * w_norm) + 1e-6 * bias_mag);
    }
  }
  return y;
}

TEST_CASE("Q8Linear matches the quantized and the F32 products at odd sizes", "[cpu]") {
  uint32_t seed = 100;
  for (int cols : {1, 7, 31, 33, 767, 1 << 16}) {
    const int rows = cols > 4096 ? 5 : 37;
    for (int m : {1, 2, 3, 5, 16, 17}) CheckAgainstReferences(m, rows, cols, m % 2 == 1, seed++);
  }
  for (int m = 1; m <= 16; ++m) CheckAgainstReferences(m, 70, 96, m % 3 == 0, seed++);
  for (int m : {17, 40}) CheckAgainstReferences(m, 300, 200, true, seed++);
  CheckAgainstReferences(4, 1, 300, true, seed++);  // a single W row
  CheckAgainstReferences(40, 1, 300, false, seed++);
}

TEST_CASE("Q8Linear spans several prefill chunks and the pool's tasks", "[cpu][slow]") {
  CheckAgainstReferences(1, 1030, 768, true, 900);  // many decode tasks
  CheckAgainstReferences(3, 600, 2050, false, 901);
  CheckAgainstReferences(20, 1500, 1000, true, 902);  // two dequantized chunks (4 MB each)
}

TEST_CASE("Q8Linear handles all-zero blocks of weights and activations", "[cpu]") {
  const int m = 3, rows = 9, cols = 100;
  std::vector<float> x = Random(static_cast<size_t>(m) * cols, 11);
  std::vector<float> wf = Random(static_cast<size_t>(rows) * cols, 12);
  std::fill(x.begin(), x.begin() + cols, 0.0f);                   // a whole zero row
  std::fill(x.begin() + cols + 32, x.begin() + cols + 64, 0.0f);  // a zero block
  std::fill(wf.begin(), wf.begin() + cols, 0.0f);                 // a whole zero W row
  std::fill(wf.begin() + 2 * cols + 64, wf.begin() + 2 * cols + 96, 0.0f);
  const Q8Matrix w = QuantizeQ8(wf.data(), rows, cols);
  for (int mm : {m, 20}) {  // decode and prefill
    std::vector<float> xx(static_cast<size_t>(mm) * cols);
    for (int r = 0; r < mm; ++r)
      std::copy_n(x.begin() + (r % m) * cols, cols, xx.begin() + r * cols);
    const std::vector<float> y = Run(xx, w, nullptr, mm);
    const Reference ref =
        mm <= kQ8DecodeMaxRows
            ? Product(QuantizedActivations(xx, mm, cols), Dequantized(w), nullptr, mm, rows, cols)
            : Product(xx, Dequantized(w), nullptr, mm, rows, cols);
    for (int r = 0; r < mm; ++r) {
      for (int j = 0; j < rows; ++j) {
        const float v = y[r * rows + j];
        REQUIRE(std::isfinite(v));
        if (r % m == 0 || j == 0) REQUIRE(v == 0.0f);
        REQUIRE(std::fabs(v - ref.y[r * rows + j]) <= 1e-5 * ref.mag[r * rows + j]);
      }
    }
  }
}

TEST_CASE("Q8Linear rows are bit-identical alone, in a batch and on any thread count", "[cpu]") {
  const int rows = 520, cols = 1000, m = 16;  // ~530 KB of Q8: several threads and tasks
  const std::vector<float> x = Random(static_cast<size_t>(m) * cols, 21);
  const std::vector<float> wf = Random(static_cast<size_t>(rows) * cols, 22, 0.05f);
  const std::vector<float> bias = Random(rows, 23);
  const Q8Matrix w = QuantizeQ8(wf.data(), rows, cols);
  const std::vector<float> batch = Run(x, w, bias.data(), m);
  for (int r = 0; r < m; ++r) {
    const std::vector<float> one(x.begin() + r * cols, x.begin() + (r + 1) * cols);
    REQUIRE(SameBits(Run(one, w, bias.data(), 1).data(), batch.data() + r * rows, rows));
  }
  for (int count : {2, 3, 5, 7, 9, 13}) {  // every pass shape and remainder
    const std::vector<float> part(x.begin(), x.begin() + count * cols);
    REQUIRE(SameBits(Run(part, w, bias.data(), count).data(), batch.data(), count * rows));
  }
  for (int threads : {1, 2, 3, 16}) {
    INFO(threads << " threads");
    REQUIRE(SameBits(Run(x, w, bias.data(), m, threads).data(), batch.data(), batch.size()));
  }
  // Quantizing on the pool gives the same matrix whatever the threads: compare to rows
  // quantized alone.
  const Q8Matrix row7 = QuantizeQ8(wf.data() + 7 * cols, 1, cols);
  for (int b = 0; b < w.blocks; ++b) {
    REQUIRE(std::memcmp(row7.block_quants(0, b), w.block_quants(7, b), 32) == 0);
    REQUIRE(row7.block_scale(0, b) == w.block_scale(7, b));
  }
}

TEST_CASE("Q8Linear's scalar and vector variants agree bit for bit", "[cpu]") {
  const CpuIsa saved = ActiveIsa();
  uint32_t seed = 300;
  for (auto [rows, cols] : {std::pair{37, 33}, {70, 767}, {130, 2048}, {3, 1 << 16}}) {
    for (int m : {1, 2, 3, 4, 5, 11, 16}) {
      INFO("m " << m << ", rows " << rows << ", cols " << cols);
      const std::vector<float> x = Random(static_cast<size_t>(m) * cols, seed++);
      const std::vector<float> wf = Random(static_cast<size_t>(rows) * cols, seed++, 1e-3f);
      const std::vector<float> bias = Random(rows, seed++);
      const Q8Matrix w = QuantizeQ8(wf.data(), rows, cols);
      SetActiveIsa(CpuIsa::kScalar);
      const std::vector<float> scalar = Run(x, w, bias.data(), m);
      for (CpuIsa isa : RunnableIsas()) {
        INFO(IsaName(isa));
        SetActiveIsa(isa);
        REQUIRE(SameBits(Run(x, w, bias.data(), m).data(), scalar.data(), scalar.size()));
      }
    }
  }
  SetActiveIsa(saved);
}

}  // namespace
}  // namespace scd::cpu
