// Encodings and the wire format: error bounds of every quantiser from its definition,
// round trips, and rejection of truncated, corrupted and inconsistent payloads.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <random>

#include "common/base/crc32c.h"
#include "common/scd/quantize.h"
#include "common/scd/wire_format.h"
#include "tests/test_support.h"

namespace scd {
namespace {

std::vector<float> Random(int n, uint32_t seed, float scale) {
  return testing::NormalFloats(static_cast<size_t>(n), seed, scale);
}

std::vector<float> RoundTrip(Encoding e, const std::vector<float>& x, int rows, int cols, int g) {
  std::vector<uint8_t> buf(EncodedBytes(e, rows, cols, g));
  EncodeMatrix(e, x.data(), rows, cols, g, buf.data());
  std::vector<float> y(x.size());
  REQUIRE(DecodeMatrix(e, buf.data(), buf.size(), rows, cols, g, y.data()).ok());
  return y;
}

}  // namespace

TEST_CASE("CRC-32C matches the RFC 3720 check value", "[cpu]") {
  CHECK(Crc32c("123456789", 9) == 0xE3069283u);
  CHECK(Crc32c("", 0) == 0u);
  // Incremental equals one-shot.
  CHECK(Crc32c("6789", 4, Crc32c("12345", 5)) == 0xE3069283u);
}

TEST_CASE("Quantisers stay within half a step of their group's range", "[cpu]") {
  const int rows = 37, cols = 24, group = 8;
  auto x = Random(rows * cols, 1, 2.0f);
  x[5] = 40.0f;  // an outlier channel value, as keys have
  for (Encoding e :
       {Encoding::kKeyInt8, Encoding::kKeyInt4, Encoding::kValueInt8, Encoding::kValueInt4}) {
    INFO(std::string(EncodingName(e)));
    const auto y = RoundTrip(e, x, rows, cols, group);
    const bool key = e == Encoding::kKeyInt8 || e == Encoding::kKeyInt4;
    const int levels = (e == Encoding::kKeyInt8 || e == Encoding::kValueInt8) ? 255 : 15;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        // Recompute the element's group range from the definition.
        float lo = 1e30f, hi = -1e30f;
        if (key) {
          const int g0 = (r / group) * group;
          for (int rr = g0; rr < std::min(rows, g0 + group); ++rr) {
            lo = std::min(lo, x[rr * cols + c]);
            hi = std::max(hi, x[rr * cols + c]);
          }
        } else {
          const int g0 = (c / group) * group;
          for (int cc = g0; cc < std::min(cols, g0 + group); ++cc) {
            lo = std::min(lo, x[r * cols + cc]);
            hi = std::max(hi, x[r * cols + cc]);
          }
        }
        const float step = (hi - lo) / levels;
        // Half a step plus F16 rounding of scale and zero.
        CHECK(std::abs(y[r * cols + c] - x[r * cols + c]) <=
              0.5f * step + 2e-3f * (std::abs(hi) + std::abs(lo)) + 1e-6f);
      }
  }
  const auto y8 = RoundTrip(Encoding::kInt8Row, x, rows, cols, 0);
  for (int r = 0; r < rows; ++r) {
    float m = 0;
    for (int c = 0; c < cols; ++c) m = std::max(m, std::abs(x[r * cols + c]));
    for (int c = 0; c < cols; ++c)
      CHECK(std::abs(y8[r * cols + c] - x[r * cols + c]) <= m / 127 * 0.51f + 1e-3f * m);
  }
  const auto y16 = RoundTrip(Encoding::kF16, x, rows, cols, 0);
  for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(y16[i] - x[i]) <= std::abs(x[i]) * 1e-3f);
  CHECK(EncodedBytes(Encoding::kKeyInt4, 37, 24, 8) == size_t((5 * 24) * 4 + (37 * 24 + 1) / 2));
}

