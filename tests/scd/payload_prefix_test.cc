// PayloadPrefix: the first n tokens of a payload decode to the first n rows of every block,
// for every encoding, and survive the wire format.
#include "common/scd/payload_prefix.h"

#include <catch2/catch.hpp>
#include <cmath>

#include "common/base/random.h"

namespace scd {

TEST_CASE("PayloadPrefix keeps the first rows of every block", "[cpu]") {
  const int t = 40, cols = 16;
  SplitMix64 rng(7);
  std::vector<float> x(t * cols);
  for (float& v : x) v = rng.NextUniform() * 2 - 1;
  Payload p;
  p.mode = CodecMode::kQuant4;
  p.num_layers = 2;
  p.start_position = 3;
  p.pair_digest[0] = 42;
  for (int i = 0; i < t; ++i) p.token_ids.push_back(i + 10);
  p.blocks.push_back(MakeBlock(BlockKind::kSurprisal, Encoding::kF16, 0, x.data(), t, 1));
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kF16, 0, x.data(), t, cols));
  p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kInt8Row, 0, x.data(), t, cols));
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kKeyInt8, 1, x.data(), t, cols, 32));
  p.blocks.push_back(MakeBlock(BlockKind::kValue, Encoding::kValueInt4, 1, x.data(), t, cols, 8));

  for (int n : {1, 17, 32, 39, 40}) {
    auto prefix = PayloadPrefix(p, n);
    REQUIRE(prefix.ok());
    auto parsed = ParsePayload(SerializePayload(*prefix));
    INFO(parsed.status().ToString());
    REQUIRE(parsed.ok());
    CHECK(parsed->token_ids.size() == static_cast<size_t>(n));
    CHECK(parsed->token_ids[0] == 10);
    CHECK(parsed->start_position == 3);
    CHECK(parsed->pair_digest == p.pair_digest);
    REQUIRE(parsed->blocks.size() == p.blocks.size());
    for (size_t b = 0; b < p.blocks.size(); ++b) {
      auto full = p.blocks[b].ToFloats();
      auto cut = parsed->blocks[b].ToFloats();
      REQUIRE(full.ok());
      REQUIRE(cut.ok());
      const int c = static_cast<int>(p.blocks[b].cols);
      REQUIRE(cut->size() == static_cast<size_t>(n * c));
      // Row-wise encodings are exact; KIVI re-quantises a partial group once more, within one
      // quantisation step of the group's range (2/15 for int4 over [-1, 1]).
      const Encoding e = p.blocks[b].encoding;
      const double tol = (e == Encoding::kF16 || e == Encoding::kInt8Row) ? 1e-6
                         : (e == Encoding::kValueInt4)                    ? 0.15
                                                                          : 0.01;
      double worst = 0;
      for (int i = 0; i < n * c; ++i)
        worst = std::max(worst, static_cast<double>(std::fabs((*cut)[i] - (*full)[i])));
      INFO("block " << b << " n " << n);
      CHECK(worst <= tol);
    }
  }
  CHECK(!PayloadPrefix(p, 0).ok());
  CHECK(!PayloadPrefix(p, 41).ok());
}

}  // namespace scd
