// Config file loading (see config_file.h). JSON goes through nlohmann's SAX interface rather
// than json::parse so that duplicate keys and excessive nesting can be refused while parsing
// (json::parse keeps the last duplicate silently). To name the line of a duplicate key, the
// input is read through an iterator that records how far the lexer has read: when the parser
// reports a key, the lexer has just read its closing quote.
#include "common/config/config_file.h"

#include <cstdint>
#include <exception>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/config/string_view_bridge.h"
#include "common/config/yaml_scalar.h"
#include "common/config/yaml_subset.h"

namespace scd::config {
namespace {

using nlohmann::json;

// A char iterator that publishes the furthest position read through it.
class TrackingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackingIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const { return *p_; }
  TrackingIterator& operator++() {
    ++p_;
    if (p_ > *furthest_) *furthest_ = p_;
    return *this;
  }
  TrackingIterator operator++(int) {
    TrackingIterator before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackingIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackingIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

// Builds the json value from SAX events, refusing duplicate keys and deep nesting.
class ConfigJsonBuilder final : public nlohmann::json_sax<json> {
 public:
  ConfigJsonBuilder(std::string_view text, const char* const* furthest)
      : text_(text), furthest_(furthest) {}

  bool null() override { return Add(json(nullptr)); }
  bool boolean(bool value) override { return Add(json(value)); }
  bool number_integer(number_integer_t value) override { return Add(json(value)); }
  bool number_unsigned(number_unsigned_t value) override {
    // Signed where it fits, as the YAML parser produces, so both formats compare equal.
    if (value <= static_cast<number_unsigned_t>(std::numeric_limits<int64_t>::max())) {
      return Add(json(static_cast<int64_t>(value)));
    }
    return Add(json(value));
  }
  bool number_float(number_float_t value, const string_t& /*text*/) override {
    return Add(json(value));
  }
  bool string(string_t& value) override { return Add(json(std::move(value))); }
  bool binary(binary_t& /*value*/) override {
    return Fail(Line(), "binary values are not supported");
  }
  bool start_object(std::size_t /*elements*/) override { return Open(json::object()); }
  bool end_object() override {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) override { return Open(json::array()); }
  bool end_array() override {
    stack_.pop_back();
    return true;
  }
  bool key(string_t& key) override {
    if (stack_.back()->contains(key)) {
      return Fail(Line(), absl::StrCat("duplicate key '", Excerpt(key), "'"));
    }
    pending_key_ = std::move(key);
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) override {
    // "[json.exception.parse_error.101] parse error at line 2, column 3: ..." -> from "parse".
    std::string_view message = ex.what();
    if (const size_t bracket = message.find("] "); bracket != std::string_view::npos) {
      message.remove_prefix(bracket + 2);
    }
    // Parse errors state their position; others ("number overflow parsing '1e999'") do not.
    const bool has_position = message.find("at line ") != std::string_view::npos;
    return Fail(has_position ? 0 : Line(), std::string(message));
  }

  json& root() { return root_; }
  const std::string& error() const { return error_; }
  // The line the error is on, or 0 when error() states the position itself.
  int error_line() const { return error_line_; }

 private:
  int Line() const {
    int line = 1;
    for (const char* p = text_.data(); p < *furthest_; ++p) line += *p == '\n';
    return line;
  }

  bool Fail(int line, std::string message) {
    if (error_.empty()) {
      error_ = std::move(message);
      error_line_ = line;
    }
    return false;
  }

  // Stores `value` in the open container (or as the root) and returns where it now lives.
  // Only the innermost open container is ever modified, so the pointers on stack_ to its
  // enclosing containers stay valid.
  json* Place(json&& value) {
    if (stack_.empty()) {
      root_ = std::move(value);
      return &root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(value));
      return &top.back();
    }
    json& slot = top[pending_key_];
    slot = std::move(value);
    return &slot;
  }

  bool Add(json&& value) {
    Place(std::move(value));
    return true;
  }

  bool Open(json&& container) {
    if (stack_.size() >= static_cast<size_t>(kMaxConfigDepth)) {
      return Fail(Line(), absl::StrCat("nesting deeper than ", kMaxConfigDepth, " levels"));
    }
    stack_.push_back(Place(std::move(container)));
    return true;
  }

  std::string_view text_;
  const char* const* furthest_;
  json root_;
  std::vector<json*> stack_;
  std::string pending_key_;
  std::string error_;
  int error_line_ = 0;
};

// "source:line: ", "source: ", "line N: " or "", matching the YAML parser's messages.
std::string Prefix(std::string_view source_name, int line = 0) {
  if (line > 0) {
    return source_name.empty() ? absl::StrCat("line ", line, ": ")
                               : absl::StrCat(Sv(source_name), ":", line, ": ");
  }
  return source_name.empty() ? std::string() : absl::StrCat(Sv(source_name), ": ");
}

absl::StatusOr<json> ParseJson(std::string_view text, std::string_view source_name) {
  const char* furthest = text.data();
  ConfigJsonBuilder builder(text, &furthest);
  bool ok = false;
  try {
    ok = json::sax_parse(TrackingIterator(text.data(), &furthest),
                         TrackingIterator(text.data() + text.size(), &furthest), &builder);
  } catch (const std::exception& e) {
    // nlohmann reports parse errors through the handler; anything thrown is unexpected.
    return absl::InvalidArgumentError(absl::StrCat(Prefix(source_name), e.what()));
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(source_name, builder.error_line()),
                     builder.error().empty() ? "invalid JSON" : builder.error()));
  }
  if (!builder.root().is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Prefix(source_name), "the top level must be a JSON object"));
  }
  return std::move(builder.root());
}

}  // namespace

absl::StatusOr<ConfigFormat> ConfigFormatFromPath(std::string_view path) {
  const std::string lower = absl::AsciiStrToLower(Sv(path));
  if (absl::EndsWith(lower, ".json")) return ConfigFormat::kJson;
  if (absl::EndsWith(lower, ".yaml") || absl::EndsWith(lower, ".yml")) return ConfigFormat::kYaml;
  return absl::InvalidArgumentError(
      absl::StrCat("config file '", Sv(path), "': unknown format (expected .json, .yaml or .yml)"));
}

absl::StatusOr<json> ParseConfigText(std::string_view text, ConfigFormat format,
                                     std::string_view source_name) {
  if (format == ConfigFormat::kJson) return ParseJson(text, source_name);
  return ParseYaml(text, source_name);
}

absl::StatusOr<json> LoadConfigFile(const std::string& path) {
  absl::StatusOr<ConfigFormat> format = ConfigFormatFromPath(path);
  if (!format.ok()) return format.status();
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return text.status();
  return ParseConfigText(*text, *format, path);
}

}  // namespace scd::config
