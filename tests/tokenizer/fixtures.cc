// Builders for the tokenizer test fixtures described in fixtures.h.
#include "tests/tokenizer/fixtures.h"

#include <catch2/catch.hpp>

#include "common/tokenizer/known_regex.h"
#include "common/tokenizer/unicode.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using nlohmann::json;
using tokenizer_internal::ByteToUnicode;

struct MergeSpec {
  const char* left;
  const char* right;
};

// The merges of fixtures.h, in rank order (Ġ is U+0120, Ċ is U+010A).
const MergeSpec kMerges[] = {
    {"h", "e"},  {"\u0120", "c"},    {"a", "t"},           {"\u0120c", "at"},
    {"t", "he"}, {"'", "s"},         {"\u0120", "h"},      {"\u0120", "he"},
    {"r", "e"},  {"\u0120he", "re"}, {"\u010A", "\u010A"}, {"\u0120", "\u0120"},
    {"!", "!"},  {"2", "0"},         {"2", "4"},           {"'", "L"},
};

json ByteLevelModel(bool merges_as_pairs, bool ignore_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteToUnicode(static_cast<uint8_t>(b))] = b;
  json merges = json::array();
  int next_id = 256;
  for (const MergeSpec& m : kMerges) {
    vocab[std::string(m.left) + m.right] = next_id++;
    if (merges_as_pairs) {
      merges.push_back({m.left, m.right});
    } else {
      merges.push_back(std::string(m.left) + " " + m.right);
    }
  }
  vocab["\u0120the"] = 272;
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"ignore_merges", ignore_merges},
          {"vocab", vocab},
          {"merges", merges}};
}

json ByteLevelStep(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", true},
          {"use_regex", use_regex}};
}

}  // namespace

json AddedTokenJson(int id, const std::string& content, bool special) {
  return {{"id", id},        {"content", content},     {"single_word", false}, {"lstrip", false},
          {"rstrip", false}, {"normalized", !special}, {"special", special}};
}

json Gpt2FixtureJson() {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", {AddedTokenJson(273, "<|endoftext|>", true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer", ByteLevelStep(/*use_regex=*/true)},
          {"post_processor", ByteLevelStep(/*use_regex=*/true)},
          {"decoder", ByteLevelStep(/*use_regex=*/true)},
          {"model", ByteLevelModel(/*merges_as_pairs=*/false, /*ignore_merges=*/false)}};
}

json Llama3FixtureJson() {
  const std::string pattern(tokenizer_internal::kLlama3Pattern);
  json split = {{"type", "Split"},
                {"pattern", {{"Regex", pattern}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  json template_processing = {
      {"type", "TemplateProcessing"},
      {"single",
       {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
      {"pair", json::array()},
      {"special_tokens",
       {{"<|begin_of_text|>",
         {{"id", "<|begin_of_text|>"}, {"ids", {273}}, {"tokens", {"<|begin_of_text|>"}}}}}}};
  return {{"version", "1.0"},
          {"added_tokens",
           {AddedTokenJson(273, "<|begin_of_text|>", true),
            AddedTokenJson(274, "<|end_of_text|>", true), AddedTokenJson(275, "<|eot_id|>", true)}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"}, {"pretokenizers", {split, ByteLevelStep(/*use_regex=*/false)}}}},
          {"post_processor",
           {{"type", "Sequence"},
            {"processors", {ByteLevelStep(/*use_regex=*/true), template_processing}}}},
          {"decoder", ByteLevelStep(/*use_regex=*/true)},
          {"model", ByteLevelModel(/*merges_as_pairs=*/true, /*ignore_merges=*/true)}};
}

json TinySentencePieceJson(bool fuse_unk) {
  json vocab = {{"<unk>", 0}, {"<s>", 1},     {"</s>", 2}, {"\u2581", 3},  {"a", 4},
                {"b", 5},     {"\u2581a", 6}, {"ab", 7},   {"\u2581ab", 8}};
  json model = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", "<unk>"},
                {"fuse_unk", fuse_unk},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", {"\u2581 a", "a b", "\u2581a b"}}};
  json normalizer = {
      {"type", "Sequence"},
      {"normalizers",
       {{{"type", "Prepend"}, {"prepend", "\u2581"}},
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}};
  json decoder = {{"type", "Sequence"},
                  {"decoders",
                   {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                    {{"type", "ByteFallback"}},
                    {{"type", "Fuse"}},
                    {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  return {{"version", "1.0"},
          {"added_tokens",
           {AddedTokenJson(0, "<unk>", true), AddedTokenJson(1, "<s>", true),
            AddedTokenJson(2, "</s>", true)}},
          {"normalizer", normalizer},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", decoder},
          {"model", model}};
}

json StoriesTokenizerJson() {
  const std::string text = ReadFileOrFail(SharedPath("models/stories260K/tokenizer.json"));
  return json::parse(text);
}

std::unique_ptr<Tokenizer> LoadOrFail(const json& tokenizer_json) {
  auto tokenizer = Tokenizer::FromJson(tokenizer_json.dump());
  if (!tokenizer.ok()) FAIL("tokenizer did not load: " << tokenizer.status().ToString());
  return std::move(tokenizer).value();
}

}  // namespace scd::testing
