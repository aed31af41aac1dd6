// StreamDecoder: incremental detokenization must (1) never emit a partial UTF-8 character,
// (2) concatenate to exactly Decode(all ids), and (3) emit text as soon as no later id can
// change it. Byte-fallback runs are the hard case: HF decodes a run of <0xNN> tokens as a
// whole and turns the entire run into U+FFFD per byte when it is not valid UTF-8, so even a
// complete character inside a run is final only once a non-byte token closes the run.
#include <catch2/catch.hpp>
#include <random>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "tests/tokenizer/fixtures.h"

namespace scd {
namespace {

using Ids = std::vector<int32_t>;
using tokenizer_internal::IsValidUtf8;

const std::string kFffd = "\xEF\xBF\xBD";

// Every Push result, then the Flush result (last element).
std::vector<std::string> StreamPieces(const Tokenizer& tok, const Ids& ids, bool skip = true) {
  StreamDecoder stream(tok, skip);
  std::vector<std::string> pieces;
  for (int32_t id : ids) pieces.push_back(stream.Push(id));
  pieces.push_back(stream.Flush());
  return pieces;
}

std::string Join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += p;
  return out;
}

std::unique_ptr<Tokenizer> StoriesTokenizer() {
  return testing::LoadOrFail(testing::StoriesTokenizerJson());
}

TEST_CASE("stream: CJK from byte-fallback tokens is emitted when the run closes", "[cpu]") {
  auto tok = StoriesTokenizer();
  // <s>, "▁", 日 = E6 97 A5, 本 = E6 9C AC (as <0xNN> ids = byte + 3), then "▁t".
  const Ids ids = {1, 410, 233, 154, 168, 233, 159, 175, 259};
  const auto pieces = StreamPieces(*tok, ids);
  CHECK(pieces ==
        std::vector<std::string>{"", "", "", "", "", "", "", "", "\xE6\x97\xA5\xE6\x9C\xAC t", ""});
  CHECK(Join(pieces) == tok->Decode(ids));
  CHECK(tok->Decode(ids) == "\xE6\x97\xA5\xE6\x9C\xAC t");
}

TEST_CASE("stream: a run still open at the end comes out in Flush", "[cpu]") {
  auto tok = StoriesTokenizer();
  // "emoji 🚀😀" from the golden cases: the two emoji are 8 byte tokens at the end.
  const Ids ids = {1, 344, 423, 414, 449, 417, 410, 243, 162, 157, 131, 243, 162, 155, 131};
  const auto pieces = StreamPieces(*tok, ids);
  CHECK(Join(pieces) == "emoji \xF0\x9F\x9A\x80\xF0\x9F\x98\x80");
  CHECK(pieces.back() == "\xF0\x9F\x9A\x80\xF0\x9F\x98\x80");
  for (const std::string& p : pieces) CHECK(IsValidUtf8(p));
}

TEST_CASE("stream: an invalid byte run becomes U+FFFD per byte, as in Decode", "[cpu]") {
  auto tok = StoriesTokenizer();
  // A truncated 🚀 (F0 9F 9A) closed by "▁t".
  const Ids truncated = {243, 162, 157, 259};
  CHECK(tok->Decode(truncated) == kFffd + kFffd + kFffd + " t");
  CHECK(StreamPieces(*tok, truncated) ==
        std::vector<std::string>{"", "", "", kFffd + kFffd + kFffd + " t", ""});
  // ☃ (E2 98 83) followed by a stray continuation byte: the whole run is invalid, so the
  // snowman must not have been emitted early.
  const Ids stray = {229, 155, 134, 131, 259};
  CHECK(tok->Decode(stray) == kFffd + kFffd + kFffd + kFffd + " t");
  const auto pieces = StreamPieces(*tok, stray);
  CHECK(pieces[2].empty());
  CHECK(Join(pieces) == tok->Decode(stray));
  // Still open at the end: Flush applies the same rule.
  CHECK(Join(StreamPieces(*tok, {229, 155, 134, 243})) == kFffd + kFffd + kFffd + kFffd);
}

TEST_CASE("stream: the leading-space rule applies once per stream", "[cpu]") {
  auto tok = StoriesTokenizer();
  // "▁" alone decodes to "" (its space is the stripped one); the next "▁" is a real space.
  CHECK(StreamPieces(*tok, {1, 410, 410, 259}) == std::vector<std::string>{"", "", " ", " t", ""});
  StreamDecoder stream(*tok);
  CHECK(stream.Push(291) == "The");
  CHECK(stream.Push(291) == " The");
  CHECK(stream.Flush().empty());
  // Flush starts a new stream: the rule applies again.
  CHECK(stream.Push(291) == "The");
  // Special tokens kept on request.
  CHECK(StreamPieces(*tok, {1, 291}, /*skip=*/false) ==
        std::vector<std::string>{"<s>", " The", ""});
}

TEST_CASE("stream: byte-level emoji split across tokens", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Gpt2FixtureJson());
  // Byte-level ids are bytes here: 😀 = F0 9F 98 80, 日 = E6 97 A5. A character is emitted
  // with its last byte (the lossy UTF-8 decoder never un-emits a complete character).
  const Ids ids = {0xF0, 0x9F, 0x98, 0x80, 0xE6, 0x97, 0xA5, 104};
  CHECK(StreamPieces(*tok, ids) ==
        std::vector<std::string>{"", "", "", "\xF0\x9F\x98\x80", "", "", "\xE6\x97\xA5", "h", ""});
  // A truncated character followed by a space: one U+FFFD for the maximal subpart.
  CHECK(StreamPieces(*tok, {0xF0, 0x9F, 32}) == std::vector<std::string>{"", "", kFffd + " ", ""});
  CHECK(Join(StreamPieces(*tok, {0xF0, 0x9F})) == kFffd);
  CHECK(tok->Decode(Ids{0xF0, 0x9F}) == kFffd);
}

