// How config values are quoted in error messages: the kind of a value ("an integer", "a
// mapping") and a short rendering of what was found ("got \"abc\"", "got a list"). Shared by the
// override code and ConfigReader so that every config error reads the same way.
#ifndef SCD_COMMON_CONFIG_VALUE_TEXT_H_
#define SCD_COMMON_CONFIG_VALUE_TEXT_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace scd::config {

// "null", "a boolean", "an integer", "a number", "a string", "a list" or "a mapping".
std::string_view ConfigTypeName(const nlohmann::json& value);

// A scalar as JSON text cut to about 40 bytes (strings keep their quotes), or the type name of
// a list or mapping. Never throws, whatever bytes the value holds.
std::string ConfigValueText(const nlohmann::json& value);

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_VALUE_TEXT_H_
