// Decoder chains beyond the common ones: no decoder (HF joins tokens with ' '), Strip with a
// trailing count, Replace after Fuse (a pattern spanning token boundaries), Metaspace after
// Fuse and per-token Strip. Each is checked one-shot against a hand-derived string and
// streamed, since these are the steps whose streaming forms hold text back. All agree with
// Hugging Face tokenizers 0.23.2 (whose Strip panics on an empty text; ours returns "").
// Tiny fixture tokens: 3 "▁", 4 "a", 5 "b", 6 "▁a".
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <random>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "tests/tokenizer/fixtures.h"

namespace scd {
namespace {

using Ids = std::vector<int32_t>;
using nlohmann::json;

const json kReplace = {{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}};
const json kFuse = {{"type", "Fuse"}};

json Strip(const char* content, int start, int stop) {
  return {{"type", "Strip"}, {"content", content}, {"start", start}, {"stop", stop}};
}

std::unique_ptr<Tokenizer> WithDecoder(json decoder) {
  json tokenizer = testing::TinySentencePieceJson(/*fuse_unk=*/true);
  tokenizer["decoder"] = std::move(decoder);
  return testing::LoadOrFail(tokenizer);
}

json Sequence(std::vector<json> decoders) { return {{"type", "Sequence"}, {"decoders", decoders}}; }

std::vector<std::string> Pieces(const Tokenizer& tok, const Ids& ids) {
  StreamDecoder stream(tok);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.Push(id));
  pieces.push_back(stream.Flush());
  return pieces;
}

// Streams random sequences over the fixture's tokens and compares with Decode.
void CheckStreamingMatchesDecode(const Tokenizer& tok) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    Ids ids;
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) {
      ids.push_back(static_cast<int32_t>(rng() % 9));
    }
    std::string joined;
    for (const std::string& p : Pieces(tok, ids)) {
      CHECK(tokenizer_internal::IsValidUtf8(p));
      joined += p;
    }
    CHECK(joined == tok.Decode(ids));
  }
}

TEST_CASE("no decoder: tokens joined with spaces", "[cpu]") {
  auto tok = WithDecoder(nullptr);
  CHECK(tok->Decode(Ids{6, 5, 3}) == "\u2581a b \u2581");
  CHECK(Pieces(*tok, {6, 5}) == std::vector<std::string>{"\u2581a", " b", ""});
  CheckStreamingMatchesDecode(*tok);
}

TEST_CASE("Strip with a trailing count holds trailing content back", "[cpu]") {
  auto tok = WithDecoder(Sequence({kReplace, kFuse, Strip(" ", 1, 1)}));
  // "▁" "▁a" "▁" "▁" -> "  a  " -> one leading and one trailing space removed.
  CHECK(tok->Decode(Ids{3, 6, 3, 3}) == " a ");
  CHECK(Pieces(*tok, {3, 6, 3, 3}) == std::vector<std::string>{"", " a", "", " ", ""});
  CheckStreamingMatchesDecode(*tok);
}

TEST_CASE("Replace after Fuse matches across token boundaries", "[cpu]") {
  json replace = {{"type", "Replace"}, {"pattern", {{"String", "\u2581\u2581"}}}, {"content", "X"}};
  auto tok = WithDecoder(Sequence({kFuse, replace}));
  // "▁▁▁▁a": two non-overlapping "▁▁" matches.
  CHECK(tok->Decode(Ids{3, 3, 3, 6}) == "XXa");
  CHECK(Pieces(*tok, {3, 3, 3, 6}) == std::vector<std::string>{"", "X", "", "Xa", ""});
  CHECK(tok->Decode(Ids{6, 3}) == "\u2581a\u2581");  // a lone "▁" at the end is kept
  CheckStreamingMatchesDecode(*tok);
}

TEST_CASE("Metaspace decoder per token and after Fuse", "[cpu]") {
  json metaspace = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}};
  auto per_token = WithDecoder(metaspace);
  CHECK(per_token->Decode(Ids{6, 6, 3}) == "a a ");  // only the first token loses its "▁"
  CheckStreamingMatchesDecode(*per_token);
  // After Fuse the whole text is HF's token 0, so every "▁" is dropped.
  auto fused = WithDecoder(Sequence({kFuse, metaspace}));
  CHECK(fused->Decode(Ids{6, 3, 5}) == "ab");
  CheckStreamingMatchesDecode(*fused);
}

TEST_CASE("Strip before Fuse applies to every token", "[cpu]") {
  auto tok = WithDecoder(Sequence({kReplace, Strip(" ", 1, 0)}));
  CHECK(tok->Decode(Ids{6, 6, 5}) == "aab");
  CheckStreamingMatchesDecode(*tok);
}

TEST_CASE("decoder chains we cannot run are rejected", "[cpu]") {
  json tokenizer = testing::TinySentencePieceJson(true);
  tokenizer["decoder"] = Sequence({kFuse, {{"type", "ByteFallback"}}});
  auto status = Tokenizer::FromJson(tokenizer.dump());
  REQUIRE_FALSE(status.ok());
  CHECK(std::string(status.status().message()).find("ByteFallback after") != std::string::npos);
}

}  // namespace
}  // namespace scd
