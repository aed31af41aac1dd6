// Unicode Normalization Form C (canonical decomposition, canonical ordering, canonical
// composition; UAX #15), for tokenizer.json files whose normalizer is {"type": "NFC"} (Qwen2).
#ifndef SCD_COMMON_TOKENIZER_UNICODE_NFC_H_
#define SCD_COMMON_TOKENIZER_UNICODE_NFC_H_

#include <string>
#include <string_view>

namespace scd::tokenizer_internal {

// NFC of `text`. Ill-formed UTF-8 bytes are passed through unchanged and block composition
// across them, as any starter would.
std::string NfcNormalize(std::string_view text);

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_UNICODE_NFC_H_
