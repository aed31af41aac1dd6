// The tokenizer's building blocks, tested directly: UTF-8 decoding with the maximal-subpart
// rule, character classes, GPT-2's bytes_to_unicode, NFC, the hand-coded pre-tokenizer regexes
// and HF's split behaviours. Expected regex splits follow the backtracking semantics spelled
// out in known_regex.h (and agree with Python's `regex` module and HF tokenizers).
#include "common/tokenizer/unicode.h"

#include <catch2/catch.hpp>

#include "common/tokenizer/known_regex.h"
#include "common/tokenizer/split.h"
#include "common/tokenizer/unicode_nfc.h"

namespace scd::tokenizer_internal {
namespace {

using Pieces = std::vector<std::string>;

const std::string kFffd = "\xEF\xBF\xBD";

Pieces Split(KnownRegex regex, const std::string& text) {
  Pieces pieces;
  for (const ByteRange& r :
       SplitText(text, SplitPattern::Regex(regex), SplitBehavior::kIsolated, false)) {
    pieces.push_back(text.substr(r.first, r.second - r.first));
  }
  return pieces;
}

TEST_CASE("UTF-8 decoding reports maximal subparts", "[cpu]") {
  const Utf8Char ascii = DecodeUtf8("A", 0);
  CHECK((ascii.valid && ascii.cp == 'A' && ascii.len == 1));
  const Utf8Char emoji = DecodeUtf8("\xF0\x9F\x98\x80", 0);
  CHECK((emoji.valid && emoji.cp == 0x1F600 && emoji.len == 4));
  const Utf8Char truncated = DecodeUtf8("\xF0\x9F\x98", 0);
  CHECK((!truncated.valid && truncated.truncated && truncated.len == 3));
  const Utf8Char broken = DecodeUtf8(
      "\xF0\x9F"
      "A",
      0);
  CHECK((!broken.valid && !broken.truncated && broken.len == 2));
  const Utf8Char surrogate = DecodeUtf8("\xED\xA0\x80", 0);  // ED A0 is ill-formed at once
  CHECK((!surrogate.valid && surrogate.len == 1));
  const Utf8Char overlong = DecodeUtf8("\xC0\xAF", 0);
  CHECK((!overlong.valid && overlong.len == 1));
}

TEST_CASE("lossy UTF-8 decoding matches Rust's from_utf8_lossy", "[cpu]") {
  CHECK(Utf8Lossy("plain \xC3\xA9") == "plain \xC3\xA9");
  CHECK(Utf8Lossy("\xF0\x9F\x98") == kFffd);                  // one subpart
  CHECK(Utf8Lossy("\xED\xA0\x80") == kFffd + kFffd + kFffd);  // three
  CHECK(Utf8Lossy("a\xFF"
                  "b\x80") == "a" + kFffd + "b" + kFffd);
  CHECK(Utf8Lossy("\xE6\x97"
                  "A") == kFffd + "A");
  // Streaming gives the same result however the bytes are cut.
  const std::string bytes = "x\xE6\x97\xA5\xF0\x9F\x98\x80\xF0\x9F\xE6\x97\xA5";
  for (size_t cut = 0; cut <= bytes.size(); ++cut) {
    Utf8LossyStream stream;
    std::string out;
    stream.Push(bytes.substr(0, cut), &out);
    CHECK(IsValidUtf8(out));
    stream.Push(bytes.substr(cut), &out);
    stream.Flush(&out);
    CHECK(out == Utf8Lossy(bytes));
  }
}

TEST_CASE("character classes", "[cpu]") {
  CHECK(IsLetter('a'));
  CHECK(IsLetter(0xE9));    // é
  CHECK(IsLetter(0x65E5));  // 日
  CHECK(IsLetter(0x3042));  // あ
  CHECK_FALSE(IsLetter('1'));
  CHECK_FALSE(IsLetter(0x1F600));
  CHECK(IsNumber('7'));
  CHECK(IsNumber(0x0663));  // Arabic-Indic three (Nd)
  CHECK(IsNumber(0x2167));  // Roman numeral eight (Nl)
  CHECK(IsNumber(0xB2));    // superscript two (No)
  CHECK_FALSE(IsNumber('x'));
  CHECK(IsWhitespace(' '));
  CHECK(IsWhitespace('\n'));
  CHECK(IsWhitespace(0xA0));
  CHECK(IsWhitespace(0x3000));
  CHECK_FALSE(IsWhitespace(0x200B));  // zero width space is not White_Space
  CHECK(IsWordChar('_'));
  CHECK(IsWordChar(0x301));  // combining acute (M)
  CHECK_FALSE(IsWordChar(0xB2));
  CHECK(CombiningClass(0x301) == 230);
  CHECK(CombiningClass(0x323) == 220);
  CHECK(CombiningClass('a') == 0);
}

TEST_CASE("bytes_to_unicode is GPT-2's table", "[cpu]") {
  CHECK(ByteToUnicode('a') == "a");
  CHECK(ByteToUnicode('!') == "!");
  CHECK(ByteToUnicode(' ') == "\xC4\xA0");   // U+0120 Ġ
  CHECK(ByteToUnicode('\n') == "\xC4\x8A");  // U+010A Ċ
  CHECK(ByteToUnicode(0x00) == "\xC4\x80");  // U+0100
  CHECK(ByteToUnicode(0xAD) == "\xC5\x83");  // U+0143, the last remapped byte
  CHECK(ByteToUnicode(0xE9) == "\xC3\xA9");  // printable Latin-1 maps to itself
  for (int b = 0; b < 256; ++b) {
    const std::string& s = ByteToUnicode(static_cast<uint8_t>(b));
    CHECK(UnicodeToByte(DecodeUtf8(s, 0).cp) == b);
  }
  CHECK(UnicodeToByte(' ') == -1);  // space is not in the image
}

TEST_CASE("NFC composes, reorders and respects exclusions", "[cpu]") {
  CHECK(NfcNormalize("cafe\xCC\x81") == "caf\xC3\xA9");  // e + U+0301 -> é
  CHECK(NfcNormalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // 각
  // U+1E0B U+0323 (ḋ + dot below) -> U+1E0D U+0307: the dot below (220) sorts first.
  CHECK(NfcNormalize("\xE1\xB8\x8B\xCC\xA3") == "\xE1\xB8\x8D\xCC\x87");
  CHECK(NfcNormalize("\xE2\x84\xAB") == "\xC3\x85");  // Angstrom sign -> Å (singleton)
  CHECK(NfcNormalize("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958 excluded
  CHECK(NfcNormalize("plain ASCII") == "plain ASCII");
  CHECK(NfcNormalize("a\xFF\xCC\x81") == "a\xFF\xCC\x81");  // ill-formed byte blocks
}

TEST_CASE("GPT-2 regex splits", "[cpu]") {
  const KnownRegex r = KnownRegex::kGpt2;
  CHECK(Split(r, "Hello world") == Pieces{"Hello", " world"});
  CHECK(Split(r, "I'm here, it's 2024!") ==
        Pieces{"I", "'m", " here", ",", " it", "'s", " 2024", "!"});
  CHECK(Split(r, "I'LL") == Pieces{"I", "'", "LL"});  // case-sensitive contractions
  CHECK(Split(r, "a  b") == Pieces{"a", " ", " b"});
  CHECK(Split(r, "a\n\nb") == Pieces{"a", "\n", "\n", "b"});
  CHECK(Split(r, "end  ") == Pieces{"end", "  "});  // trailing space run stays whole
  CHECK(Split(r, " \xC3\xA9t\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC") ==
        Pieces{" \xC3\xA9t\xC3\xA9", " \xE6\x97\xA5\xE6\x9C\xAC"});
  CHECK(Split(r, "x...y") == Pieces{"x", "...", "y"});
  CHECK(Split(r, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80 ok") ==
        Pieces{"\xF0\x9F\x98\x80\xF0\x9F\x98\x80", " ok"});
}

TEST_CASE("Llama-3 regex splits", "[cpu]") {
  const KnownRegex r = KnownRegex::kLlama3;
  CHECK(Split(r, "I'LL see you'Re") == Pieces{"I", "'LL", " see", " you", "'Re"});
  CHECK(Split(r, "12345 abc") == Pieces{"123", "45", " abc"});
  CHECK(Split(r, "Hi\n\nyou") == Pieces{"Hi", "\n\n", "you"});
  CHECK(Split(r, "a \n b") == Pieces{"a", " \n", " b"});
  CHECK(Split(r, "x!!\n\ny") == Pieces{"x", "!!\n\n", "y"});
  CHECK(Split(r, "(hello)") == Pieces{"(hello", ")"});  // one non-letter may lead a word
  CHECK(Split(r, "\thi") == Pieces{"\thi"});
  CHECK(Split(r, "  hi") == Pieces{" ", " hi"});
  CHECK(Split(r, "tail  ") == Pieces{"tail", "  "});
}

TEST_CASE("Qwen2 regex splits digits one by one", "[cpu]") {
  CHECK(Split(KnownRegex::kQwen2, "12345 abc") == Pieces{"1", "2", "3", "4", "5", " abc"});
}

TEST_CASE("known regexes are recognised exactly", "[cpu]") {
  CHECK(RecognizeRegex(kGpt2Pattern).value() == KnownRegex::kGpt2);
  CHECK(RecognizeRegex(kLlama3Pattern).value() == KnownRegex::kLlama3);
  CHECK(RecognizeRegex(kQwen2Pattern).value() == KnownRegex::kQwen2);
  const auto unknown = RecognizeRegex("\\s+");
  REQUIRE_FALSE(unknown.ok());
  CHECK(std::string(unknown.status().message()).find("\\s+") != std::string::npos);
}

TEST_CASE("split behaviours follow HF", "[cpu]") {
  const SplitPattern dash = SplitPattern::Literal("-");
  auto split = [&](const std::string& text, SplitBehavior behavior, bool invert = false) {
    Pieces pieces;
    for (const ByteRange& r : SplitText(text, dash, behavior, invert)) {
      pieces.push_back(text.substr(r.first, r.second - r.first));
    }
    return pieces;
  };
  const std::string text = "a-b--c-";
  CHECK(split(text, SplitBehavior::kRemoved) == Pieces{"a", "b", "c"});
  CHECK(split(text, SplitBehavior::kIsolated) == Pieces{"a", "-", "b", "-", "-", "c", "-"});
  CHECK(split(text, SplitBehavior::kMergedWithPrevious) == Pieces{"a-", "b-", "-", "c-"});
  CHECK(split(text, SplitBehavior::kMergedWithNext) == Pieces{"a", "-b", "-", "-c", "-"});
  CHECK(split(text, SplitBehavior::kContiguous) == Pieces{"a", "-", "b", "--", "c", "-"});
  CHECK(split(text, SplitBehavior::kRemoved, /*invert=*/true) == Pieces{"-", "-", "-", "-"});
  CHECK(split("", SplitBehavior::kIsolated).empty());
}

}  // namespace
}  // namespace scd::tokenizer_internal
