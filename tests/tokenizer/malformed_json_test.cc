// Malformed or unsupported tokenizer.json must produce InvalidArgumentError naming the field
// or type, never a crash or an exception escaping the library.
#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/tokenizer/tokenizer.h"
#include "tests/test_support.h"
#include "tests/tokenizer/fixtures.h"

namespace scd {
namespace {

using nlohmann::json;

// Loads `text` and requires an InvalidArgumentError whose message contains `needle`.
void ExpectInvalid(const std::string& text, const std::string& needle) {
  INFO("json: " << text.substr(0, 300));
  auto tok = Tokenizer::FromJson(text);
  REQUIRE_FALSE(tok.ok());
  CHECK(tok.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(tok.status().message());
  INFO("message: " << message);
  CHECK(message.find(needle) != std::string::npos);
}

void ExpectInvalid(const json& tokenizer, const std::string& needle) {
  ExpectInvalid(tokenizer.dump(), needle);
}

TEST_CASE("invalid JSON text is an error", "[cpu]") {
  ExpectInvalid(std::string(""), "invalid JSON");
  ExpectInvalid(std::string("{"), "invalid JSON");
  ExpectInvalid(std::string("not json"), "invalid JSON");
  ExpectInvalid(std::string("{\"model\": {\"vocab\": {\"a\": 0}"), "invalid JSON");
  ExpectInvalid(std::string("[1, 2, 3]"), "expected an object");
  ExpectInvalid(std::string("{}"), "model");
  ExpectInvalid(std::string("{\"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": "
                            "null, \"x\": \"\xff\"}"),
                "invalid JSON");  // ill-formed UTF-8 inside a JSON string
}

TEST_CASE("every truncation of a real tokenizer.json is an error", "[cpu]") {
  const std::string text =
      testing::ReadFileOrFail(testing::SharedPath("models/stories260K/tokenizer.json"));
  REQUIRE(Tokenizer::FromJson(text).ok());
  for (size_t cut = 0; cut < text.size(); cut += 37) {
    auto tok = Tokenizer::FromJson(text.substr(0, cut));
    CHECK_FALSE(tok.ok());
    CHECK(tok.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("random corruptions never crash", "[cpu]") {
  const std::string text = testing::Gpt2FixtureJson().dump();
  std::mt19937 rng(7);
  const char kBytes[] = "{}[]\",:0123456789-.etruefalsnul \\x";
  int loaded = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string corrupt = text;
    for (int k = 0; k < 3; ++k) {
      corrupt[rng() % corrupt.size()] = kBytes[rng() % (sizeof(kBytes) - 1)];
    }
    auto tok = Tokenizer::FromJson(corrupt);
    if (tok.ok()) {
      ++loaded;  // a harmless corruption (e.g. inside a token string): still usable
      (*tok)->Decode((*tok)->Encode("the cat's here 2024!"));
    } else {
      CHECK(tok.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  CHECK(loaded < 2000);
}

TEST_CASE("unsupported component types are named in the error", "[cpu]") {
  json base = testing::Gpt2FixtureJson();
  {
    json t = base;
    t["model"]["type"] = "Unigram";
    ExpectInvalid(t, "Unigram");
  }
  {
    json t = base;
    t["model"]["type"] = "WordPiece";
    ExpectInvalid(t, "WordPiece");
  }
  {
    json t = base;
    t["pre_tokenizer"] = {{"type", "Whitespace"}};
    ExpectInvalid(t, "Whitespace");
  }
  {
    json t = base;
    t["normalizer"] = {{"type", "Lowercase"}};
    ExpectInvalid(t, "Lowercase");
  }
  {
    json t = base;
    t["decoder"] = {{"type", "CTC"}};
    ExpectInvalid(t, "CTC");
  }
  {
    json t = base;
    t["post_processor"] = {{"type", "Mystery"}};
    ExpectInvalid(t, "Mystery");
  }
  {
    json t = base;
    t["pre_tokenizer"] = {{"type", "Split"},
                          {"pattern", {{"Regex", "\\p{Han}+|\\w+"}}},
                          {"behavior", "Isolated"},
                          {"invert", false}};
    ExpectInvalid(t, "\\p{Han}+|\\w+");  // the unknown regex itself
  }
  {
    json t = base;
    t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Odd"}};
    ExpectInvalid(t, "Odd");
  }
  {
    json t = base;
    t["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", " "}};
    ExpectInvalid(t, "Replace regex");
  }
  {
    json t = base;
    t["model"]["dropout"] = 0.1;
    ExpectInvalid(t, "dropout");
  }
  {
    json t = base;
    t["model"]["continuing_subword_prefix"] = "##";
    ExpectInvalid(t, "continuing_subword_prefix");
  }
}

// The model's fields: a vocabulary id of the wrong type or sign, a merge that is not a pair of
// known tokens, a vocabulary that is not an object, an unknown unk_token.
void ExpectModelFieldsNamed(const json& base) {
  {
    json t = base;
    t["model"]["vocab"]["h"] = "seven";
    ExpectInvalid(t, "model.vocab.h");
  }
  {
    json t = base;
    t["model"]["vocab"]["h"] = -3;
    ExpectInvalid(t, "out of range");
  }
  {
    json t = base;
    t["model"]["merges"][2] = "a";
    ExpectInvalid(t, "model.merges[2]");
  }
  {
    json t = base;
    t["model"]["merges"][3] = "x y";  // "xy" is not in the vocabulary
    ExpectInvalid(t, "model.merges[3]");
  }
  {
    json t = base;
    t["model"]["merges"] = json::array({json::array({"a", 1})});
    ExpectInvalid(t, "model.merges[0]");
  }
  {
    json t = base;
    t["model"]["vocab"] = json::array();
    ExpectInvalid(t, "model.vocab");
  }
  {
    json t = base;
    t["model"]["unk_token"] = "<nope>";
    ExpectInvalid(t, "model.unk_token");
  }
}

// added_tokens of the wrong shape, a post-processor naming a special token that is not there,
// and a pre-tokenizer without its type.
void ExpectTokenReferencesNamed(const json& base) {
  {
    json t = base;
    t["added_tokens"] = "none";
    ExpectInvalid(t, "added_tokens");
  }
  {
    json t = base;
    t["added_tokens"][0].erase("content");
    ExpectInvalid(t, "added_tokens[0].content");
  }
  {
    json t = base;
    t["added_tokens"][0]["special"] = "yes";
    ExpectInvalid(t, "added_tokens[0].special");
  }
  {
    json t = testing::Llama3FixtureJson();
    t["post_processor"]["processors"][1]["special_tokens"] = json::object();
    ExpectInvalid(t, "special_tokens.<|begin_of_text|>");
  }
  {
    json t = base;
    t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"kind", "ByteLevel"}}}}};
    ExpectInvalid(t, "pre_tokenizer.pretokenizers[0].type");
  }
}

// A Sequence of each component kind: its list must be an array, and an element's error names
// its place, inside a nested Sequence too.
void ExpectSequenceListsNamed(const json& base) {
  const std::pair<std::string, std::string> sequences[] = {{"normalizer", "normalizers"},
                                                           {"pre_tokenizer", "pretokenizers"},
                                                           {"decoder", "decoders"},
                                                           {"post_processor", "processors"}};
  for (const auto& [component, list] : sequences) {
    INFO(component);
    json t = base;
    t[component] = {{"type", "Sequence"}, {list, "none"}};
    ExpectInvalid(t, component + "." + list + ": expected an array");
    const json bad = {{"kind", "x"}};
    const json inner = {{"type", "Sequence"}, {list, json::array({bad})}};
    t[component] = {{"type", "Sequence"}, {list, json::array({inner})}};
    ExpectInvalid(t, component + "." + list + "[0]." + list + "[0].type");
  }
}

TEST_CASE("wrong field types and dangling references are named", "[cpu]") {
  json base = testing::Gpt2FixtureJson();
  ExpectModelFieldsNamed(base);
  ExpectTokenReferencesNamed(base);
  ExpectSequenceListsNamed(base);
  {
    json t = base;
    t["decoder"] = {{"type", "Strip"}, {"content", "ab"}, {"start", 1}, {"stop", 0}};
    ExpectInvalid(t, "decoder.content");
  }
  {
    json t = base;
    t["normalizer"] = 5;
    ExpectInvalid(t, "normalizer");
  }
}

TEST_CASE("FromFile reports a missing file and prefixes the path", "[cpu]") {
  auto missing = Tokenizer::FromFile("/nonexistent/tokenizer.json");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);

  const std::string path = testing::TempDir() + "/bad_tokenizer.json";
  std::ofstream(path) << "{\"model\": 1}";
  auto bad = Tokenizer::FromFile(path);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find(path) != std::string::npos);
}

}  // namespace
}  // namespace scd
