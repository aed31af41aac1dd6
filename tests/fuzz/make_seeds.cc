// Writes the binary seeds of the fuzz corpora, so that they are made by the code that writes
// these formats in production rather than by hand:
//   corpus/wire_format/   SerializePayload of payloads in every codec mode and encoding, each
//                         behind both values of the harness's mode byte (wire_format_fuzz.cc)
//   corpus/artifact/      tiny calibration artifacts saved by ScdArtifact::Save
//   corpus/safetensors_header/  small files from WriteSafetensors (F32, F16, BF16, metadata),
//                         and the real stories260K header with the first 1 KB of its data
// Usage: scd_fuzz_seeds CORPUS_DIR SHARED_DIR (e.g. tests/fuzz/corpus ../shared). Deterministic.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "common/model/safetensors.h"
#include "common/scd/artifact.h"
#include "common/scd/wire_format.h"

namespace {

using scd::BlockKind;
using scd::CodecMode;
using scd::Encoding;

void WriteFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::fprintf(stderr, "scd_fuzz_seeds: cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::printf("wrote %s (%zu bytes)\n", path.c_str(), size);
}

std::vector<float> Ramp(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i % 13) - 6.0f);
  return v;
}

void WritePayload(const std::string& dir, const std::string& name, const scd::Payload& p) {
  const std::vector<uint8_t> bytes = scd::SerializePayload(p);
  if (!scd::ParsePayload(bytes).ok()) {
    std::fprintf(stderr, "scd_fuzz_seeds: %s does not parse back\n", name.c_str());
    std::exit(1);
  }
  // Mode byte 0: parse as received; 1: the harness rewrites the CRCs first.
  for (uint8_t mode : {0, 1}) {
    std::vector<uint8_t> seed = {mode};
    seed.insert(seed.end(), bytes.begin(), bytes.end());
    WriteFile(dir + "/" + (mode == 0 ? "" : "crcfix_") + name, seed.data(), seed.size());
  }
}

void WirePayloads(const std::string& dir) {
  const int tokens = 3, kv_dim = 8, rank = 4, d = 16;
  scd::Payload base;
  base.num_layers = 2;
  base.start_position = 5;
  base.pair_digest = scd::MakePairDigest("producer", "consumer", "artifact");
  base.token_ids = {1, 403, 87};

  scd::Payload oracle = base;
  oracle.mode = CodecMode::kOracle;
  WritePayload(dir, "oracle.bin", oracle);

  scd::Payload raw = base;
  raw.mode = CodecMode::kRaw;
  const std::vector<float> kv = Ramp(tokens * kv_dim, 0.25f);
  for (int l = 0; l < 2; ++l) {
    raw.blocks.push_back(
        scd::MakeBlock(BlockKind::kKey, Encoding::kF16, l, kv.data(), tokens, kv_dim));
    raw.blocks.push_back(
        scd::MakeBlock(BlockKind::kValue, Encoding::kF32, l, kv.data(), tokens, kv_dim));
  }
  const std::vector<float> surprisal = Ramp(tokens, 0.5f);
  raw.blocks.push_back(
      scd::MakeBlock(BlockKind::kSurprisal, Encoding::kF32, 0, surprisal.data(), tokens, 1));
  WritePayload(dir, "raw.bin", raw);

  for (auto [mode, key_enc, value_enc, name] :
       {std::tuple{CodecMode::kQuant8, Encoding::kKeyInt8, Encoding::kValueInt8, "quant8.bin"},
        std::tuple{CodecMode::kQuant4, Encoding::kKeyInt4, Encoding::kValueInt4, "quant4.bin"}}) {
    scd::Payload q = base;
    q.mode = mode;
    for (int l = 0; l < 2; ++l) {
      q.blocks.push_back(scd::MakeBlock(BlockKind::kKey, key_enc, l, kv.data(), tokens, kv_dim, 2));
      q.blocks.push_back(
          scd::MakeBlock(BlockKind::kValue, value_enc, l, kv.data(), tokens, kv_dim, 4));
    }
    WritePayload(dir, name, q);
  }

  scd::Payload scd_mode = base;
  scd_mode.mode = CodecMode::kScd;
  const std::vector<float> codes = Ramp(tokens * rank, 0.1f);
  for (int l = 0; l < 2; ++l) {
    scd_mode.blocks.push_back(
        scd::MakeBlock(BlockKind::kKey, Encoding::kInt8Row, l, codes.data(), tokens, rank));
    scd_mode.blocks.push_back(
        scd::MakeBlock(BlockKind::kValue, Encoding::kInt8Row, l, codes.data(), tokens, rank));
  }
  scd_mode.blocks.push_back(
      scd::MakeBlock(BlockKind::kPatch, Encoding::kF16, 1, codes.data(), tokens, rank));
  WritePayload(dir, "scd.bin", scd_mode);

  scd::Payload recompute = base;
  recompute.mode = CodecMode::kRecompute;
  const std::vector<float> residual = Ramp(tokens * d, 0.05f);
  recompute.blocks.push_back(
      scd::MakeBlock(BlockKind::kKey, Encoding::kF16, 0, kv.data(), tokens, kv_dim));
  recompute.blocks.push_back(
      scd::MakeBlock(BlockKind::kValue, Encoding::kF16, 0, kv.data(), tokens, kv_dim));
  recompute.blocks.push_back(
      scd::MakeBlock(BlockKind::kResidual, Encoding::kF32, 1, residual.data(), tokens, d));
  WritePayload(dir, "recompute.bin", recompute);
}

