// Byte-level BPE (GPT-2 / Llama-3 style) on the hand-built fixtures of fixtures.h. Each
// expected id list is derived in the comment above it from (1) how the pre-tokenizer regex cuts
// the text, (2) the bytes_to_unicode symbols (id == byte value), (3) the ranked merges. The
// same fixtures and strings were cross-checked against Hugging Face tokenizers 0.23.2.
#include <catch2/catch.hpp>
#include <random>
#include <thread>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"
#include "tests/tokenizer/fixtures.h"

namespace scd {
namespace {

using Ids = std::vector<int32_t>;

Ids WithBos(Ids ids) {
  ids.insert(ids.begin(), 273);
  return ids;
}

TEST_CASE("GPT-2 byte-level BPE encodes hand-worked cases", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Gpt2FixtureJson());

  // Words "the" | " cat" | "'s" | " here" (Ġ = space). "the": t h e -> he (rank 0) -> the (4).
  // "Ġcat": Ġc (1) and at (2) then Ġcat (3). "'s" (5). "Ġhere": he (0) beats the leftmost
  // Ġ+h (6), then Ġ+he (7), r+e (8), Ġhe+re (9).
  CHECK(tok->Encode("the cat's here") == Ids{260, 259, 261, 265});

  // GPT-2's \s+(?!\S) leaves the last newline of a run to stand alone: "Hi" | "\n" | "\n" |
  // "you", so the Ċ+Ċ merge (10) cannot apply across the two words.
  CHECK(tok->Encode("Hi\n\nyou") == Ids{72, 105, 10, 10, 121, 111, 117});

  // Three spaces before a word: "a" | "  " (the run minus its last space) | " b".
  CHECK(tok->Encode("a   b") == Ids{97, 267, 32, 98});

  // " ?\p{N}+" keeps " 2024" whole: Ġ 2 0 2 4 -> 2+0 (13) first, then 2+4 (14).
  CHECK(tok->Encode(" 2024") == Ids{32, 269, 270});

  // GPT-2's contractions are case-sensitive: "'LL" is not one, so "'" is punctuation on its
  // own and the '+L merge (15) never sees its pair: "I" | "'" | "LL" | " don" | "'t".
  CHECK(tok->Encode("I'LL don't") == Ids{73, 39, 76, 76, 32, 100, 111, 110, 39, 116});

  // A Unicode letter stays in the word: " café" = Ġ c a f + the two bytes of é (C3 A9).
  CHECK(tok->Encode(" caf\u00e9") == Ids{257, 97, 102, 195, 169});

  // "Ġthe" is in the vocabulary but no merge builds it: Ġ + the.
  CHECK(tok->Encode(" the") == Ids{32, 260});

  // Added special token matched verbatim; the text around it is encoded separately:
  // "hi" | "!!" (12) | " " , <|endoftext|>, "x".
  CHECK(tok->Encode("hi!! <|endoftext|>x") == Ids{104, 105, 268, 32, 273, 120});
  CHECK(tok->Decode(Ids{104, 105, 268, 32, 273, 120}) == "hi!! x");
  CHECK(tok->Decode(Ids{104, 105, 268, 32, 273, 120}, /*skip_special_tokens=*/false) ==
        "hi!! <|endoftext|>x");

  // Emoji and CJK fall apart into their bytes (no merges for them).
  CHECK(tok->Encode("\xF0\x9F\x98\x80") == Ids{0xF0, 0x9F, 0x98, 0x80});
  CHECK(tok->Encode("\xE6\x97\xA5") == Ids{0xE6, 0x97, 0xA5});
  CHECK(tok->Encode("") == Ids{});
}

TEST_CASE("GPT-2 byte-level fixture metadata", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Gpt2FixtureJson());
  CHECK(tok->vocab_size() == 274);
  CHECK(tok->bos_id() == -1);   // no template BOS and none of the BOS names exists
  CHECK(tok->eos_id() == 273);  // <|endoftext|>
  CHECK(tok->IsSpecial(273));
  CHECK_FALSE(tok->IsSpecial(272));
  CHECK(tok->TokenId("\u0120the") == 272);
  CHECK(tok->TokenId("<|endoftext|>") == 273);
  // add_special_tokens changes nothing: the ByteLevel post-processor adds no ids.
  CHECK(tok->Encode("hi", true) == tok->Encode("hi", false));
}

