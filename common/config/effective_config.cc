// See effective_config.h. The redaction walk uses an explicit stack rather than recursion, so
// that it is safe on any json value, not only the depth-limited ones the loaders produce.
#include "common/config/effective_config.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"

namespace scd::config {
namespace {

using nlohmann::json;

constexpr std::string_view kRedacted = "<redacted>";

std::vector<std::string> SplitWords(std::string_view key) {
  std::vector<std::string> words;
  std::string word;
  char previous = '\0';
  for (const char c : key) {
    const bool alnum = absl::ascii_isalnum(static_cast<unsigned char>(c));
    const bool camel_break = absl::ascii_isupper(static_cast<unsigned char>(c)) &&
                             (absl::ascii_islower(static_cast<unsigned char>(previous)) ||
                              absl::ascii_isdigit(static_cast<unsigned char>(previous)));
    if ((!alnum || camel_break) && !word.empty()) words.push_back(std::move(word)), word.clear();
    if (alnum) word.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
    previous = c;
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

bool OneOf(std::string_view word, std::initializer_list<std::string_view> options) {
  for (std::string_view option : options) {
    if (word == option) return true;
  }
  return false;
}

}  // namespace

bool IsSecretConfigKey(std::string_view key) {
  const std::vector<std::string> words = SplitWords(key);
  if (words.empty()) return false;
  const std::string& last = words.back();
  if (OneOf(last, {"file", "path", "dir", "env", "name"})) return false;
  if (words.size() == 2 && last == "token" &&
      OneOf(words[0], {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "stop", "start", "end"})) {
    return false;
  }
  if (OneOf(last, {"key", "keys"})) return true;
  for (const std::string& word : words) {
    if (OneOf(word, {"token", "password", "passwd", "secret", "secrets", "apikey", "credential",
                     "credentials"})) {
      return true;
    }
  }
  return false;
}

std::string RenderEffectiveConfig(const json& config, int indent) {
  json copy = config;
  struct Pending {
    json* node;
    bool secret;  // under a secret key
  };
  std::vector<Pending> stack = {{&copy, false}};
  while (!stack.empty()) {
    const Pending p = stack.back();
    stack.pop_back();
    if (p.node->is_object()) {
      for (auto& item : p.node->items()) {
        stack.push_back({&item.value(), p.secret || IsSecretConfigKey(item.key())});
      }
    } else if (p.node->is_array()) {
      for (json& element : *p.node) stack.push_back({&element, p.secret});
    } else if (p.secret && p.node->is_string() && !p.node->get_ref<const std::string&>().empty()) {
      *p.node = std::string(kRedacted);
    }
  }
  return copy.dump(indent < 0 ? -1 : indent, ' ', false, json::error_handler_t::replace);
}

}  // namespace scd::config
