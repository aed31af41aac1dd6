// Parity of the attention kernels with cpu::CausalAttention, on a BF16 cache whose values the
// CPU twin receives already rounded (so the cache precision is not part of the comparison):
//   - generic prefill (F32 CUDA cores) and split-K decode: only summation order and expf vs
//     the twin's polynomial exp differ: atol 2e-5, rtol 1e-4 (outputs are convex combinations
//     of |v| <= 1);
//   - tensor-core prefill: Q and the probabilities P are rounded to BF16 (2^-9 relative):
//     atol 1e-2, rtol 2e-2.
// Shapes cover GQA (1, 2 and 4 query heads per KV head), head_dim 8/64/96/128/256, prefill
// continuing a filled cache (start > 0), sliding windows, query counts that are not tile
// multiples, strided q/out rows, and decode batches of very different lengths (empty splits).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/launch_checks.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/split_plan.h"
#include "tests/gpu/parity/cuda_test_support.h"

namespace scd {
namespace {

using cuda::Bf16;
using testing::DeviceArray;

struct PrefillCase {
  int tokens, start, heads, kv_heads, head_dim, window;
};

// Runs PrefillAttention with `impl` and cpu::CausalAttention on the same inputs; q rows are
// embedded in wider rows (as in the fused qkv buffer) and the output is strided too.
void CheckPrefill(const PrefillCase& c, cuda::AttentionImpl impl, double atol, double rtol) {
  INFO("tokens " << c.tokens << " start " << c.start << " heads " << c.heads << "/" << c.kv_heads
                 << " head_dim " << c.head_dim << " window " << c.window);
  const int q_dim = c.heads * c.head_dim, kv_dim = c.kv_heads * c.head_dim;
  const int q_stride = q_dim + 2 * kv_dim, out_stride = q_dim + 16;
  const int keys = c.start + c.tokens;
  const std::vector<float> q_wide =
      testing::RandomFloats(static_cast<size_t>(c.tokens) * q_stride, 21, 2.0f);
  const std::vector<float> k =
      testing::RoundedBf16(testing::RandomFloats(static_cast<size_t>(keys) * kv_dim, 22, 2.0f));
  const std::vector<float> v =
      testing::RoundedBf16(testing::RandomFloats(static_cast<size_t>(keys) * kv_dim, 23));

  std::vector<float> q(static_cast<size_t>(c.tokens) * q_dim);
  for (int t = 0; t < c.tokens; ++t) {
    std::memcpy(&q[t * static_cast<size_t>(q_dim)], &q_wide[t * static_cast<size_t>(q_stride)],
                q_dim * sizeof(float));
  }
  std::vector<float> want(q.size());
  std::vector<float> scratch(cpu::AttentionScratchFloats(c.tokens, c.start, c.heads));
  cpu::CausalAttention(q.data(), k.data(), v.data(), want.data(), c.tokens, c.start, c.heads,
                       c.kv_heads, c.head_dim, c.window, scratch.data());

  DeviceArray<float> q_dev(q_wide), out_dev(static_cast<size_t>(c.tokens) * out_stride);
  DeviceArray<Bf16> k_dev(testing::ToBf16(k)), v_dev(testing::ToBf16(v));
  testing::RequireOk(cuda::PrefillAttention(q_dev.get(), q_stride, k_dev.get(), v_dev.get(),
                                            out_dev.get(), out_stride, c.tokens, c.start, c.heads,
                                            c.kv_heads, c.head_dim, c.window, impl, nullptr));
  testing::RequireSynced();
  const std::vector<float> out = out_dev.ToHost();
  std::vector<float> got(want.size());
  for (int t = 0; t < c.tokens; ++t) {
    std::memcpy(&got[t * static_cast<size_t>(q_dim)], &out[t * static_cast<size_t>(out_stride)],
                q_dim * sizeof(float));
  }
  testing::CheckClose(got, want, atol, rtol, "PrefillAttention");
}

}  // namespace

TEST_CASE("CUDA generic prefill attention matches cpu::CausalAttention", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (const PrefillCase& c : {PrefillCase{37, 0, 8, 4, 8, 0},      // stories260K shape
                               PrefillCase{100, 29, 4, 1, 64, 0},   // MQA, continuing
                               PrefillCase{130, 5, 4, 2, 128, 50},  // sliding window
                               PrefillCase{33, 70, 6, 3, 96, 0},    // head_dim not 64/128
                               PrefillCase{17, 3, 2, 2, 256, 8},    // MHA, widest head
                               PrefillCase{1, 40, 4, 2, 64, 0}}) {  // single query
    CheckPrefill(c, cuda::AttentionImpl::kGeneric, 2e-5, 1e-4);
  }
}

// Both tensor-core kernels: WMMA through shared memory (kTensorCore, kAuto's choice) and
// mma.sync with register-resident fragments (kTensorCoreMma).
TEST_CASE("CUDA tensor-core prefill attention matches cpu::CausalAttention", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (const cuda::AttentionImpl impl :
       {cuda::AttentionImpl::kTensorCore, cuda::AttentionImpl::kTensorCoreMma}) {
    INFO((impl == cuda::AttentionImpl::kTensorCore ? "WMMA" : "mma.sync"));
    REQUIRE(cuda::AttentionImplSupports(impl, 64));
    REQUIRE(cuda::AttentionImplSupports(impl, 128));
    CHECK_FALSE(cuda::AttentionImplSupports(impl, 96));
    for (const PrefillCase& c : {PrefillCase{200, 0, 4, 2, 128, 0},     // GQA, ragged last tile
                                 PrefillCase{64, 0, 4, 4, 64, 0},       // one exact tile
                                 PrefillCase{77, 150, 4, 1, 64, 0},     // continuing a cache
                                 PrefillCase{300, 20, 2, 1, 128, 100},  // sliding window
                                 PrefillCase{130, 0, 2, 1, 64, 40},     // window < tile
                                 PrefillCase{5, 0, 2, 1, 128, 3}}) {    // tiny, window < tile
      CheckPrefill(c, impl, 1e-2, 2e-2);
    }
  }
}

namespace {

struct DecodeCase {
  int heads, kv_heads, head_dim, window;
  std::vector<int> lengths;
  bool unaligned = false;  // the caches start 2 bytes past a 16-byte boundary
};

constexpr int kDecodeLayers = 2, kDecodeLayer = 1;

// A batch's K/V caches on the device (BF16, kDecodeLayers layers of `capacity` rows each, `lead`
// elements in), and cpu::CausalAttention's output for each row's query (`q`) over layer
// kDecodeLayer of its cache.
struct DecodeCaches {
  DecodeCaches(const DecodeCase& c, const std::vector<float>& q, int capacity, int lead) {
    const int batch = static_cast<int>(c.lengths.size());
    const int q_dim = c.heads * c.head_dim, kv_dim = c.kv_heads * c.head_dim;
    want.resize(static_cast<size_t>(batch) * q_dim);
    for (int b = 0; b < batch; ++b) {
      const size_t elems = static_cast<size_t>(kDecodeLayers) * capacity * kv_dim + lead;
      const std::vector<float> k = testing::RoundedBf16(testing::RandomFloats(elems, 40 + b, 2));
      const std::vector<float> v = testing::RoundedBf16(testing::RandomFloats(elems, 50 + b));
      k_caches.emplace_back(testing::ToBf16(k));
      v_caches.emplace_back(testing::ToBf16(v));
      k_ptrs.push_back(k_caches.back().get() + lead);
      v_ptrs.push_back(v_caches.back().get() + lead);
      const size_t layer_at = static_cast<size_t>(kDecodeLayer) * capacity * kv_dim + lead;
      std::vector<float> scratch(cpu::AttentionScratchFloats(1, c.lengths[b] - 1, c.heads));
      cpu::CausalAttention(q.data() + b * q_dim, k.data() + layer_at, v.data() + layer_at,
                           want.data() + b * q_dim, 1, c.lengths[b] - 1, c.heads, c.kv_heads,
                           c.head_dim, c.window, scratch.data());
    }
  }