TEST_CASE("Llama-3 Split-regex byte-level BPE encodes hand-worked cases", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Llama3FixtureJson());
  CHECK(tok->bos_id() == 273);  // first token of the template
  CHECK(tok->eos_id() == 274);  // <|end_of_text|>
  CHECK(tok->vocab_size() == 276);

  // Same words as GPT-2 here; the template adds <|begin_of_text|>.
  CHECK(tok->Encode("the cat's here") == WithBos({260, 259, 261, 265}));
  CHECK(tok->Encode("the cat's here", /*add_special_tokens=*/false) == Ids{260, 259, 261, 265});

  // \s*[\r\n]+ keeps "\n\n" together, so Ċ+Ċ (10) applies.
  CHECK(tok->Encode("Hi\n\nyou") == WithBos({72, 105, 266, 121, 111, 117}));

  CHECK(tok->Encode("a   b") == WithBos({97, 267, 32, 98}));

  // \p{N}{1,3}: " 2024" is " " | "202" | "4"; 2+0 (13) applies inside "202", and the 2+4
  // merge (14) never sees its pair.
  CHECK(tok->Encode(" 2024") == WithBos({32, 269, 50, 52}));

  // (?i:...) makes "'LL" a contraction word, so '+L (15) applies: "I" | "'LL" | " don" | "'t".
  CHECK(tok->Encode("I'LL don't") == WithBos({73, 271, 76, 32, 100, 111, 110, 39, 116}));

  CHECK(tok->Encode(" caf\u00e9") == WithBos({257, 97, 102, 195, 169}));

  // ignore_merges: a word that is itself in the vocabulary is emitted as one token.
  CHECK(tok->Encode(" the") == WithBos({272}));

  // <|eot_id|> is an added token here; <|endoftext|> is not, so it is plain text split by the
  // regex ("hi" | "!!" | " <|" | "endoftext" | "|>" | "x") and only !+! (12) merges.
  CHECK(tok->Encode("hi!! <|eot_id|>x") == WithBos({104, 105, 268, 32, 275, 120}));
  CHECK(tok->Encode("hi!! <|endoftext|>x", false) ==
        Ids{104, 105, 268, 32, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, 124, 62, 120});
}

// Random strings drawn from pieces that exercise every regex alternative.
std::string RandomText(std::mt19937& rng) {
  static const char* const kPieces[] = {"a",
                                        "Z",
                                        " ",
                                        "  ",
                                        "\t",
                                        "\n",
                                        "\r\n",
                                        "'s",
                                        "'LL",
                                        "'",
                                        "7",
                                        "2024",
                                        "!",
                                        "?!",
                                        "...",
                                        "\xC3\xA9",
                                        "e\xCC\x81",
                                        "\xE6\x97\xA5",
                                        "\xF0\x9F\x98\x80",
                                        "\xD9\xA3",
                                        "\xC2\xA0",
                                        "\xE3\x80\x80",
                                        " the",
                                        "cat",
                                        "_",
                                        "<|eot_id|>",
                                        "<|endoftext|>"};
  std::uniform_int_distribution<int> length(0, 24);
  std::uniform_int_distribution<size_t> pick(0, std::size(kPieces) - 1);
  std::string text;
  for (int n = length(rng); n > 0; --n) text += kPieces[pick(rng)];
  return text;
}

TEST_CASE("byte-level decode(encode(x)) == x for arbitrary valid UTF-8", "[cpu]") {
  auto gpt2 = testing::LoadOrFail(testing::Gpt2FixtureJson());
  auto llama3 = testing::LoadOrFail(testing::Llama3FixtureJson());
  std::mt19937 rng(1234);
  for (int i = 0; i < 500; ++i) {
    const std::string text = RandomText(rng);
    INFO("text: \"" << text << "\"");
    // Special tokens must survive decoding for the text to come back.
    CHECK(gpt2->Decode(gpt2->Encode(text), /*skip_special_tokens=*/false) == text);
    CHECK(llama3->Decode(llama3->Encode(text, false), false) == text);
  }
}

TEST_CASE("byte-level BPE with ill-formed UTF-8 input", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Gpt2FixtureJson());
  // Every byte has a symbol, so any byte string encodes; each ill-formed byte is treated as
  // a punctuation-like character by the pre-tokenizer: "\xFF\xFE" | " ok".
  const std::string text = "\xFF\xFE ok";
  const Ids ids = tok->Encode(text);
  CHECK(ids == Ids{255, 254, 32, 111, 107});
  // Decoding follows HF (String::from_utf8_lossy): each ill-formed subpart becomes U+FFFD, so
  // the round trip is exact only for valid UTF-8.
  CHECK(tok->Decode(ids) == "\xEF\xBF\xBD\xEF\xBF\xBD ok");
  // A truncated character is one maximal subpart, hence one U+FFFD.
  CHECK(tok->Decode(Ids{0xF0, 0x9F, 0x98}) == "\xEF\xBF\xBD");
  CHECK(tok->Decode(Ids{0xF0, 0x9F, 0x98, 32}) == "\xEF\xBF\xBD ");
}

TEST_CASE("one tokenizer serves concurrent encodes", "[cpu]") {
  // Encode shares the BPE word cache between threads; results must not depend on it.
  auto tok = testing::LoadOrFail(testing::Llama3FixtureJson());
  std::mt19937 rng(99);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(RandomText(rng));
  std::vector<Ids> expected;
  for (const std::string& t : texts) expected.push_back(tok->Encode(t, false));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          const size_t k = (i * 7 + t * 13 + round) % texts.size();
          if (tok->Encode(texts[k], false) != expected[k]) ++mismatches[t];
          if (tok->Decode(expected[k], false) != texts[k]) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("byte-level decode skips unknown ids", "[cpu]") {
  auto tok = testing::LoadOrFail(testing::Gpt2FixtureJson());
  CHECK(tok->Decode(Ids{104, 999999, -5, 105}) == "hi");
}

}  // namespace
}  // namespace scd
