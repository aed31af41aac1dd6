// Fuzzes the tokenizer.json loader (Tokenizer::FromJson, common/tokenizer/tokenizer.h): model,
// vocabulary, merges, added tokens, normalizer, pre-tokenizer, post-processor and decoder
// chains. The input is the file's text. A tokenizer that loads is then used once on a short
// fixed text and on every id around its vocabulary, as a daemon would right after start-up:
// ids must lie in [0, vocab_size), and streaming decode must equal Decode.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void CheckStream(const scd::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                 bool skip_special) {
  scd::StreamDecoder stream(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) streamed += stream.Push(id);
  streamed += stream.Flush();
  FUZZ_CHECK(streamed == tokenizer.Decode(ids, skip_special));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto tokenizer = scd::Tokenizer::FromJson(text);
  if (!tokenizer.ok()) return 0;
  const scd::Tokenizer& t = **tokenizer;
  const int vocab = t.vocab_size();
  FUZZ_CHECK(vocab >= 0);
  std::vector<int32_t> ids =
      t.Encode("Once upon a time, caf\xc3\xa9 <s> \xf0\x9f\x99\x82 12!", true);
  for (int32_t id : ids) FUZZ_CHECK(id >= 0 && id < vocab);
  CheckStream(t, ids, true);
  // Every id once (the fuzzer keeps vocabularies small), plus ids just outside it.
  std::vector<int32_t> all;
  for (int64_t id = -2; id < int64_t{vocab} + 2 && id < 4096; ++id) all.push_back(int32_t(id));
  CheckStream(t, all, true);
  CheckStream(t, all, false);
  (void)t.bos_id();
  (void)t.eos_id();
  return 0;
}
