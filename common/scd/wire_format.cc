// See wire_format.h.
#include "common/scd/wire_format.h"

#include <cstring>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"
#include "common/base/sha256.h"
#include "common/base/status_macros.h"

namespace scd {
namespace {

constexpr char kMagic[4] = {'S', 'C', 'D', 'W'};

template <typename T>
void Put(std::vector<uint8_t>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof(T));
}
template <typename T>
T Get(const uint8_t* p, size_t at) {
  T value;
  std::memcpy(&value, p + at, sizeof(T));
  return value;
}

// The header CRC covers every header byte except its own field.
uint32_t HeaderCrc(const uint8_t* h) { return Crc32c(h + 56, 8, Crc32c(h, 52)); }

}  // namespace

std::string_view CodecModeName(CodecMode mode) {
  switch (mode) {
    case CodecMode::kOracle:
      return "oracle";
    case CodecMode::kRaw:
      return "raw";
    case CodecMode::kQuant8:
      return "quant8";
    case CodecMode::kQuant4:
      return "quant4";
    case CodecMode::kRecompute:
      return "recompute";
    case CodecMode::kScdReuse:
      return "scd-reuse";
    case CodecMode::kScd:
      return "scd";
  }
  return "?";
}

absl::StatusOr<CodecMode> ParseCodecMode(std::string_view name) {
  for (int m = 0; m <= static_cast<int>(CodecMode::kScd); ++m) {
    if (CodecModeName(static_cast<CodecMode>(m)) == name) return static_cast<CodecMode>(m);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown codec mode '", std::string(name),
                   "' (expected oracle, raw, quant8, quant4, recompute, scd-reuse or scd)"));
}

absl::StatusOr<std::vector<float>> PayloadBlock::ToFloats() const {
  std::vector<float> out;
  SCD_RETURN_IF_ERROR(DecodeInto(&out));
  return out;
}

absl::Status PayloadBlock::DecodeInto(std::vector<float>* out) const {
  out->resize(static_cast<size_t>(rows) * cols);
  return DecodeMatrix(encoding, data.data(), data.size(), static_cast<int>(rows),
                      static_cast<int>(cols), group, out->data());
}

PayloadBlock MakeBlock(BlockKind kind, Encoding encoding, int layer, const float* x, int rows,
                       int cols, int group) {
  PayloadBlock b;
  b.kind = kind;
  b.encoding = encoding;
  b.layer = static_cast<uint16_t>(layer);
  b.rows = static_cast<uint32_t>(rows);
  b.cols = static_cast<uint32_t>(cols);
  b.group = static_cast<uint16_t>(group);
  b.data.resize(EncodedBytes(encoding, rows, cols, group));
  EncodeMatrix(encoding, x, rows, cols, group, b.data.data());
  return b;
}

namespace {

// The first 16 bytes of SHA-256 over `parts` joined by ':'.
PairDigest DigestOf(std::initializer_list<std::string_view> parts) {
  Sha256 h;
  bool first = true;
  for (std::string_view part : parts) {
    if (!first) h.Update(":");
    h.Update(part);
    first = false;
  }
  const auto full = h.Finish();
  PairDigest d;
  std::memcpy(d.data(), full.data(), d.size());
  return d;
}

}  // namespace

PairDigest MakePairDigest(std::string_view producer_digest, std::string_view consumer_digest,
                          std::string_view artifact_id) {
  return DigestOf({producer_digest, consumer_digest, artifact_id});
}

PairDigest MakeBasisDigest(std::string_view producer_digest, std::string_view basis_id) {
  return DigestOf({"basis", producer_digest, basis_id});
}

