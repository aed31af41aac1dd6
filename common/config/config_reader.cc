// ConfigReader (see config_reader.h). Unknown-key suggestions use the optimal-string-alignment
// edit distance (Levenshtein plus adjacent transpositions, so "prot" is one edit from "port")
// after folding case and '-' to '_', against the keys that were read at the same level.
#include "common/config/config_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/string_view_bridge.h"
#include "common/config/value_text.h"
#include "common/config/yaml_scalar.h"

namespace scd::config {
namespace {

using nlohmann::json;

// Shared by every reader of a key that is missing or not a mapping.
const json* EmptyObject() {
  static const json* const kEmpty = new json(json::object());
  return kEmpty;
}

// "[min, max]", ">= min", "<= max" or "" for an unbounded integer.
std::string IntRange(int64_t min, int64_t max) {
  if (min == ConfigReader::kIntMin && max == ConfigReader::kIntMax) return "";
  if (max == ConfigReader::kIntMax) return absl::StrCat(">= ", min);
  if (min == ConfigReader::kIntMin) return absl::StrCat("<= ", max);
  return absl::StrCat("[", min, ", ", max, "]");
}

std::string IntExpectation(int64_t min, int64_t max) {
  const std::string range = IntRange(min, max);
  if (range.empty()) return "an integer";
  return absl::StrCat("an integer ", range[0] == '[' ? "in " : "", range);
}

// "[min, max]<unit>", ">= min<unit>", "<= max<unit>" or "" for an unbounded number.
std::string DoubleRange(double min, double max, std::string_view unit) {
  const bool has_min = min > -ConfigReader::kInf;
  const bool has_max = max < ConfigReader::kInf;
  if (has_min && has_max) return absl::StrCat("[", min, ", ", max, "]", Sv(unit));
  if (has_min) return absl::StrCat(">= ", min, Sv(unit));
  if (has_max) return absl::StrCat("<= ", max, Sv(unit));
  return "";
}

// " in [min, max]<unit>", " >= min<unit>", ... for an error's expectation.
std::string RangeSuffix(double min, double max, std::string_view unit) {
  const std::string range = DoubleRange(min, max, unit);
  if (range.empty()) return "";
  return absl::StrCat(range[0] == '[' ? " in " : " ", range);
}

std::string EnumRange(absl::Span<const std::string_view> allowed) {
  std::vector<std::string> quoted;
  for (std::string_view option : allowed) quoted.push_back(absl::StrCat("\"", Sv(option), "\""));
  return absl::StrCat("one of ", absl::StrJoin(quoted, ", "));
}

std::string FoldKey(std::string_view key) {
  std::string folded = absl::AsciiStrToLower(Sv(key));
  std::replace(folded.begin(), folded.end(), '-', '_');
  return folded;
}

// Optimal-string-alignment distance, or `limit + 1` once it must exceed `limit`.
size_t EditDistance(std::string_view a, std::string_view b, size_t limit) {
  const size_t diff = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
  if (diff > limit) return limit + 1;
  std::vector<size_t> before(b.size() + 1), previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, previous[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        current[j] = std::min(current[j], before[j - 2] + 1);
      }
    }
    std::swap(before, previous);
    std::swap(previous, current);
  }
  return std::min(previous[b.size()], limit + 1);
}

// The read key closest to `unknown`, or "" when none is close enough to be a likely typo.
std::string Suggest(std::string_view unknown, const std::set<std::string, std::less<>>& read) {
  constexpr size_t kLongest = 64;  // longer keys are not typos worth the quadratic cost
  if (unknown.size() > kLongest) return "";
  const std::string folded = FoldKey(unknown);
  const size_t limit = std::max<size_t>(1, std::min<size_t>(3, (unknown.size() + 1) / 3));
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& candidate : read) {
    if (candidate.size() > kLongest) continue;
    const size_t d = EditDistance(folded, FoldKey(candidate), limit);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

// "250ms" -> 0.25; false when `text` is not a number followed by a known unit.
bool ParseDuration(std::string_view text, double* seconds) {
  double value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data()) return false;
  const std::string_view unit = text.substr(static_cast<size_t>(ptr - text.data()));
  double scale;
  if (unit == "ns") {
    scale = 1e-9;
  } else if (unit == "us") {
    scale = 1e-6;
  } else if (unit == "ms") {
    scale = 1e-3;
  } else if (unit == "s") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else {
    return false;
  }
  *seconds = value * scale;
  return std::isfinite(*seconds);
}

}  // namespace

ConfigReader::ConfigReader(const json& config)
    : ConfigReader(std::make_shared<Sink>(), config.is_object() ? &config : EmptyObject(), "") {
  if (!config.is_object()) {
    sink_->errors.push_back(
        absl::StrCat("config: the top level must be a mapping, got ", ConfigValueText(config)));
  }
}

