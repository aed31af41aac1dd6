// Scalars of the YAML subset that daemon config files use: quoted strings (single- and
// double-quoted, each on one line) and the typing of plain scalars by the YAML 1.2 core schema
// (https://yaml.org/spec/1.2.2/#103-core-schema): null/~, true/false, decimal, 0o octal and 0x
// hex integers, decimal floats and .inf/.nan; everything else is a string. A quoted scalar is
// always a string. Integers that do not fit in 64 bits and floats that overflow are errors
// rather than silently rounded values.
//
// These functions return errors without a location; the parsers that call them prefix the
// file and line.
#ifndef SCD_COMMON_CONFIG_YAML_SCALAR_H_
#define SCD_COMMON_CONFIG_YAML_SCALAR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::config {

// Parses the quoted scalar that starts at text[*pos] (a ' or a ") and ends before the end of
// `text`. On success `*out` holds the unescaped value and *pos indexes the byte after the
// closing quote. Single-quoted: '' is a quote, nothing else is special. Double-quoted escapes:
// \0 \a \b \t \n \v \f \r \e \" \\ \/ \<space> \xXX \uXXXX (surrogate pairs combine)
// \UXXXXXXXX; any other escape is an error.
absl::Status ParseQuotedScalar(std::string_view text, size_t* pos, std::string* out);

// The typed value of a plain (unquoted) scalar, which must be non-empty and already trimmed.
absl::StatusOr<nlohmann::json> TypePlainScalar(std::string_view text);

// `text` cut to at most `max_bytes` (on a UTF-8 boundary) with "..." appended when cut; for
// quoting user input in error messages.
std::string Excerpt(std::string_view text, size_t max_bytes = 40);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_YAML_SCALAR_H_
