// The transport frame: every message, acknowledgement and handshake on a data-plane
// connection is a fixed 48-byte header optionally followed by a body. Little-endian.
//
//   u32 magic "SCDT" | u16 version | u8 type | u8 reserved | u32 status_code | u32 token_crc32c |
//   u64 sequence | u64 request_id | u64 body_length | u32 body_crc32c | u32 header_crc32c
//
// Version 2: a DATA frame's header is followed by the message's 16-byte transfer token
// (transport.h), then the body; token_crc32c covers the token (zero in other frames). Version
// 1 had no token (that field was reserved). The layout of the 48 bytes is otherwise the same,
// so either version reads the other's HELLO and refuses it by its version number.
//
// The header CRC covers the 44 bytes before it and is checked before anything else, so a
// corrupted length never drives an allocation and a corrupted header (or token) breaks only
// its own connection (the stream cannot be resynchronised). The body CRC is checked after the
// body arrived: a mismatch loses that message only. Sequence numbers are per connection and
// assigned by the sender; an ACK echoes the sequence and request id of the DATA frame it
// answers and carries an absl::StatusCode plus, as its body, the error text.
#ifndef SCD_COMMON_TRANSPORT_FRAME_H_
#define SCD_COMMON_TRANSPORT_FRAME_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/transport/transport.h"

namespace scd::transport {

inline constexpr uint32_t kFrameMagic = 0x54444353;  // "SCDT" read as little-endian bytes
inline constexpr uint16_t kFrameVersion = 2;
inline constexpr size_t kFrameHeaderBytes = 48;

enum class FrameType : uint8_t {
  kHello = 1,  // receiver -> sender once per connection: the protocol version is accepted
  kData = 2,   // sender -> receiver: one message
  kAck = 3,    // receiver -> sender: the verdict on one DATA frame
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint32_t status_code = 0;  // kAck only: an absl::StatusCode
  uint64_t sequence = 0;
  uint64_t request_id = 0;
  uint64_t body_length = 0;
  uint32_t body_crc = 0;
  uint32_t token_crc = 0;  // kData only: CRC32C of the transfer token that follows the header
};

using EncodedHeader = std::array<uint8_t, kFrameHeaderBytes>;

// Serialises `header` and seals it with the header CRC.
EncodedHeader EncodeHeader(const FrameHeader& header);

// Parses and validates a header: DATA_LOSS on a CRC mismatch, bad magic, unknown version or
// type; RESOURCE_EXHAUSTED when body_length exceeds `max_body_bytes`.
absl::StatusOr<FrameHeader> DecodeHeader(absl::Span<const uint8_t> bytes, uint64_t max_body_bytes);

// OK when `body` matches header.body_crc; otherwise a DATA_LOSS naming the request.
absl::Status VerifyBody(const FrameHeader& header, absl::Span<const uint8_t> body);

// A DATA frame's header for `request_id` with its token and body checksums (sequence unset).
FrameHeader MakeData(uint64_t request_id, const TransferToken& token,
                     absl::Span<const uint8_t> body);

// OK when `token` matches header.token_crc; otherwise a DATA_LOSS naming the request.
absl::Status VerifyToken(const FrameHeader& header, const TransferToken& token);

// The header and body of an ACK carrying `verdict` for `data`.
FrameHeader MakeAck(const FrameHeader& data, const absl::Status& verdict, std::string* body);

// The sender-side status an ACK stands for (OK, or the receiver's error with its text).
absl::Status AckToStatus(const FrameHeader& ack, absl::Span<const uint8_t> body);

}  // namespace scd::transport

#endif  // SCD_COMMON_TRANSPORT_FRAME_H_
