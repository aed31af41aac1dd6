// The `weights` section both daemons' configs take (docs/CONFIG.md): `weights.dtype`, how the
// CPU backend holds the weight matrices (f32, the default, or int8; common/runtime/backend.h).
// Header-only, like http_keys.h.
#ifndef SCD_COMMON_CONFIG_WEIGHTS_KEYS_H_
#define SCD_COMMON_CONFIG_WEIGHTS_KEYS_H_

#include <array>
#include <string>
#include <string_view>

#include "common/config/config_reader.h"
#include "common/runtime/backend.h"

namespace scd::config {

// weights.dtype into *dtype (its value there is the default); a bad value is the reader's error.
inline void ReadWeightsKeys(ConfigReader& r, WeightDtype* dtype) {
  ConfigReader weights = r.Child("weights");
  const std::string name = weights.Enum("dtype", std::string(WeightDtypeName(*dtype)),
                                        std::array<std::string_view, 2>{"f32", "int8"});
  *dtype = name == "int8" ? WeightDtype::kInt8 : WeightDtype::kF32;
}

}  // namespace scd::config

#endif  // SCD_COMMON_CONFIG_WEIGHTS_KEYS_H_
