// Non-throwing typed accessors over nlohmann::json for the tokenizer.json loader; each error
// names the field's path so a user can find the offending entry in a 10 MB file.
#include "common/tokenizer/json_fields.h"

#include "absl/strings/str_cat.h"
#include "common/tokenizer/unicode.h"

namespace scd::tokenizer_internal {

absl::Status JsonError(std::string_view path, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tokenizer.json: ", Sv(path), ": ", Sv(what)));
}

std::string JoinPath(std::string_view path, std::string_view key) {
  return path.empty() ? std::string(key) : absl::StrCat(Sv(path), ".", Sv(key));
}

const Json* FindField(const Json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::StatusOr<std::string> GetString(const Json& obj, std::string_view key,
                                      std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return JsonError(JoinPath(path, key), "missing required string");
  if (!v->is_string()) return JsonError(JoinPath(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<int64_t> GetInt(const Json& obj, std::string_view key, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return JsonError(JoinPath(path, key), "missing required integer");
  if (!v->is_number_integer()) return JsonError(JoinPath(path, key), "expected an integer");
  return v->get<int64_t>();
}

absl::StatusOr<std::string> GetStringOr(const Json& obj, std::string_view key,
                                        std::string_view default_value, std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return std::string(default_value);
  if (!v->is_string()) return JsonError(JoinPath(path, key), "expected a string");
  return v->get<std::string>();
}

absl::StatusOr<bool> GetBoolOr(const Json& obj, std::string_view key, bool default_value,
                               std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_boolean()) return JsonError(JoinPath(path, key), "expected a boolean");
  return v->get<bool>();
}

absl::StatusOr<int64_t> GetIntOr(const Json& obj, std::string_view key, int64_t default_value,
                                 std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_number_integer()) return JsonError(JoinPath(path, key), "expected an integer");
  return v->get<int64_t>();
}

absl::StatusOr<std::string> GetType(const Json& obj, std::string_view path) {
  if (!obj.is_object()) return JsonError(path, "expected an object");
  return GetString(obj, "type", path);
}

absl::Status ForEachInSequence(
    const Json& sequence, std::string_view key, std::string_view path,
    const std::function<absl::Status(const Json&, std::string_view)>& add) {
  const Json* list = FindField(sequence, key);
  const std::string list_path = JoinPath(path, key);
  if (list == nullptr || !list->is_array()) return JsonError(list_path, "expected an array");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string item_path = absl::StrCat(list_path, "[", i, "]");
    if (absl::Status s = add((*list)[i], item_path); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GetPattern(const Json& obj, std::string_view key, std::string_view path,
                                       bool* is_regex) {
  const std::string pattern_path = JoinPath(path, key);
  const Json* v = FindField(obj, key);
  if (v == nullptr || !v->is_object()) {
    return JsonError(pattern_path, "expected an object {\"String\": ...} or {\"Regex\": ...}");
  }
  if (const Json* s = FindField(*v, "String")) {
    if (!s->is_string()) return JsonError(JoinPath(pattern_path, "String"), "expected a string");
    *is_regex = false;
    return s->get<std::string>();
  }
  if (const Json* r = FindField(*v, "Regex")) {
    if (!r->is_string()) return JsonError(JoinPath(pattern_path, "Regex"), "expected a string");
    *is_regex = true;
    return r->get<std::string>();
  }
  return JsonError(pattern_path, "expected an object {\"String\": ...} or {\"Regex\": ...}");
}

absl::StatusOr<char32_t> GetCharOr(const Json& obj, std::string_view key, char32_t default_value,
                                   std::string_view path) {
  const Json* v = FindField(obj, key);
  if (v == nullptr) return default_value;
  if (!v->is_string()) return JsonError(JoinPath(path, key), "expected a one-character string");
  const std::string s = v->get<std::string>();
  if (s.empty()) return JsonError(JoinPath(path, key), "expected a one-character string");
  const Utf8Char c = DecodeUtf8(s, 0);
  if (!c.valid || static_cast<size_t>(c.len) != s.size()) {
    return JsonError(JoinPath(path, key), "expected a one-character string");
  }
  return c.cp;
}

}  // namespace scd::tokenizer_internal