std::string PairDigestHex(const PairDigest& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

const PayloadBlock* Payload::Find(BlockKind kind, int layer) const {
  for (const PayloadBlock& b : blocks) {
    if (b.kind == kind && b.layer == layer) return &b;
  }
  return nullptr;
}

std::vector<uint8_t> SerializePayload(const Payload& p) {
  size_t body = p.token_ids.size() * 4 + p.blocks.size() * kWireDescriptorBytes;
  for (const PayloadBlock& b : p.blocks) body += b.data.size();
  std::vector<uint8_t> out(kWireHeaderBytes + body, 0);
  std::memcpy(out.data(), kMagic, 4);
  Put<uint16_t>(out, 4, kWireVersion);
  Put<uint8_t>(out, 6, static_cast<uint8_t>(p.mode));
  Put<uint8_t>(out, 7, p.on_basis ? kWireFlagOnBasis : 0);
  Put<uint16_t>(out, 8, p.num_layers);
  Put<uint16_t>(out, 10, static_cast<uint16_t>(p.blocks.size()));
  Put<uint32_t>(out, 12, static_cast<uint32_t>(p.token_ids.size()));
  Put<uint32_t>(out, 16, p.start_position);
  Put<uint16_t>(out, 20, p.rung);
  Put<uint64_t>(out, 24, body);
  std::memcpy(out.data() + 32, p.pair_digest.data(), 16);

  size_t at = kWireHeaderBytes;
  // memcpy from an empty vector's data() (null) is undefined even for 0 bytes.
  if (!p.token_ids.empty()) {
    std::memcpy(out.data() + at, p.token_ids.data(), p.token_ids.size() * 4);
  }
  at += p.token_ids.size() * 4;
  for (const PayloadBlock& b : p.blocks) {
    Put<uint8_t>(out, at, static_cast<uint8_t>(b.kind));
    Put<uint8_t>(out, at + 1, static_cast<uint8_t>(b.encoding));
    Put<uint16_t>(out, at + 2, b.layer);
    Put<uint32_t>(out, at + 4, b.rows);
    Put<uint32_t>(out, at + 8, b.cols);
    Put<uint16_t>(out, at + 12, b.group);
    Put<uint32_t>(out, at + 16, static_cast<uint32_t>(b.data.size()));
    at += kWireDescriptorBytes;
  }
  for (const PayloadBlock& b : p.blocks) {
    if (!b.data.empty()) std::memcpy(out.data() + at, b.data.data(), b.data.size());
    at += b.data.size();
  }
  Put<uint32_t>(out, 48, Crc32c(out.data() + kWireHeaderBytes, body));
  Put<uint32_t>(out, 52, HeaderCrc(out.data()));
  return out;
}

absl::Status VerifyPayloadChecksums(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kWireHeaderBytes) return absl::OkStatus();
  const uint8_t* h = bytes.data();
  if (Get<uint32_t>(h, 52) != HeaderCrc(h)) {
    return absl::DataLossError("SCD payload: header checksum mismatch (corrupted in transit)");
  }
  const size_t body = bytes.size() - kWireHeaderBytes;
  if (Get<uint32_t>(h, 48) != Crc32c(h + kWireHeaderBytes, body)) {
    return absl::DataLossError(absl::StrCat("SCD payload: body checksum mismatch over ", body,
                                            " bytes (corrupted in transit)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PayloadHeaderSummary> PeekPayloadHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kWireHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0 ||
      Get<uint32_t>(bytes.data(), 52) != HeaderCrc(bytes.data())) {
    return absl::InvalidArgumentError("SCD payload: no valid header");
  }
  const uint8_t* h = bytes.data();
  const uint8_t mode = Get<uint8_t>(h, 6);
  if (mode > static_cast<uint8_t>(CodecMode::kScd)) {
    return absl::InvalidArgumentError(absl::StrCat("SCD payload: unknown mode ", int{mode}));
  }
  PayloadHeaderSummary s;
  s.mode = static_cast<CodecMode>(mode);
  s.num_tokens = static_cast<int>(Get<uint32_t>(h, 12));
  s.rung = Get<uint16_t>(h, 20);
  return s;
}

absl::StatusOr<Payload> ParsePayload(absl::Span<const uint8_t> bytes) {
  auto bad = [](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("SCD payload: ", parts...));
  };
  if (bytes.size() < kWireHeaderBytes) {
    return bad("truncated header (", bytes.size(), " of ", kWireHeaderBytes, " bytes)");
  }
  const uint8_t* h = bytes.data();
  if (std::memcmp(h, kMagic, 4) != 0) return bad("bad magic (not an SCD payload)");
  if (Get<uint32_t>(h, 52) != HeaderCrc(h)) return bad("header checksum mismatch");
  const uint16_t version = Get<uint16_t>(h, 4);
  if (version != kWireVersion) {
    return bad("unsupported version ", version, " (this build reads ", kWireVersion, ")");
  }
  const uint8_t mode = Get<uint8_t>(h, 6);
  if (mode > static_cast<uint8_t>(CodecMode::kScd)) return bad("unknown mode ", int{mode});
  const uint64_t body = Get<uint64_t>(h, 24);
  if (body != bytes.size() - kWireHeaderBytes) {
    return bad("body is ", bytes.size() - kWireHeaderBytes, " bytes, header says ", body,
               " (truncated or padded)");
  }
  const uint8_t* b = h + kWireHeaderBytes;
  if (Get<uint32_t>(h, 48) != Crc32c(b, body)) return bad("body checksum mismatch (corrupted)");

  Payload p;
  p.mode = static_cast<CodecMode>(mode);
  p.num_layers = Get<uint16_t>(h, 8);
  const uint16_t num_blocks = Get<uint16_t>(h, 10);
  const uint32_t num_tokens = Get<uint32_t>(h, 12);
  p.start_position = Get<uint32_t>(h, 16);
  p.rung = Get<uint16_t>(h, 20);
  if (p.rung != 0 && p.mode != CodecMode::kScd && p.mode != CodecMode::kScdReuse) {
    return bad("a ", std::string(CodecModeName(p.mode)), " payload names rung ", p.rung,
               " (rungs are scd's and scd-reuse's)");
  }
  const uint8_t flags = Get<uint8_t>(h, 7);
  if ((flags & ~kWireFlagOnBasis) != 0) return bad("unknown header flags 0x", absl::Hex(flags));
  p.on_basis = (flags & kWireFlagOnBasis) != 0;
  if (p.on_basis && p.mode != CodecMode::kScd && p.mode != CodecMode::kScdReuse) {
    return bad("a ", std::string(CodecModeName(p.mode)),
               " payload is flagged as on a shared basis (only scd and scd-reuse codes are)");
  }
  std::memcpy(p.pair_digest.data(), h + 32, 16);
  const uint64_t fixed = uint64_t{num_tokens} * 4 + uint64_t{num_blocks} * kWireDescriptorBytes;
  if (fixed > body) return bad("token ids and descriptors overrun the body");
  p.token_ids.resize(num_tokens);
  if (num_tokens > 0) std::memcpy(p.token_ids.data(), b, uint64_t{num_tokens} * 4);
  uint64_t at = uint64_t{num_tokens} * 4;
  uint64_t data_at = fixed;
  p.blocks.resize(num_blocks);
  for (uint16_t i = 0; i < num_blocks; ++i, at += kWireDescriptorBytes) {
    PayloadBlock& blk = p.blocks[i];
    const uint8_t kind = Get<uint8_t>(b, at);
    if (kind > static_cast<uint8_t>(BlockKind::kResidual)) {
      return bad("block ", i, " has unknown kind ", int{kind});
    }
    blk.kind = static_cast<BlockKind>(kind);
    SCD_ASSIGN_OR_RETURN(blk.encoding, EncodingFromByte(Get<uint8_t>(b, at + 1)));
    blk.layer = Get<uint16_t>(b, at + 2);
    blk.rows = Get<uint32_t>(b, at + 4);
    blk.cols = Get<uint32_t>(b, at + 8);
    blk.group = Get<uint16_t>(b, at + 12);
    const uint32_t size = Get<uint32_t>(b, at + 16);
    if (blk.layer >= p.num_layers && blk.kind != BlockKind::kSurprisal) {
      return bad("block ", i, " names layer ", blk.layer, " of ", p.num_layers);
    }
    if (blk.rows != num_tokens || blk.cols == 0 || blk.cols > 65536) {
      return bad("block ", i, " has shape ", blk.rows, "x", blk.cols, " for ", num_tokens,
                 " tokens");
    }
    if (size != EncodedBytes(blk.encoding, blk.rows, blk.cols, blk.group) ||
        (blk.encoding >= Encoding::kKeyInt8 && blk.group == 0)) {
      return bad("block ", i, " size ", size, " does not match its ",
                 std::string(EncodingName(blk.encoding)), " shape");
    }
    if (data_at + size > body) return bad("block ", i, " overruns the body");
    blk.data.assign(b + data_at, b + data_at + size);
    data_at += size;
  }
  if (data_at != body) return bad(body - data_at, " trailing bytes after the last block");
  return p;
}

}  // namespace scd