scd::LinearCode Code(int in, int rank, int out) {
  scd::LinearCode c;
  c.in_dim = in;
  c.rank = rank;
  c.out_dim = out;
  c.mu_in = Ramp(in, 0.01f);
  c.encoder = Ramp(size_t(in) * rank, 0.1f);
  c.decoder = Ramp(size_t(rank) * out, 0.1f);
  c.mu_out = Ramp(out, 0.02f);
  return c;
}

void Artifacts(const std::string& dir) {
  scd::ScdArtifact a;
  a.producer_name = "stories260K";
  a.consumer_name = "stories260K-babi-qa";
  a.producer_digest = std::string(64, 'a');
  a.consumer_digest = std::string(64, 'b');
  a.num_layers = 2;
  a.hidden_size = 8;
  a.kv_dim = 4;
  a.rank_k = 2;
  a.rank_v = 3;
  a.rank_h = 2;
  for (int l = 0; l < a.num_layers; ++l) {
    a.reuse.push_back({Code(a.kv_dim, a.rank_k, a.kv_dim), Code(a.kv_dim, a.rank_v, a.kv_dim)});
  }
  a.recompute_first = 0;
  a.recompute_end = 1;
  a.report = {{"relative_error", 0.25}};
  const std::string reuse_only = dir + "/reuse_only.scd.safetensors";
  if (!a.Save(reuse_only).ok()) std::exit(1);
  std::printf("wrote %s\n", reuse_only.c_str());

  for (int l : {1, 0}) {
    scd::PatchLayer p;
    p.code = Code(a.hidden_size, a.rank_h, a.hidden_size);
    p.aligner.code_dim = a.rank_h;
    p.aligner.out_dim = a.hidden_size;
    p.aligner.hidden_dim = l == 1 ? 3 : 0;
    p.aligner.a = Ramp(size_t(a.rank_h) * a.hidden_size, 0.1f);
    p.aligner.c = Ramp(a.hidden_size, 0.1f);
    if (p.aligner.hidden_dim > 0) {
      p.aligner.w1 = Ramp(size_t(a.rank_h) * p.aligner.hidden_dim, 0.1f);
      p.aligner.b1 = Ramp(p.aligner.hidden_dim, 0.1f);
      p.aligner.w2 = Ramp(size_t(p.aligner.hidden_dim) * a.hidden_size, 0.1f);
    }
    p.aligner.b2 = Ramp(a.hidden_size, 0.1f);
    a.patches[l] = p;
    a.patch_order.push_back(l);
  }
  a.patch_budget = 1;
  a.code_encoding = Encoding::kF16;
  const std::string with_patches = dir + "/patches.scd.safetensors";
  if (!a.Save(with_patches).ok()) std::exit(1);
  std::printf("wrote %s\n", with_patches.c_str());
}

void Safetensors(const std::string& dir, const std::string& shared) {
  const std::vector<float> v = Ramp(24, 0.5f);
  std::map<std::string, scd::SafetensorsTensor> tensors;
  tensors["model.embed_tokens.weight"] =
      scd::SafetensorsTensor::FromFloats(scd::DType::kF32, {4, 3}, absl::MakeSpan(v).first(12));
  tensors["model.norm.weight"] =
      scd::SafetensorsTensor::FromFloats(scd::DType::kF16, {6}, absl::MakeSpan(v).first(6));
  tensors["lm_head.weight"] =
      scd::SafetensorsTensor::FromFloats(scd::DType::kBF16, {2, 2, 2}, absl::MakeSpan(v).first(8));
  tensors["empty"] = scd::SafetensorsTensor::FromFloats(scd::DType::kF32, {0, 5}, {});
  const std::string small = dir + "/small.safetensors";
  if (!scd::WriteSafetensors(small, tensors, {{"format", "pt"}, {"scd", "{}"}}).ok()) std::exit(1);
  std::printf("wrote %s\n", small.c_str());

  // An unsupported dtype (readable only when not asked for) and a gap between tensors.
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)"
      R"("x":{"dtype":"F32","shape":[1],"data_offsets":[24,28]},"__metadata__":{"k":"v"}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header;
  file += std::string(28, '\x01');
  WriteFile(dir + "/i64_gap.safetensors", file.data(), file.size());

  // The real stories260K header, with the first 1 KB of the data region only: a truncated
  // checkpoint (rejected at the first tensor past the end), and the real names and shapes.
  const std::string model = shared + "/models/stories260K/model.safetensors";
  std::ifstream in(model, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (!in || header_len > 60000) {
    std::fprintf(stderr, "scd_fuzz_seeds: cannot read the header of %s\n", model.c_str());
    std::exit(1);
  }
  std::string real(8 + header_len + 1024, '\0');
  std::memcpy(real.data(), &header_len, 8);
  in.read(real.data() + 8, static_cast<std::streamsize>(header_len + 1024));
  WriteFile(dir + "/stories260K_truncated.safetensors", real.data(), real.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR SHARED_DIR\n", argv[0]);
    return 2;
  }
  const std::string corpus = argv[1];
  WirePayloads(corpus + "/wire_format");
  Artifacts(corpus + "/artifact");
  Safetensors(corpus + "/safetensors_header", argv[2]);
  return 0;
}
