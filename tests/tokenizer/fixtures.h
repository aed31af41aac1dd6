// Small tokenizer.json fixtures that the tokenizer tests build in code, so that every expected
// id can be worked out by hand from the vocabulary and merges listed here.
//
// Byte-level fixtures (GPT-2 and Llama-3 flavours) share one vocabulary:
//   ids 0..255   the 256 single-byte symbols, id == byte value (the symbol of byte b is
//                bytes_to_unicode(b): 'a' is "a", ' ' is "Ġ" U+0120, '\n' is "Ċ" U+010A);
//   ids 256..271 the results of merges ranked 0..15, in this order:
//                  0 h+e=he(256)      1 Ġ+c=Ġc(257)     2 a+t=at(258)      3 Ġc+at=Ġcat(259)
//                  4 t+he=the(260)    5 '+s='s(261)     6 Ġ+h=Ġh(262)      7 Ġ+he=Ġhe(263)
//                  8 r+e=re(264)      9 Ġhe+re=Ġhere(265) 10 Ċ+Ċ=ĊĊ(266)   11 Ġ+Ġ=ĠĠ(267)
//                 12 !+!=!!(268)     13 2+0=20(269)    14 2+4=24(270)    15 '+L='L(271)
//   id 272       "Ġthe", in the vocabulary but reachable by no merge (shows ignore_merges).
// GPT-2 flavour: ByteLevel pre-tokenizer (GPT-2 regex), merges as "a b" strings, added special
//   token <|endoftext|> = 273, ByteLevel decoder, no BOS.
// Llama-3 flavour: Split(Llama-3 regex, Isolated) + ByteLevel(use_regex=false), merges as
//   ["a", "b"] pairs, ignore_merges, added <|begin_of_text|> = 273, <|end_of_text|> = 274,
//   <|eot_id|> = 275, TemplateProcessing adding <|begin_of_text|>.
// Tiny SentencePiece fixture: {<unk>:0, <s>:1, </s>:2, ▁:3, a:4, b:5, ▁a:6, ab:7, ▁ab:8}
//   with merges [▁ a, a b, ▁a b], no byte fallback (unknown characters become <unk>).
#ifndef SCD_TESTS_TOKENIZER_FIXTURES_H_
#define SCD_TESTS_TOKENIZER_FIXTURES_H_

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/tokenizer/tokenizer.h"

namespace scd::testing {

nlohmann::json Gpt2FixtureJson();
nlohmann::json Llama3FixtureJson();
nlohmann::json TinySentencePieceJson(bool fuse_unk);
// The stories260K tokenizer.json from the shared fixtures (FAILs when missing).
nlohmann::json StoriesTokenizerJson();

// Parses `json`; FAILs the current test with the status message on error.
std::unique_ptr<Tokenizer> LoadOrFail(const nlohmann::json& json);

// The added-token object HF writes.
nlohmann::json AddedTokenJson(int id, const std::string& content, bool special);

}  // namespace scd::testing

#endif  // SCD_TESTS_TOKENIZER_FIXTURES_H_
