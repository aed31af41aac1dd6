// Packed text for SEKV evaluation and calibration: consecutive passages of a corpus joined by
// newlines and tokenized (BOS first) into sequences of exactly `context` ids, so that every
// sample uses the model's whole context window (TinyStories passages alone are shorter).
#ifndef SCD_COMMON_SEKV_PACKED_TEXT_H_
#define SCD_COMMON_SEKV_PACKED_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "common/tokenizer/tokenizer.h"

namespace scd::sekv {

// Up to `max_sequences` sequences (0 = as many as the passages give) of `context` ids each.
std::vector<std::vector<int32_t>> PackPassages(const Tokenizer& tokenizer,
                                               const std::vector<std::string>& passages,
                                               int context, int max_sequences);

}  // namespace scd::sekv

#endif  // SCD_COMMON_SEKV_PACKED_TEXT_H_
