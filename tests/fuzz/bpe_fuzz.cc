// Fuzzes BPE encoding and decoding (common/tokenizer/) on arbitrary bytes, with three
// tokenizers: the real stories260K tokenizer.json (SentencePiece-style BPE with byte fallback;
// path compiled in, or $SCD_FUZZ_TOKENIZER), and two byte-level fixtures built here in the
// shape of tests/tokenizer/fixtures.h (GPT-2: ByteLevel regex pre-tokenizer; Llama-3: Split
// regex + ByteLevel, ignore_merges, BOS template).
// Input: byte 0 chooses the tokenizer (bits 0-1) and add_special_tokens (bit 2); the rest is
// the text. Properties checked, as tokenizer.h promises them:
//   - every encoded id is in [0, vocab_size);
//   - streaming decode (StreamDecoder) equals Decode, for the encoded ids and for the input
//     read as arbitrary ids (out-of-range ones included);
//   - valid UTF-8 round-trips: Decode(Encode(text)) == text, keeping special tokens (for the
//     SentencePiece tokenizer, only text without U+2581, which its decoder turns into ' ', and
//     without special tokens, after which HF's normalizer prepends U+2581 again).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/known_regex.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using nlohmann::json;

json AddedToken(int id, const std::string& content) {
  return {{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", false}, {"special", true}};
}

json ByteLevelStep(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

// 256 byte symbols (id == byte), then a few merges, as in tests/tokenizer/fixtures.h.
json ByteLevelModel(bool ignore_merges) {
  using scd::tokenizer_internal::ByteToUnicode;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode(static_cast<uint8_t>(b))] = b;
  const char* merges[][2] = {{"h", "e"},         {"\u0120", "c"},      {"a", "t"},
                             {"\u0120c", "at"},  {"t", "he"},          {"'", "s"},
                             {"\u0120", "h"},    {"\u0120", "he"},     {"r", "e"},
                             {"\u0120he", "re"}, {"\u010A", "\u010A"}, {"\u0120", "\u0120"}};
  json merge_list = json::array();
  int next_id = 256;
  for (const auto& m : merges) {
    vocab[std::string(m[0]) + m[1]] = next_id++;
    merge_list.push_back(std::string(m[0]) + " " + m[1]);
  }
  vocab["\u0120the"] = next_id;
  return {{"type", "BPE"},     {"dropout", nullptr},     {"unk_token", nullptr},
          {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", ignore_merges},
          {"vocab", vocab},    {"merges", merge_list}};
}

json Gpt2Json() {
  return {{"version", "1.0"},
          {"added_tokens", {AddedToken(269, "<|endoftext|>")}},
          {"normalizer", nullptr},
          {"pre_tokenizer", ByteLevelStep(true)},
          {"post_processor", ByteLevelStep(true)},
          {"decoder", ByteLevelStep(true)},
          {"model", ByteLevelModel(false)}};
}

json Llama3Json() {
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", std::string(scd::tokenizer_internal::kLlama3Pattern)}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json bos_template = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {269}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  return {
      {"version", "1.0"},
      {"added_tokens",
       {AddedToken(269, "<|begin_of_text|>"), AddedToken(270, "<|end_of_text|>"),
        AddedToken(271, "<|eot_id|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", {split, ByteLevelStep(false)}}}},
      {"post_processor",
       {{"type", "Sequence"}, {"processors", {ByteLevelStep(true), bos_template}}}},
      {"decoder", ByteLevelStep(true)},
      {"model", ByteLevelModel(true)}};
}

std::unique_ptr<scd::Tokenizer> LoadOrDie(const char* what,
                                          absl::StatusOr<std::unique_ptr<scd::Tokenizer>> t) {
  if (!t.ok()) {
    std::fprintf(stderr, "bpe_fuzz: cannot load the %s tokenizer: %s\n", what,
                 std::string(t.status().message()).c_str());
    std::exit(1);
  }
  return std::move(t).value();
}

struct Tokenizers {
  std::unique_ptr<scd::Tokenizer> stories, gpt2, llama3;
};

const Tokenizers& Get() {
  static const Tokenizers* tokenizers = [] {
    const char* env = std::getenv("SCD_FUZZ_TOKENIZER");
    const std::string path = env != nullptr ? env : SCD_FUZZ_TOKENIZER_JSON;
    auto* t = new Tokenizers;
    t->stories = LoadOrDie(path.c_str(), scd::Tokenizer::FromFile(path));
    t->gpt2 = LoadOrDie("GPT-2 byte-level fixture", scd::Tokenizer::FromJson(Gpt2Json().dump()));
    t->llama3 =
        LoadOrDie("Llama-3 byte-level fixture", scd::Tokenizer::FromJson(Llama3Json().dump()));
    return t;
  }();
  return *tokenizers;
}

// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t cp = 0;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

std::string StreamDecode(const scd::Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  scd::StreamDecoder stream(t, skip);
  std::string out;
  for (int32_t id : ids) out += stream.Push(id);
  return out + stream.Flush();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizers& all = Get();
  const uint8_t flags = data[0];
  const scd::Tokenizer& t = (flags & 3) == 1   ? *all.gpt2
                            : (flags & 3) == 2 ? *all.llama3
                                               : *all.stories;
  const bool add_special = (flags & 4) != 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const int vocab = t.vocab_size();

  const std::vector<int32_t> ids = t.Encode(text, add_special);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < vocab);
  for (bool skip : {true, false}) {
    FUZZ_CHECK(StreamDecode(t, ids, skip) == t.Decode(ids, skip));
  }
  const bool sentencepiece = &t == all.stories.get();
  if (IsValidUtf8(text) &&
      !(sentencepiece && text.find("\xe2\x96\x81") != std::string_view::npos)) {
    const std::vector<int32_t> plain = t.Encode(text, /*add_special_tokens=*/false);
    // HF normalizes each piece between added tokens on its own, so the SentencePiece
    // normalizer prepends U+2581 after every special token (HF's own round trip adds a space).
    bool has_special = false;
    for (int32_t id : plain) has_special |= t.IsSpecial(id);
    const std::string decoded = t.Decode(plain, /*skip_special_tokens=*/false);
    if (!(sentencepiece && has_special) && decoded != text) {
      std::fprintf(stderr, "round trip: text [%s] decodes to [%s]\n", std::string(text).c_str(),
                   decoded.c_str());
      FUZZ_CHECK(decoded == text);
    }
  }

  // The text as arbitrary little-endian 16-bit ids, a few of them out of range.
  std::vector<int32_t> arbitrary;
  for (size_t i = 1; i + 1 < size; i += 2) {
    const int raw = data[i] | (data[i + 1] << 8);
    arbitrary.push_back(raw % (vocab + 8) - 4);
  }
  for (bool skip : {true, false}) {
    FUZZ_CHECK(StreamDecode(t, arbitrary, skip) == t.Decode(arbitrary, skip));
  }
  return 0;
}
