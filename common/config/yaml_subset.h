// The YAML subset that daemon config files are written in, parsed by hand into nlohmann::json.
// A full YAML library would accept far more than a config needs (anchors, tags, multi-line
// scalars, several documents), each a source of surprise in a config and of attack surface for
// the fuzzer; this parser accepts the practical subset and rejects everything else with
// "file:line: unsupported YAML feature ..." instead of guessing.
//
// Accepted:
//   - block mappings (`key: value`) nested by indentation of spaces; tabs may not indent;
//   - block sequences (`- item`), including compact `- key: value` sequences of mappings and a
//     sequence at the same indentation as its parent key;
//   - flow sequences `[a, b, "c"]` and flow mappings `{a: 1, b: [x]}` on one line;
//   - plain, 'single-quoted' ('' is a quote) and "double-quoted" (escapes as in yaml_scalar.h)
//     scalars, each on one line;
//   - `#` comments on their own line or after whitespace; a leading `---`; a UTF-8 BOM;
//   - an empty value is null; plain scalars are typed by the YAML 1.2 core schema (see
//     yaml_scalar.h); keys are always strings.
// Rejected: anchors (&), aliases (*), tags (!), block scalars (| and >), multi-line plain or
// quoted scalars and flow collections, complex keys (?), directives (%), several documents,
// duplicate keys (named, with their line), bad indentation, nesting deeper than
// kMaxConfigDepth, invalid UTF-8 and control characters.
//
// The parser never recurses deeper than kMaxConfigDepth and never indexes past its input, so
// arbitrary bytes give a value or an InvalidArgument error.
#ifndef SCD_COMMON_CONFIG_YAML_SUBSET_H_
#define SCD_COMMON_CONFIG_YAML_SUBSET_H_

#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd::config {

// Parses a whole YAML text whose top level is a mapping (an empty or comment-only text gives
// an empty object). Errors read "<source_name>:<line>: <what>" ("line <n>: ..." when
// `source_name` is empty).
absl::StatusOr<nlohmann::json> ParseYaml(std::string_view text, std::string_view source_name);

// Parses one value as written on the command line (`--key=VALUE`): a flow sequence or mapping,
// a quoted scalar, or else the whole text as a plain scalar typed by the core schema (so
// "8080" is an integer, "'8080'" a string, "a: b #c" the string itself, "" an empty string).
// Containers in the value count from nesting level `depth` toward kMaxConfigDepth.
absl::StatusOr<nlohmann::json> ParseYamlInlineValue(std::string_view text, int depth = 1);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_YAML_SUBSET_H_
