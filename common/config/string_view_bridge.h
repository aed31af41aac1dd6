// Debian's Abseil has its own absl::string_view, distinct from std::string_view (see
// common/tokenizer/json_fields.h); absl::StrCat and the absl::Status constructors need this
// bridge for the std::string_view the config code uses.
#ifndef SCD_COMMON_CONFIG_STRING_VIEW_BRIDGE_H_
#define SCD_COMMON_CONFIG_STRING_VIEW_BRIDGE_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace scd::config {

inline absl::string_view Sv(std::string_view s) { return absl::string_view(s.data(), s.size()); }
inline std::string_view Sv(absl::string_view s) { return std::string_view(s.data(), s.size()); }

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_STRING_VIEW_BRIDGE_H_