ConfigReader::ConfigReader(std::shared_ptr<Sink> sink, const json* object, std::string path)
    : sink_(std::move(sink)), object_(object), path_(std::move(path)) {
  level_ = &sink_->levels[path_];
  if (level_->object == nullptr) level_->object = object_;
}

std::string ConfigReader::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", Sv(key));
}

const json* ConfigReader::Lookup(std::string_view key) {
  level_->read.emplace(key);
  const auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

void ConfigReader::RecordError(std::string_view key_path, std::string_view message) {
  sink_->errors.push_back(absl::StrCat("config key '", Excerpt(key_path, 80), "': ", Sv(message)));
}

void ConfigReader::TypeError(std::string_view key, std::string_view expected, const json& got) {
  RecordError(KeyPath(key),
              absl::StrCat("expected ", Sv(expected), ", got ", ConfigValueText(got)));
}

void ConfigReader::Declare(std::string_view key, std::string_view type, json default_value,
                           std::string range, bool required) {
  std::string path = KeyPath(key);
  if (!sink_->declared.insert(path).second) return;
  sink_->keys.push_back(ConfigKey{std::move(path), std::string(type), std::move(default_value),
                                  required, std::move(range)});
}

void ConfigReader::Require(std::string_view key, std::string_view why) {
  const std::string path = KeyPath(key);
  for (ConfigKey& k : sink_->keys) {
    if (k.path != path) continue;
    k.required = true;
    k.default_value = nullptr;
  }
  const auto it = object_->find(std::string(key));
  if (it == object_->end() || it->is_null() ||
      (it->is_string() && it->get_ref<const std::string&>().empty())) {
    RecordError(path, absl::StrCat("is required (", Sv(why), ")"));
  }
}

void ConfigReader::AddError(std::string_view key, std::string_view message) {
  RecordError(KeyPath(key), message);
}

std::string ConfigReader::String(std::string_view key, std::string_view default_value) {
  Declare(key, "string", std::string(default_value), "");
  const json* v = Lookup(key);
  if (v == nullptr) return std::string(default_value);
  if (v->is_string()) return v->get<std::string>();
  TypeError(key, "a string", *v);
  return std::string(default_value);
}

int64_t ConfigReader::Int(std::string_view key, int64_t default_value, int64_t min, int64_t max) {
  Declare(key, "integer", default_value, IntRange(min, max));
  const json* v = Lookup(key);
  if (v == nullptr) return default_value;
  if (v->is_number_integer() &&
      (!v->is_number_unsigned() || v->get<uint64_t>() <= static_cast<uint64_t>(kIntMax))) {
    const int64_t x = v->get<int64_t>();
    if (x >= min && x <= max) return x;
  }
  TypeError(key, IntExpectation(min, max), *v);
  return default_value;
}

double ConfigReader::Double(std::string_view key, double default_value, double min, double max) {
  Declare(key, "number", default_value, DoubleRange(min, max, ""));
  const json* v = Lookup(key);
  if (v == nullptr) return default_value;
  if (v->is_number()) {
    const double x = v->get<double>();
    if (!std::isnan(x) && x >= min && x <= max) return x;
  }
  TypeError(key, absl::StrCat("a number", RangeSuffix(min, max, "")), *v);
  return default_value;
}

bool ConfigReader::Bool(std::string_view key, bool default_value) {
  Declare(key, "bool", default_value, "");
  const json* v = Lookup(key);
  if (v == nullptr) return default_value;
  if (v->is_boolean()) return v->get<bool>();
  TypeError(key, "true or false", *v);
  return default_value;
}

std::vector<std::string> ConfigReader::StringList(std::string_view key,
                                                  std::vector<std::string> default_value) {
  Declare(key, "string list", default_value, "");
  const json* v = Lookup(key);
  if (v == nullptr) return default_value;
  if (!v->is_array()) {
    TypeError(key, "a list of strings", *v);
    return default_value;
  }
  std::vector<std::string> out;
  bool ok = true;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& element = (*v)[i];
    if (element.is_string()) {
      out.push_back(element.get<std::string>());
    } else {
      RecordError(absl::StrCat(KeyPath(key), "[", i, "]"),
                  absl::StrCat("expected a string, got ", ConfigValueText(element)));
      ok = false;
    }
  }
  return ok ? out : default_value;
}

std::string ConfigReader::Enum(std::string_view key, std::string_view default_value,
                               absl::Span<const std::string_view> allowed) {
  Declare(key, "enum", std::string(default_value), EnumRange(allowed));
  const json* v = Lookup(key);
  if (v == nullptr) return std::string(default_value);
  if (v->is_string()) {
    const std::string& s = v->get_ref<const std::string&>();
    for (std::string_view option : allowed) {
      if (s == option) return s;
    }
  }
  TypeError(key, EnumRange(allowed), *v);
  return std::string(default_value);
}

