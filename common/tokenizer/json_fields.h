// Typed, non-throwing access to tokenizer.json fields. Every accessor returns
// InvalidArgumentError naming the JSON path (e.g. "model.merges[3]") on a wrong type, so a
// malformed file is reported precisely instead of crashing in nlohmann::json's exceptions. A
// missing or null optional field takes its documented default (docs/STYLE.md, "Errors").
#ifndef SCD_COMMON_TOKENIZER_JSON_FIELDS_H_
#define SCD_COMMON_TOKENIZER_JSON_FIELDS_H_

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace scd::tokenizer_internal {

using Json = nlohmann::json;

// Debian's Abseil has its own absl::string_view, distinct from std::string_view; StrCat needs
// this bridge.
inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

// "tokenizer.json: <path>: <what>" as an InvalidArgumentError.
absl::Status JsonError(std::string_view path, std::string_view what);

// `path` + "." + key, for error messages.
std::string JoinPath(std::string_view path, std::string_view key);

// The member `key` of object `obj`, or nullptr when absent or null.
const Json* FindField(const Json& obj, std::string_view key);

// Required fields.
absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key, std::string_view path);
absl::StatusOr<int64_t> GetInt(const Json& obj, std::string_view key, std::string_view path);

// Optional fields with defaults.
absl::StatusOr<std::string> GetStringOr(const Json& obj, std::string_view key,
                                        std::string_view default_value, std::string_view path);
absl::StatusOr<bool> GetBoolOr(const Json& obj, std::string_view key, bool default_value,
                               std::string_view path);
absl::StatusOr<int64_t> GetIntOr(const Json& obj, std::string_view key, int64_t default_value,
                                 std::string_view path);

// The "type" string of a component object (normalizer, decoder, ...).
absl::StatusOr<std::string> GetType(const Json& obj, std::string_view path);

// A "Sequence" component: calls `add` on each element of its array `key` ("normalizers",
// "decoders", ...) with the element's path, in order. An error when `key` is not an array, or
// the first one `add` returns.
absl::Status ForEachInSequence(
    const Json& sequence, std::string_view key, std::string_view path,
    const std::function<absl::Status(const Json&, std::string_view)>& add);

// A string-or-regex pattern object {"String": s} or {"Regex": r}; sets *is_regex.
absl::StatusOr<std::string> GetPattern(const Json& obj, std::string_view key, std::string_view path,
                                       bool* is_regex);

// A single-character string field (Metaspace's replacement, Strip's content).
absl::StatusOr<char32_t> GetCharOr(const Json& obj, std::string_view key, char32_t default_value,
                                   std::string_view path);

}  // namespace scd::tokenizer_internal

#endif  // SCD_COMMON_TOKENIZER_JSON_FIELDS_H_