TEST_CASE("Payloads round-trip and every corruption is rejected", "[cpu]") {
  Payload p;
  p.mode = CodecMode::kScd;
  p.num_layers = 3;
  p.start_position = 7;
  p.pair_digest = MakePairDigest("producer", "consumer", "artifact");
  p.token_ids = {1, 2, 3, 4, 5};
  auto x = Random(5 * 6, 2, 1.0f);
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kInt8Row, 0, x.data(), 5, 6));
  p.blocks.push_back(MakeBlock(BlockKind::kPatch, Encoding::kF16, 2, x.data(), 5, 6));
  p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kValueInt4, 1, x.data(), 5, 6, 4));
  const std::vector<uint8_t> bytes = SerializePayload(p);

  auto back = ParsePayload(bytes);
  REQUIRE(back.ok());
  CHECK(back->mode == CodecMode::kScd);
  CHECK(back->start_position == 7);
  CHECK(back->token_ids == p.token_ids);
  CHECK(back->pair_digest == p.pair_digest);
  REQUIRE(back->blocks.size() == 3);
  CHECK(back->Find(BlockKind::kPatch, 2) != nullptr);
  CHECK(back->Find(BlockKind::kPatch, 1) == nullptr);
  CHECK(back->blocks[2].data == p.blocks[2].data);
  CHECK(back->blocks[2].group == 4);

  SECTION("truncated at every length") {
    for (size_t n = 0; n < bytes.size(); n += 3) {
      CHECK(!ParsePayload(absl::MakeConstSpan(bytes).first(n)).ok());
    }
  }
  SECTION("any flipped byte is caught") {
    for (size_t i = 0; i < bytes.size(); ++i) {
      std::vector<uint8_t> bad = bytes;
      bad[i] ^= 0x40;
      CHECK(!ParsePayload(bad).ok());
    }
  }
  SECTION("trailing garbage") {
    std::vector<uint8_t> bad = bytes;
    bad.push_back(0);
    auto r = ParsePayload(bad);
    CHECK(!r.ok());
  }
  SECTION("error messages say what is wrong") {
    std::vector<uint8_t> bad = bytes;
    bad[bad.size() - 1] ^= 1;
    CHECK(ParsePayload(bad).status().message().find("checksum") != absl::string_view::npos);
    CHECK(ParsePayload(absl::MakeConstSpan(bytes).first(10)).status().message().find("truncated") !=
          absl::string_view::npos);
  }
}

TEST_CASE("A payload on a shared basis says so in its header flags", "[cpu]") {
  Payload p;
  p.mode = CodecMode::kScdReuse;
  p.num_layers = 1;
  p.on_basis = true;
  p.pair_digest = MakeBasisDigest("producer", "basis");
  CHECK(p.pair_digest != MakePairDigest("producer", "basis", ""));
  p.token_ids = {1, 2};
  const std::vector<uint8_t> bytes = SerializePayload(p);
  CHECK(bytes[7] == kWireFlagOnBasis);
  auto back = ParsePayload(bytes);
  REQUIRE(back.ok());
  CHECK(back->on_basis);
  CHECK(back->pair_digest == p.pair_digest);
  p.on_basis = false;
  CHECK_FALSE(ParsePayload(SerializePayload(p))->on_basis);
  // Only codes may be on a basis; flags this build does not know are refused.
  p.mode = CodecMode::kRaw;
  p.on_basis = true;
  auto raw = ParsePayload(SerializePayload(p));
  CHECK(raw.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(raw.status().message()), Catch::Contains("shared basis"));
  std::vector<uint8_t> unknown = bytes;
  unknown[7] = 0x82;
  const uint32_t crc = Crc32c(unknown.data() + 56, 8, Crc32c(unknown.data(), 52));
  std::memcpy(unknown.data() + 52, &crc, 4);
  auto flags = ParsePayload(unknown);
  CHECK(flags.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(flags.status().message()), Catch::Contains("flags 0x82"));
}

TEST_CASE("Codec modes parse by name", "[cpu]") {
  for (const char* name : {"oracle", "raw", "quant8", "quant4", "recompute", "scd-reuse", "scd"}) {
    auto m = ParseCodecMode(name);
    REQUIRE(m.ok());
    CHECK(CodecModeName(*m) == name);
  }
  CHECK(!ParseCodecMode("fp8").ok());
}

}  // namespace scd