double ConfigReader::DurationSeconds(std::string_view key, double default_seconds,
                                     double min_seconds, double max_seconds) {
  Declare(key, "duration", default_seconds, DoubleRange(min_seconds, max_seconds, " seconds"));
  const json* v = Lookup(key);
  if (v == nullptr) return default_seconds;
  double seconds = 0;
  bool parsed = false;
  if (v->is_number()) {
    seconds = v->get<double>();
    parsed = !std::isnan(seconds);
  } else if (v->is_string()) {
    parsed = ParseDuration(v->get_ref<const std::string&>(), &seconds);
  }
  if (parsed && seconds >= min_seconds && seconds <= max_seconds) return seconds;
  TypeError(key,
            absl::StrCat("a duration", RangeSuffix(min_seconds, max_seconds, " seconds"),
                         " (a number of seconds, or a string like \"250ms\", \"1.5s\", \"2m\")"),
            *v);
  return default_seconds;
}

std::string ConfigReader::RequiredString(std::string_view key) {
  Declare(key, "string", nullptr, "", /*required=*/true);
  if (Lookup(key) == nullptr) {
    RecordError(KeyPath(key), "required, but missing");
    return "";
  }
  return String(key, "");
}

int64_t ConfigReader::RequiredInt(std::string_view key, int64_t min, int64_t max) {
  Declare(key, "integer", nullptr, IntRange(min, max), /*required=*/true);
  if (Lookup(key) == nullptr) {
    RecordError(KeyPath(key), "required, but missing");
    return 0;
  }
  return Int(key, 0, min, max);
}

double ConfigReader::RequiredDouble(std::string_view key, double min, double max) {
  Declare(key, "number", nullptr, DoubleRange(min, max, ""), /*required=*/true);
  if (Lookup(key) == nullptr) {
    RecordError(KeyPath(key), "required, but missing");
    return 0;
  }
  return Double(key, 0, min, max);
}

ConfigReader ConfigReader::Child(std::string_view key) {
  const json* v = Lookup(key);
  const json* object = EmptyObject();
  if (v != nullptr) {
    if (v->is_object()) {
      object = v;
    } else {
      TypeError(key, "a mapping", *v);
    }
  }
  return ConfigReader(sink_, object, KeyPath(key));
}

std::vector<ConfigReader> ConfigReader::ObjectList(std::string_view key) {
  std::vector<ConfigReader> out;
  Declare(key, "mapping list", nullptr, "");
  const json* v = Lookup(key);
  if (v == nullptr) return out;
  if (!v->is_array()) {
    TypeError(key, "a list of mappings", *v);
    return out;
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& element = (*v)[i];
    std::string path = absl::StrCat(KeyPath(key), "[", i, "]");
    if (element.is_object()) {
      out.push_back(ConfigReader(sink_, &element, std::move(path)));
    } else {
      RecordError(path, absl::StrCat("expected a mapping, got ", ConfigValueText(element)));
      out.push_back(ConfigReader(sink_, EmptyObject(), std::move(path)));
    }
  }
  return out;
}

json ConfigReader::Raw(std::string_view key) {
  const json* v = Lookup(key);
  return v == nullptr ? json(nullptr) : *v;
}

bool ConfigReader::Has(std::string_view key) const {
  const auto it = object_->find(std::string(key));
  return it != object_->end() && !it->is_null();
}

std::vector<std::string> ConfigReader::Keys() const {
  std::vector<std::string> keys;
  for (const auto& item : object_->items()) keys.push_back(item.key());
  return keys;
}

absl::Status ConfigReader::Finish() const {
  std::vector<std::string> messages = sink_->errors;
  for (const auto& entry : sink_->levels) {
    // Named copies, not structured bindings: C++17 lambdas cannot capture those.
    const std::string& path = entry.first;
    const Level& level = entry.second;
    if (level.object == nullptr || !level.object->is_object()) continue;
    for (const auto& item : level.object->items()) {
      const std::string& key = item.key();
      if (level.read.count(key) != 0) continue;
      auto full = [&path](std::string_view k) {
        return Excerpt(path.empty() ? std::string(k) : absl::StrCat(path, ".", Sv(k)), 80);
      };
      std::string message = absl::StrCat("unknown config key '", full(key), "'");
      if (const std::string suggestion = Suggest(key, level.read); !suggestion.empty()) {
        absl::StrAppend(&message, " (did you mean '", full(suggestion), "'?)");
      }
      messages.push_back(std::move(message));
    }
  }
  if (messages.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(messages, "; "));
}

}  // namespace scd::config
