// Fuzzes the config.json loader (ModelConfig::FromJson, common/model/config.h). The input is
// the file's text. An accepted config must be valid (Validate), and its Hugging Face rendering
// (ToHfConfigJson) must load back to the same computation (equal ToCanonicalJson): the
// checkpoint writer and the digests depend on both.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/model/config.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = scd::ModelConfig::FromJson(text, "fuzz");
  if (!config.ok()) return 0;
  FUZZ_CHECK(config->Validate().ok());
  const std::string canonical = config->ToCanonicalJson();
  auto again = scd::ModelConfig::FromJson(config->ToHfConfigJson(), "fuzz");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->ToCanonicalJson() == canonical);
  // RoPE frequencies are head_dim / 2 floats; a config may declare any positive int, so only
  // plausible sizes are computed (a real model would fail to load its weights first).
  if (config->head_dim <= (1 << 16)) {
    FUZZ_CHECK(scd::RopeInverseFrequencies(*config).size() == size_t(config->head_dim / 2));
  }
  return 0;
}
