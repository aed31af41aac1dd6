// VerifyPayloadChecksums: damage in transit is DATA_LOSS (a decode daemon refuses an inline
// payload that way, so the prefill daemon can try another replica), while structural
// problems are left to ParsePayload.
#include <catch2/catch.hpp>

#include "common/scd/wire_format.h"

namespace scd {

TEST_CASE("Payload checksums: every flipped byte is DATA_LOSS, intact bytes pass", "[cpu]") {
  Payload p;
  p.mode = CodecMode::kScd;
  p.num_layers = 2;
  p.pair_digest = MakePairDigest("producer", "consumer", "artifact");
  p.token_ids = {1, 2, 3};
  std::vector<float> x(3 * 4, 0.25f);
  p.blocks.push_back(MakeBlock(BlockKind::kKey, Encoding::kF16, 0, x.data(), 3, 4));
  const std::vector<uint8_t> bytes = SerializePayload(p);
  CHECK(VerifyPayloadChecksums(bytes).ok());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i >= 52 && i < 56) continue;  // the header CRC field itself: still caught, see below
    std::vector<uint8_t> bad = bytes;
    bad[i] ^= 0x01;
    const absl::Status st = VerifyPayloadChecksums(bad);
    INFO("byte " << i << ": " << st.ToString());
    CHECK(st.code() == absl::StatusCode::kDataLoss);
    CHECK(st.message().find("checksum") != absl::string_view::npos);
  }
  std::vector<uint8_t> bad_crc = bytes;
  bad_crc[53] ^= 0x01;
  CHECK(VerifyPayloadChecksums(bad_crc).code() == absl::StatusCode::kDataLoss);
  // Too short for a header: not judged here (ParsePayload reports the truncation).
  CHECK(VerifyPayloadChecksums(absl::MakeConstSpan(bytes).first(10)).ok());
  CHECK(!ParsePayload(absl::MakeConstSpan(bytes).first(10)).ok());
}

}  // namespace scd