  std::vector<DeviceArray<Bf16>> k_caches, v_caches;
  std::vector<Bf16*> k_ptrs, v_ptrs;
  std::vector<float> want;
};

// DecodeAttention through `impl` on `c`, with each plan: the output is the CPU's within 2e-5
// absolute and 1e-4 relative.
void CheckDecodeImpl(const DecodeCase& c, cuda::DecodeImpl impl, const std::vector<int>& plans,
                     const cuda::KvCacheTable& table, const DeviceArray<int32_t>& lengths,
                     const std::vector<float>& q, const std::vector<float>& want) {
  const int batch = static_cast<int>(c.lengths.size());
  const int q_dim = c.heads * c.head_dim;
  for (const int planned : plans) {
    INFO("planned for max_length " << planned);
    const int64_t ws_floats =
        cuda::DecodeAttentionWorkspaceFloats(batch, planned, c.heads, c.kv_heads, c.head_dim);
    DeviceArray<float> ws(ws_floats), q_dev(q), out_dev(want.size());
    testing::RequireOk(cuda::DecodeAttention(
        q_dev.get(), q_dim, table, kDecodeLayer, lengths.get(), batch, planned, c.heads, c.kv_heads,
        c.head_dim, c.window, impl, out_dev.get(), q_dim, ws.get(), ws_floats, nullptr));
    testing::RequireSynced();
    testing::CheckClose(out_dev.ToHost(), want, 2e-5, 1e-4, "DecodeAttention");
  }
}

void CheckDecode(const DecodeCase& c) {
  const int batch = static_cast<int>(c.lengths.size());
  INFO("heads " << c.heads << "/" << c.kv_heads << " head_dim " << c.head_dim << " window "
                << c.window << " batch " << batch << (c.unaligned ? " unaligned" : ""));
  const int q_dim = c.heads * c.head_dim, kv_dim = c.kv_heads * c.head_dim;
  int max_length = 0;
  for (int len : c.lengths) max_length = std::max(max_length, len);
  const int capacity = max_length + 7;
  const std::vector<float> q = testing::RandomFloats(static_cast<size_t>(batch) * q_dim, 31, 2.0f);
  const DecodeCaches caches(c, q, capacity, c.unaligned ? 1 : 0);
  DeviceArray<Bf16*> k_dev(caches.k_ptrs), v_dev(caches.v_ptrs);
  DeviceArray<int64_t> strides(std::vector<int64_t>(batch, int64_t{capacity} * kv_dim));
  DeviceArray<int32_t> lengths(std::vector<int32_t>(c.lengths.begin(), c.lengths.end()));
  cuda::KvCacheTable table;
  table.k = k_dev.get();
  table.v = v_dev.get();
  table.layer_stride = strides.get();
  const bool vectorized =
      cuda::launch_checks::VectorizedAttentionSupports(c.heads / c.kv_heads, c.head_dim);
  // Both kernels (kAuto's choice between them is launch_checks_test's, and the backend's
  // tests run kAuto).
  for (const cuda::DecodeImpl impl : {cuda::DecodeImpl::kGeneric, cuda::DecodeImpl::kVectorized}) {
    INFO("impl " << static_cast<int>(impl));
    if (impl == cuda::DecodeImpl::kVectorized && !vectorized) {
      // Refused before anything is launched, not run on a shape it cannot take.
      CHECK(cuda::DecodeAttention(nullptr, 0, table, kDecodeLayer, nullptr, batch, max_length,
                                  c.heads, c.kv_heads, c.head_dim, c.window, impl, nullptr, 0,
                                  nullptr, 1 << 30, nullptr)
                .code() == absl::StatusCode::kInvalidArgument);
      continue;
    }
    // Planned for the batch's own longest row, and for a far longer one (the CUDA backend
    // plans for a length bucket, split_plan::DecodeLengthBucket): rows spread their keys
    // over the splits either way. Both kernels cut the keys with the same SplitKeys, so
    // the generic one, which kAuto leaves to the shapes the vectorized one cannot take, is
    // run on the row's own plan only there (it keeps the race check's time down).
    std::vector<int> plans = {max_length};
    if (impl == cuda::DecodeImpl::kVectorized || !vectorized) {
      plans.push_back(4 * cuda::split_plan::DecodeLengthBucket(max_length));
    }
    CheckDecodeImpl(c, impl, plans, table, lengths, q, caches.want);
  }
}

}  // namespace

TEST_CASE("CUDA split-K decode attention matches cpu::CausalAttention", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  for (const DecodeCase& c :
       {DecodeCase{8, 4, 8, 0, {1, 16, 300}},        // stories260K shape
        DecodeCase{32, 8, 128, 0, {1, 300, 1000}},   // Llama-3 heads, empty splits
        DecodeCase{8, 2, 128, 0, {3000}},            // one long sequence: 47 splits
        DecodeCase{8, 2, 64, 100, {50, 777, 1024}},  // sliding window
        DecodeCase{4, 4, 96, 0, {129, 2}},           // MHA, head_dim 96 (generic only)
        DecodeCase{16, 2, 128, 0, {700, 33}},        // group 8: the vectorized kernel's largest
        DecodeCase{2, 2, 256, 0, {300, 65}},         // head_dim 256: a warp per row
        DecodeCase{32, 2, 32, 0, {200}},             // group 16 (generic only)
        DecodeCase{8, 4, 64, 0, {400, 3}, true}}) {  // unaligned caches
    CheckDecode(c);
  }
}

TEST_CASE("CUDA attention launchers reject bad shapes", "[cuda]") {
  SCD_SKIP_WITHOUT_CUDA();
  // Argument errors are reported before anything is launched.
  CHECK(cuda::PrefillAttention(nullptr, 0, nullptr, nullptr, nullptr, 0, 4, 0, 6, 4, 64, 0,
                               cuda::AttentionImpl::kAuto, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(cuda::PrefillAttention(nullptr, 0, nullptr, nullptr, nullptr, 0, 4, 0, 4, 4, 96, 0,
                               cuda::AttentionImpl::kTensorCore, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(cuda::DecodeAttention(nullptr, 0, cuda::KvCacheTable{}, 0, nullptr, 2, 100, 8, 2, 64, 0,
                              cuda::DecodeImpl::kAuto, nullptr, 0, nullptr, 0, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
  // 512 query heads on one KV head: the scores of even a 32-key chunk pass 48 KB.
  CHECK(cuda::DecodeAttention(nullptr, 0, cuda::KvCacheTable{}, 0, nullptr, 1, 100, 512, 1, 8, 0,
                              cuda::DecodeImpl::kAuto, nullptr, 0, nullptr, 1 << 20, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd
