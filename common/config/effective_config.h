// The effective config as the daemons log it at start-up: the file plus command-line overrides,
// rendered as JSON with secrets redacted, so that a log shows exactly what a daemon ran with
// without leaking credentials into it.
//
// Redaction is by key name: a non-empty string (or each string in a list or mapping) under a
// key that IsSecretConfigKey() accepts becomes "<redacted>". Empty strings stay visible, since
// "no token configured" is itself useful to see.
#ifndef SCD_COMMON_CONFIG_EFFECTIVE_CONFIG_H_
#define SCD_COMMON_CONFIG_EFFECTIVE_CONFIG_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace scd::config {

// Whether a key names a secret. The key is split into lower-case words at '_', '-', '.' and
// camelCase boundaries. Secret: any word is token, password, passwd, secret(s), apikey or
// credential(s), or the last word is key(s) (key, api_key, private_key, apiKey). Not secret,
// because they name where a secret lives or a model's vocabulary rather than the secret
// itself: a last word of file, path, dir, env or name (token_file, tls.key_path), and the
// special tokens of a vocabulary (bos_token, eos_token, pad_token, unk_token, stop_token, ...).
// Note that "max_tokens" and "tokenizer" are not secrets: neither contains the word "token".
bool IsSecretConfigKey(std::string_view key);

// `config` as JSON with secrets redacted: one line when `indent` < 0, else pretty-printed
// with that indent. Strings that are not valid UTF-8 are rendered with U+FFFD; infinities and
// NaN (which JSON cannot spell) as null.
std::string RenderEffectiveConfig(const nlohmann::json& config, int indent = -1);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_EFFECTIVE_CONFIG_H_
