// The SCD wire format: one versioned, self-describing payload shared by every codec mode
// (oracle, raw, quant8/4, recompute, scd-reuse, scd). Little-endian.
//
//   header (64 B)  magic "SCDW" | u16 version | u8 mode | u8 flags | u16 num_layers |
//                  u16 num_blocks | u32 num_tokens | u32 start_position | u16 rung |
//                  u16 reserved |
//                  u64 body_bytes | u8[16] pair_digest | u32 body_crc32c | u32 header_crc32c |
//                  u64 reserved
//   body           i32 token_ids[num_tokens]
//                  num_blocks × descriptor (20 B): u8 kind | u8 encoding | u16 layer |
//                                                 u32 rows | u32 cols | u16 group | u16 0 |
//                                                 u32 bytes
//                  block data, back to back, in descriptor order
//
// `rung` is the rung of the artifact's rate ladder (rate_ladder.h) an scd or scd-reuse payload
// carries, 0 (the artifact's own operating point) for every other mode.
//
// The pair digest binds a payload to one producer/consumer pair (and calibration artifact),
// so a consumer never rebuilds from codes made for another model. With flag bit 0
// (kWireFlagOnBasis; scd and scd-reuse only) the same 16 bytes are a basis digest instead
// (MakeBasisDigest): the codes are on a producer basis shared by several consumers
// (common/scd/shared_basis.h), and every consumer whose artifact section is on that basis may
// rebuild them. Other flag bits are refused. Both CRCs are checked and every descriptor is
// validated against the body before any block is read.
#ifndef SCD_COMMON_SCD_WIRE_FORMAT_H_
#define SCD_COMMON_SCD_WIRE_FORMAT_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/scd/quantize.h"

namespace scd {

inline constexpr uint16_t kWireVersion = 1;
inline constexpr size_t kWireHeaderBytes = 64;
inline constexpr size_t kWireDescriptorBytes = 20;
inline constexpr uint8_t kWireFlagOnBasis = 1;

enum class CodecMode : uint8_t {
  kOracle = 0,     // no KV travels; the consumer prefills the tokens itself
  kRaw = 1,        // producer pre-RoPE K and V, F16
  kQuant8 = 2,     // KIVI int8
  kQuant4 = 3,     // KIVI int4
  kRecompute = 4,  // raw KV outside one critical block, plus the residual entering it
  kScdReuse = 5,   // REUSE codes on every layer
  kScd = 6,        // REUSE codes plus PATCH codes on the selected layers
};

std::string_view CodecModeName(CodecMode mode);
absl::StatusOr<CodecMode> ParseCodecMode(std::string_view name);

enum class BlockKind : uint8_t {
  kSurprisal = 0,  // [T, 1] producer surprisal (SEKV segmentation)
  kKey = 1,        // [T, kv_dim] pre-RoPE keys, or [T, r_K] REUSE codes
  kValue = 2,      // [T, kv_dim] values, or [T, r_V] REUSE codes
  kPatch = 3,      // [T, r_H] PATCH code of H_in
  kResidual = 4,   // [T, d] residual stream entering a recomputed block
};

struct PayloadBlock {
  BlockKind kind = BlockKind::kKey;
  Encoding encoding = Encoding::kF16;
  uint16_t layer = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint16_t group = 0;
  std::vector<uint8_t> data;  // EncodedBytes(encoding, rows, cols, group) bytes

  // Decodes `data` into rows × cols floats.
  absl::StatusOr<std::vector<float>> ToFloats() const;
  // The same into *out (resized to rows × cols, its capacity kept for the next block).
  absl::Status DecodeInto(std::vector<float>* out) const;
};

// Makes a block by encoding x[rows, cols].
PayloadBlock MakeBlock(BlockKind kind, Encoding encoding, int layer, const float* x, int rows,
                       int cols, int group = 0);

using PairDigest = std::array<uint8_t, 16>;

// First 16 bytes of SHA-256(producer_digest ":" consumer_digest ":" artifact_id).
PairDigest MakePairDigest(std::string_view producer_digest, std::string_view consumer_digest,
                          std::string_view artifact_id);
std::string PairDigestHex(const PairDigest& digest);
// First 16 bytes of SHA-256("basis:" producer_digest ":" basis_id): what payloads on a shared
// basis carry in place of a pair digest.
PairDigest MakeBasisDigest(std::string_view producer_digest, std::string_view basis_id);

struct Payload {
  CodecMode mode = CodecMode::kRaw;
  uint16_t num_layers = 0;
  uint32_t start_position = 0;  // positions already in the consumer's sequence before these
  uint16_t rung = 0;            // scd and scd-reuse: the rate ladder's rung; 0 otherwise
  bool on_basis = false;        // pair_digest holds a basis digest (kWireFlagOnBasis)
  PairDigest pair_digest{};
  std::vector<int32_t> token_ids;  // num_tokens = token_ids.size()
  std::vector<PayloadBlock> blocks;

  // The first block of `kind` at `layer`, or nullptr.
  const PayloadBlock* Find(BlockKind kind, int layer) const;
};

// What a payload's header says of it, read without its body (for accounting; ParsePayload
// checks the rest): INVALID_ARGUMENT for bytes that do not begin with a valid header.
struct PayloadHeaderSummary {
  CodecMode mode = CodecMode::kRaw;
  int num_tokens = 0;
  int rung = 0;
};
absl::StatusOr<PayloadHeaderSummary> PeekPayloadHeader(absl::Span<const uint8_t> bytes);

std::vector<uint8_t> SerializePayload(const Payload& payload);
// Parses and validates a serialized payload: magic, version, CRCs, sizes and every block.
absl::StatusOr<Payload> ParsePayload(absl::Span<const uint8_t> bytes);

// Checks only the two CRCs, for a receiver that must tell damage in transit (DATA_LOSS,
// worth another path or replica) from a malformed payload (ParsePayload's INVALID_ARGUMENT)
// before decoding anything: a decode daemon on payloads that rode inside an RPC, where no
// transport frame checksum covered them. OK for bytes too short to hold a header (left to
// ParsePayload).
absl::Status VerifyPayloadChecksums(absl::Span<const uint8_t> bytes);

}  // namespace scd

#endif  // SCD_COMMON_SCD_WIRE_FORMAT_H_
