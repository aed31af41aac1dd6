// The offline reference for what the daemons must produce: the same codec path run in-process
// (producer prefill of prompt[0, T-1), encode, wire format, consumer rebuild, consumer prefill
// of the last token, greedy decode), so a test can require the served text to equal it.
#ifndef SCD_TESTS_DAEMONS_REFERENCE_H_
#define SCD_TESTS_DAEMONS_REFERENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/runtime/backend.h"

namespace scd::testing {

struct ReferenceOutput {
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;  // stop token excluded
  std::string text;
  bool stopped = false;  // EOS before max_tokens
};

// Greedy generation of `max_tokens` after `prompt` (tokenized with BOS) with codec `mode`, both
// models' CPU backends holding their weights as `dtype` (weights.dtype).
ReferenceOutput ReferenceGreedy(const std::string& mode, const std::string& prompt, int max_tokens,
                                WeightDtype dtype = WeightDtype::kF32);

}  // namespace scd::testing

#endif  // SCD_TESTS_DAEMONS_REFERENCE_H_
