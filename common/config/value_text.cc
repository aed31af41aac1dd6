// See value_text.h.
#include "common/config/value_text.h"

#include <cmath>

#include "common/config/yaml_scalar.h"

namespace scd::config {

std::string_view ConfigTypeName(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::object:
      return "a mapping";
    default:
      return "an unsupported value";
  }
}

std::string ConfigValueText(const nlohmann::json& value) {
  if (value.is_array() || value.is_object() || value.is_binary() || value.is_discarded()) {
    return std::string(ConfigTypeName(value));
  }
  if (value.is_number_float()) {
    // JSON has no spelling for these; use YAML's.
    const double x = value.get<double>();
    if (std::isnan(x)) return ".nan";
    if (std::isinf(x)) return x > 0 ? ".inf" : "-.inf";
  }
  // error_handler_t::replace: invalid UTF-8 in a string becomes U+FFFD instead of throwing.
  return Excerpt(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace scd::config