TEST_CASE("stream: random id sequences always match Decode", "[cpu]") {
  struct Case {
    std::unique_ptr<Tokenizer> tok;
    int32_t first_byte_id;  // id of the token for byte 0x00
  };
  std::vector<Case> cases;
  cases.push_back({StoriesTokenizer(), 3});  // <0x00> .. <0xFF> are ids 3..258
  cases.push_back({testing::LoadOrFail(testing::Gpt2FixtureJson()), 0});
  cases.push_back({testing::LoadOrFail(testing::Llama3FixtureJson()), 0});
  std::mt19937 rng(42);
  for (const Case& c : cases) {
    std::uniform_int_distribution<int32_t> any_id(0, c.tok->vocab_size() - 1);
    std::uniform_int_distribution<int32_t> byte_id(c.first_byte_id, c.first_byte_id + 255);
    std::uniform_int_distribution<int> length(0, 40);
    for (int trial = 0; trial < 300; ++trial) {
      Ids ids;
      // Half byte tokens: they are where streaming goes wrong.
      for (int n = length(rng); n > 0; --n) ids.push_back(rng() % 2 ? any_id(rng) : byte_id(rng));
      for (bool skip : {true, false}) {
        const auto pieces = StreamPieces(*c.tok, ids, skip);
        for (const std::string& p : pieces) CHECK(IsValidUtf8(p));
        CHECK(Join(pieces) == c.tok->Decode(ids, skip));
      }
    }
  }
}

// A Tokenizer that is not built from tokenizer.json: ids are raw bytes. Exercises the default
// DecodeStream, which re-decodes and holds back a trailing U+FFFD.
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> Encode(std::string_view text, bool) const override {
    return std::vector<int32_t>(text.begin(), text.end());
  }
  std::string Decode(absl::Span<const int32_t> ids, bool) const override {
    std::string bytes;
    for (int32_t id : ids) bytes.push_back(static_cast<char>(id));
    return tokenizer_internal::Utf8Lossy(bytes);
  }
  int vocab_size() const override { return 256; }
  int32_t bos_id() const override { return -1; }
  int32_t eos_id() const override { return -1; }
  int32_t TokenId(std::string_view) const override { return -1; }
  bool IsSpecial(int32_t) const override { return false; }
};

TEST_CASE("stream: default DecodeStream for other Tokenizer implementations", "[cpu]") {
  ByteTokenizer tok;
  CHECK(StreamPieces(tok, {0xE6, 0x97, 0xA5}) ==
        std::vector<std::string>{"", "", "\xE6\x97\xA5", ""});
  CHECK(StreamPieces(tok, {'A', 0xFF, 'B'}) == std::vector<std::string>{"A", "", kFffd + "B", ""});
  CHECK(StreamPieces(tok, {'A', 0xF0, 0x9F}) == std::vector<std::string>{"A", "", "", kFffd});
}

}  // namespace
}  // namespace scd
