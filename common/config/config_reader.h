// ConfigReader: typed, validated reads from a loaded config (a json object), so that every
// daemon reports config mistakes the same way. docs/STYLE.md's rule (after NIXL): an invalid value
// is an error, a missing one falls back to its documented default. Every error names the full
// key path:
//   config key 'http.port': expected an integer in [0, 65535], got "abc"
//   config key 'models[1].name': expected a string, got 3
//   unknown config key 'http.prot' (did you mean 'http.port'?)
// A reader does not stop at the first mistake: reads record errors in a sink shared with every
// Child() and ObjectList() reader and return the default, and Finish() reports all recorded
// errors plus every key that no read asked for (a misspelt key would otherwise be ignored in
// silence and its default used). A key holding null (`key:` with no value in YAML) counts as
// missing.
//
// A reader is a small handle (copyable); it points into the json it was made from, which must
// outlive it and every reader derived from it.
//
// Every typed read also declares its key: its path, its type, its default and its range
// (keys()). The code that reads a daemon's config is therefore its schema: each default and
// range is written once, at the read, and docs/CONFIG.md is checked against what a read of an
// empty config declares (tests/config/config_docs_test.cc).
#ifndef SCD_COMMON_CONFIG_CONFIG_READER_H_
#define SCD_COMMON_CONFIG_CONFIG_READER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace scd::config {

// What the first read of one key declared.
struct ConfigKey {
  std::string path;              // "http.port", "specialists[0].name"
  std::string type;              // "string", "integer", "number", "bool", "string list",
                                 // "enum", "duration", "mapping list"
  nlohmann::json default_value;  // null where the key is required or has none (a list)
  bool required = false;
  std::string range;  // "[0, 65535]", "one of \"cpu\", \"cuda\"", ... ; "" when any value
};

class ConfigReader {
 public:
  static constexpr int64_t kIntMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kIntMax = std::numeric_limits<int64_t>::max();
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // Reads the top-level mapping `config`; records an error if it is not an object.
  explicit ConfigReader(const nlohmann::json& config);

  // Optional values: `default_value` when the key is missing or null.
  std::string String(std::string_view key, std::string_view default_value);
  // An integer in [min, max]. Floats, even integral ones, and strings are errors.
  int64_t Int(std::string_view key, int64_t default_value, int64_t min = kIntMin,
              int64_t max = kIntMax);
  // A number (integer or float) in [min, max]; NaN is always an error.
  double Double(std::string_view key, double default_value, double min = -kInf, double max = kInf);
  // true or false only (YAML 1.2: "yes" and "on" are strings, hence errors).
  bool Bool(std::string_view key, bool default_value);
  // A list of strings.
  std::vector<std::string> StringList(std::string_view key,
                                      std::vector<std::string> default_value = {});
  // A string that must be one of `allowed` (case-sensitive).
  std::string Enum(std::string_view key, std::string_view default_value,
                   absl::Span<const std::string_view> allowed);
  // A duration in seconds, within [min_seconds, max_seconds]: a number of seconds, or a string
  // of a number and a unit: "250ms", "1.5s", "2m", "1h" (also "ns", "us").
  double DurationSeconds(std::string_view key, double default_seconds, double min_seconds = 0,
                         double max_seconds = kInf);

  // Required values: an error when the key is missing or null (the returned value is then
  // empty or zero).
  std::string RequiredString(std::string_view key);
  int64_t RequiredInt(std::string_view key, int64_t min = kIntMin, int64_t max = kIntMax);
  double RequiredDouble(std::string_view key, double min = -kInf, double max = kInf);

  // The mapping under `key`. Missing or null: a reader over an empty mapping (so every read
  // from it gives its default). Not a mapping: an error, and a reader over an empty mapping.
  ConfigReader Child(std::string_view key);
  // The list of mappings under `key`, one reader per element, with paths like `models[1]`.
  // Missing or null: empty. Not a list: an error. An element that is not a mapping: an error,
  // and a reader over an empty mapping in its place (so indices still match).
  std::vector<ConfigReader> ObjectList(std::string_view key);
  // The raw value under `key` (null when missing), marked read but not validated; for
  // free-form values that the caller checks itself.
  nlohmann::json Raw(std::string_view key);

  // Whether `key` is present and not null. Does not count as reading it.
  bool Has(std::string_view key) const;
  // The keys present at this level, e.g. to read a mapping keyed by name through Child().
  std::vector<std::string> Keys() const;

  // A key read with a default (String, ...) that must nonetheless be given: records
  // "config key '<path>.<key>': is required (<why>)" when it is missing, null or "", and
  // declares it required in keys(). Call it after the read.
  void Require(std::string_view key, std::string_view why);

  // Records "config key '<path>.<key>': <message>", for checks that span several values.
  void AddError(std::string_view key, std::string_view message);

  // Every key read so far by this reader and the readers that share its sink, in the order of
  // their first read (see ConfigKey).
  const std::vector<ConfigKey>& keys() const { return sink_->keys; }

  // "" for the top level, "http", "models[1]", ...
  const std::string& path() const { return path_; }
  // The full path of `key` below this reader ("http.port").
  std::string KeyPath(std::string_view key) const;

  // OK, or InvalidArgument listing every error recorded by this reader and the readers that
  // share its sink, then every unknown key with a suggestion when a read key is close to it
  // (joined by "; "). Call it once all keys are read, normally on the top-level reader.
  absl::Status Finish() const;

 private:
  // One mapping that was read, and the keys asked of it.
  struct Level {
    const nlohmann::json* object = nullptr;
    std::set<std::string, std::less<>> read;
  };
  // What a reader and all readers derived from it share.
  struct Sink {
    std::vector<std::string> errors;
    std::map<std::string, Level> levels;  // by path; node addresses are stable
    std::vector<ConfigKey> keys;
    std::set<std::string, std::less<>> declared;  // the paths in `keys`
  };

  ConfigReader(std::shared_ptr<Sink> sink, const nlohmann::json* object, std::string path);

  // The value under `key`, marking the key read; nullptr when missing or null.
  const nlohmann::json* Lookup(std::string_view key);
  // Records "config key '<path>': expected <expected>, got <value>".
  void TypeError(std::string_view key, std::string_view expected, const nlohmann::json& got);
  void RecordError(std::string_view key_path, std::string_view message);
  // Adds `key` to keys() unless an earlier read declared it.
  void Declare(std::string_view key, std::string_view type, nlohmann::json default_value,
               std::string range, bool required = false);

  std::shared_ptr<Sink> sink_;
  const nlohmann::json* object_;
  std::string path_;
  Level* level_;
};

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_CONFIG_READER_H_
