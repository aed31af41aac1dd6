// Fuzzes the SCD wire-format decoder (ParsePayload, common/scd/wire_format.h): header, CRCs,
// token ids, block descriptors and every encoding's block data. Input: byte 0 is a mode byte,
// the rest the payload. When bit 0 of the mode byte is set, the harness first rewrites both
// CRC fields to match (a mutated payload almost never has valid checksums, and the checks
// behind them would otherwise stay unreached); when clear, the payload is parsed as received.
// An accepted payload must decode every block to rows × cols floats, serialize to bytes that
// parse back to the same serialization, and cut at its row granularity (PayloadRows, as the
// decode engine rebuilds it in chunks) into slices that decode to the whole's rows; cut into
// one reused payload (PayloadRowsInto, as the codec's host blocks are), the same slices.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "common/base/crc32c.h"
#include "common/scd/payload_rows.h"
#include "common/scd/wire_format.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::vector<uint8_t> bytes(data + 1, data + size);
  if ((data[0] & 1) != 0 && bytes.size() >= scd::kWireHeaderBytes) {
    uint8_t* h = bytes.data();
    const uint32_t body_crc =
        scd::Crc32c(h + scd::kWireHeaderBytes, bytes.size() - scd::kWireHeaderBytes);
    std::memcpy(h + 48, &body_crc, 4);
    const uint32_t header_crc = scd::Crc32c(h + 56, 8, scd::Crc32c(h, 52));
    std::memcpy(h + 52, &header_crc, 4);
  }
  auto payload = scd::ParsePayload(bytes);
  if (!payload.ok()) return 0;
  std::vector<std::vector<float>> whole;
  for (const scd::PayloadBlock& block : payload->blocks) {
    auto floats = block.ToFloats();
    FUZZ_CHECK(floats.ok());
    FUZZ_CHECK(floats->size() == size_t{block.rows} * block.cols);
    whole.push_back(std::move(floats).value());
  }
  const size_t total = payload->token_ids.size();
  if (total > 0) {
    const size_t step = scd::PayloadRowGranularity(*payload);
    FUZZ_CHECK(step >= 1 && step <= total);
    scd::Payload reused;
    std::vector<float> decoded;
    for (const auto& [begin, end] : {std::pair<size_t, size_t>(0, step), {step, total}}) {
      if (begin >= end) continue;
      auto rows = scd::PayloadRows(*payload, begin, end);
      FUZZ_CHECK(rows.ok());
      FUZZ_CHECK(rows->blocks.size() == payload->blocks.size());
      FUZZ_CHECK(scd::PayloadRowsInto(*payload, begin, end, &reused).ok());
      FUZZ_CHECK(reused.start_position == rows->start_position);
      FUZZ_CHECK(reused.token_ids == rows->token_ids);
      FUZZ_CHECK(reused.blocks.size() == rows->blocks.size());
      for (size_t b = 0; b < whole.size(); ++b) {
        auto cut = rows->blocks[b].ToFloats();
        FUZZ_CHECK(cut.ok());
        const size_t cols = payload->blocks[b].cols;
        FUZZ_CHECK(cut->size() == (end - begin) * cols);
        FUZZ_CHECK(cut->empty() || std::memcmp(cut->data(), whole[b].data() + begin * cols,
                                               cut->size() * sizeof(float)) == 0);
        FUZZ_CHECK(reused.blocks[b].rows == rows->blocks[b].rows);
        FUZZ_CHECK(reused.blocks[b].data == rows->blocks[b].data);
        FUZZ_CHECK(reused.blocks[b].DecodeInto(&decoded).ok());
        FUZZ_CHECK(decoded.size() == cut->size());
        FUZZ_CHECK(cut->empty() ||
                   std::memcmp(decoded.data(), cut->data(), cut->size() * sizeof(float)) == 0);
      }
    }
  }
  const std::vector<uint8_t> serialized = scd::SerializePayload(*payload);
  auto again = scd::ParsePayload(serialized);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(scd::SerializePayload(*again) == serialized);
  return 0;
}
