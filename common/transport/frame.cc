// Frame header encoding and validation (see frame.h for the layout and its invariants).
#include "common/transport/frame.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/crc32c.h"

namespace scd::transport {
namespace {

constexpr size_t kCrcOffset = kFrameHeaderBytes - 4;

void Put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

EncodedHeader EncodeHeader(const FrameHeader& header) {
  EncodedHeader out{};
  uint8_t* p = out.data();
  Put32(p + 0, kFrameMagic);
  Put16(p + 4, kFrameVersion);
  p[6] = static_cast<uint8_t>(header.type);
  p[7] = 0;
  Put32(p + 8, header.status_code);
  Put32(p + 12, header.token_crc);
  Put64(p + 16, header.sequence);
  Put64(p + 24, header.request_id);
  Put64(p + 32, header.body_length);
  Put32(p + 40, header.body_crc);
  Put32(p + kCrcOffset, Crc32c(p, kCrcOffset));
  return out;
}

absl::StatusOr<FrameHeader> DecodeHeader(absl::Span<const uint8_t> bytes, uint64_t max_body_bytes) {
  if (bytes.size() != kFrameHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame header must be ", kFrameHeaderBytes, " bytes, got ", bytes.size()));
  }
  const uint8_t* p = bytes.data();
  const uint32_t want_crc = static_cast<uint32_t>(GetLe(p + kCrcOffset, 4));
  const uint32_t got_crc = Crc32c(p, kCrcOffset);
  if (want_crc != got_crc) {
    return absl::DataLossError(absl::StrFormat(
        "corrupt frame header: CRC32C 0x%08x, header says 0x%08x", got_crc, want_crc));
  }
  if (GetLe(p, 4) != kFrameMagic) {
    return absl::DataLossError(absl::StrFormat("not a transport frame: magic 0x%08x", GetLe(p, 4)));
  }
  const uint64_t version = GetLe(p + 4, 2);
  if (version != kFrameVersion) {
    return absl::DataLossError(absl::StrCat("unsupported frame version ", version,
                                            " (this build speaks ", kFrameVersion, ")"));
  }
  FrameHeader header;
  const uint8_t type = p[6];
  if (type < static_cast<uint8_t>(FrameType::kHello) ||
      type > static_cast<uint8_t>(FrameType::kAck)) {
    return absl::DataLossError(absl::StrCat("unknown frame type ", type));
  }
  header.type = static_cast<FrameType>(type);
  header.status_code = static_cast<uint32_t>(GetLe(p + 8, 4));
  header.token_crc = static_cast<uint32_t>(GetLe(p + 12, 4));
  header.sequence = GetLe(p + 16, 8);
  header.request_id = GetLe(p + 24, 8);
  header.body_length = GetLe(p + 32, 8);
  header.body_crc = static_cast<uint32_t>(GetLe(p + 40, 4));
  if (header.body_length > max_body_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("request ", header.request_id, ": frame announces ", header.body_length,
                     " body bytes, above the limit of ", max_body_bytes));
  }
  return header;
}

absl::Status VerifyBody(const FrameHeader& header, absl::Span<const uint8_t> body) {
  const uint32_t crc = Crc32c(body.data(), body.size());
  if (crc == header.body_crc) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "request %d: body checksum mismatch (CRC32C 0x%08x over %d bytes, frame says 0x%08x)",
      header.request_id, crc, body.size(), header.body_crc));
}

FrameHeader MakeData(uint64_t request_id, const TransferToken& token,
                     absl::Span<const uint8_t> body) {
  FrameHeader header;
  header.type = FrameType::kData;
  header.request_id = request_id;
  header.body_length = body.size();
  header.body_crc = Crc32c(body.data(), body.size());
  header.token_crc = Crc32c(token.data(), token.size());
  return header;
}

absl::Status VerifyToken(const FrameHeader& header, const TransferToken& token) {
  const uint32_t crc = Crc32c(token.data(), token.size());
  if (crc == header.token_crc) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrFormat("request %d: corrupt transfer token (CRC32C 0x%08x, frame says 0x%08x)",
                      header.request_id, crc, header.token_crc));
}

FrameHeader MakeAck(const FrameHeader& data, const absl::Status& verdict, std::string* body) {
  *body = std::string(verdict.message());
  FrameHeader ack;
  ack.type = FrameType::kAck;
  ack.status_code = static_cast<uint32_t>(verdict.code());
  ack.sequence = data.sequence;
  ack.request_id = data.request_id;
  ack.body_length = body->size();
  ack.body_crc = Crc32c(body->data(), body->size());
  return ack;
}

absl::Status AckToStatus(const FrameHeader& ack, absl::Span<const uint8_t> body) {
  if (ack.status_code == 0) return absl::OkStatus();
  const std::string text(reinterpret_cast<const char*>(body.data()), body.size());
  const auto code = ack.status_code <= static_cast<uint32_t>(absl::StatusCode::kUnauthenticated)
                        ? static_cast<absl::StatusCode>(ack.status_code)
                        : absl::StatusCode::kUnknown;
  return absl::Status(code, absl::StrCat("receiver rejected request ", ack.request_id, ": ", text));
}

}  // namespace scd::transport
