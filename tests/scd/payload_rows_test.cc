// PayloadRows and SliceEncodedRows: rows cut from an encoded block are, byte for byte, what
// encoding those rows alone gives, and decode to exactly the whole block's rows, for every
// encoding (odd and even widths, KIVI groups that do and do not divide the rows); cuts off
// an encoding's row step are refused, and so are blocks of the wrong size.
#include "common/scd/payload_rows.h"

#include <catch2/catch.hpp>

#include "common/base/random.h"
#include "common/scd/quantize.h"

namespace scd {
namespace {

std::vector<float> RandomMatrix(int rows, int cols, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (float& v : x) v = rng.NextUniform() * 4 - 2;
  return x;
}

std::vector<uint8_t> Encode(Encoding e, const float* x, int rows, int cols, int group) {
  std::vector<uint8_t> out(EncodedBytes(e, rows, cols, group));
  EncodeMatrix(e, x, rows, cols, group, out.data());
  return out;
}

}  // namespace

TEST_CASE("Rows cut from an encoded block are the rows encoded alone, for every encoding",
          "[cpu]") {
  const int rows = 70;
  struct Case {
    Encoding e;
    int cols, group, step;
  };
  const Case cases[] = {
      {Encoding::kF32, 5, 0, 1},       {Encoding::kF16, 7, 0, 1},
      {Encoding::kInt8Row, 9, 0, 1},   {Encoding::kKeyInt8, 6, 16, 16},
      {Encoding::kKeyInt4, 8, 16, 16}, {Encoding::kKeyInt4, 7, 5, 10},
      {Encoding::kValueInt8, 9, 4, 1}, {Encoding::kValueInt4, 8, 3, 1},
      {Encoding::kValueInt4, 7, 3, 2}, {Encoding::kKeyInt8, 6, 32, 32},
  };
  for (const Case& c : cases) {
    INFO(EncodingName(c.e) << " cols " << c.cols << " group " << c.group);
    CHECK(EncodedRowStep(c.e, c.cols, c.group) == c.step);
    const std::vector<float> x = RandomMatrix(rows, c.cols, 11 + c.cols);
    const std::vector<uint8_t> whole = Encode(c.e, x.data(), rows, c.cols, c.group);
    std::vector<float> all(static_cast<size_t>(rows) * c.cols);
    REQUIRE(DecodeMatrix(c.e, whole.data(), whole.size(), rows, c.cols, c.group, all.data()).ok());
    // Every cut at the step (and at the end) in three ways: the first rows, the middle, the
    // last rows.
    for (int begin = 0; begin < rows; begin += c.step) {
      for (const int end :
           {std::min(begin + c.step, rows), std::min(begin + 3 * c.step, rows), rows}) {
        INFO("rows [" << begin << ", " << end << ")");
        std::vector<uint8_t> cut;
        REQUIRE(SliceEncodedRows(c.e, whole.data(), whole.size(), rows, c.cols, c.group, begin, end,
                                 &cut)
                    .ok());
        const int n = end - begin;
        const float* first = x.data() + static_cast<size_t>(begin) * c.cols;
        // KIVI keys' statistics span a group of rows, so only cuts on group bounds are the
        // rows encoded alone; those are the only cuts the step allows.
        CHECK(cut == Encode(c.e, first, n, c.cols, c.group));
        std::vector<float> got(static_cast<size_t>(n) * c.cols);
        REQUIRE(DecodeMatrix(c.e, cut.data(), cut.size(), n, c.cols, c.group, got.data()).ok());
        CHECK(std::equal(got.begin(), got.end(), all.begin() + static_cast<long>(begin) * c.cols));
      }
    }
    if (c.step > 1) {  // off the step, at either end
      std::vector<uint8_t> cut;
      CHECK(SliceEncodedRows(c.e, whole.data(), whole.size(), rows, c.cols, c.group, 1, rows, &cut)
                .code() == absl::StatusCode::kInvalidArgument);
      CHECK(SliceEncodedRows(c.e, whole.data(), whole.size(), rows, c.cols, c.group, 0, c.step + 1,
                             &cut)
                .code() == absl::StatusCode::kInvalidArgument);
    }
    std::vector<uint8_t> cut;
    CHECK(
        SliceEncodedRows(c.e, whole.data(), whole.size() - 1, rows, c.cols, c.group, 0, rows, &cut)
            .code() == absl::StatusCode::kInvalidArgument);
    CHECK(
        SliceEncodedRows(c.e, whole.data(), whole.size(), rows, c.cols, c.group, 0, rows + 1, &cut)
            .code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("PayloadRows cuts every block at the payload's granularity", "[cpu]") {
  const int t = 100, cols = 7;
  const std::vector<float> x = RandomMatrix(t, cols, 3);
  Payload p;
  p.mode = CodecMode::kQuant4;
  p.num_layers = 2;
  p.start_position = 5;
  p.pair_digest[0] = 42;
  for (int i = 0; i < t; ++i) p.token_ids.push_back(i + 10);
  p.blocks.push_back(MakeBlock(BlockKind::kSurprisal, Encoding::kF16, 0, x.data(), t, 1));
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kF16, 0, x.data(), t, cols));
  p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kInt8Row, 0, x.data(), t, cols));
  SECTION("row-wise encodings cut anywhere") { CHECK(PayloadRowGranularity(p) == 1); }
  SECTION("KIVI keys at their group, int4 values of an odd width at even rows") {
    p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kKeyInt8, 1, x.data(), t, cols, 12));
    p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kValueInt4, 1, x.data(), t, cols, 4));
    CHECK(PayloadRowGranularity(p) == 12);
    p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kKeyInt8, 0, x.data(), t, cols, 8));
    CHECK(PayloadRowGranularity(p) == 24);  // lcm(12, 8, 2)
  }
  SECTION("a payload that slices only coarser than its length is one slice") {
    p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kKeyInt8, 1, x.data(), t, cols, 64));
    p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kKeyInt8, 0, x.data(), t, cols, 48));
    CHECK(PayloadRowGranularity(p) == t);  // lcm 192
  }
  const size_t step = PayloadRowGranularity(p);
  for (size_t begin = 0; begin < static_cast<size_t>(t); begin += step) {
    const size_t end = std::min(begin + step, static_cast<size_t>(t));
    INFO("rows [" << begin << ", " << end << ")");
    auto rows = PayloadRows(p, begin, end);
    INFO(rows.status());
    REQUIRE(rows.ok());
    // It survives the wire, starts where its rows start, and decodes to the whole's rows.
    auto parsed = ParsePayload(SerializePayload(*rows));
    REQUIRE(parsed.ok());
    CHECK(parsed->mode == p.mode);
    CHECK(parsed->num_layers == p.num_layers);
    CHECK(parsed->pair_digest == p.pair_digest);
    CHECK(parsed->start_position == 5 + begin);
    CHECK(parsed->token_ids ==
          std::vector<int32_t>(p.token_ids.begin() + begin, p.token_ids.begin() + end));
    REQUIRE(parsed->blocks.size() == p.blocks.size());
    for (size_t b = 0; b < p.blocks.size(); ++b) {
      const std::vector<float> all = p.blocks[b].ToFloats().value();
      const std::vector<float> got = parsed->blocks[b].ToFloats().value();
      const size_t c = p.blocks[b].cols;
      CHECK(std::equal(got.begin(), got.end(), all.begin() + begin * c, all.begin() + end * c));
    }
  }
  if (step > 1 && step < static_cast<size_t>(t)) {
    CHECK(PayloadRows(p, 1, t).status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(PayloadRows(p, 0, step + 1).status().code() == absl::StatusCode::kInvalidArgument);
  }
  CHECK(PayloadRows(p, 0, 0).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(PayloadRows(p, 0, t + 1).status().code() == absl::StatusCode::kInvalidArgument);
  p.blocks[1].rows = t - 1;  // a block that does not have a row per token
  CHECK(PayloadRows(p, 0, t).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd
