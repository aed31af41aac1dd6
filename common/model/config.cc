// ModelConfig parsing (see config.h). HF's config classes (LlamaConfig, MistralConfig,
// Qwen2Config in transformers) are the reference for keys and defaults:
//   - num_key_value_heads defaults to num_attention_heads; head_dim to hidden/heads.
//   - Mistral: sliding_window defaults to 4096 when the key is absent; null means none.
//   - Qwen2: q/k/v biases always; the window applies only with use_sliding_window, and then
//     to layers >= max_window_layers (default 28). We support "no layer" and "every layer".
//   - Llama: attention_bias puts biases on q, k, v and o; we run the q/k/v ones and the
//     loader rejects a non-zero o bias. mlp_bias is unsupported.
//   - rope_scaling: "linear" divides every frequency by factor; "llama3" is
//     _compute_llama3_parameters from modeling_rope_utils.py (wavelength bands with a smooth
//     ramp between them).
// Structural sizes (hidden_size, layers, heads, intermediate_size, vocab_size) are required:
// a config.json without them is broken, and HF's 7B-sized defaults would hide that.
#include "common/model/config.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace scd {
namespace {

using nlohmann::json;

constexpr int kMistralDefaultSlidingWindow = 4096;
constexpr int kQwen2DefaultMaxWindowLayers = 28;

absl::Status KeyError(absl::string_view key, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat("config key '", key, "' ", problem));
}

std::string Shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

// The value under `key`, or nullptr when it is absent or null (both mean "use the default").
const json* Find(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

absl::Status ReadInt(const json& object, const char* key, bool required, int* out) {
  const json* value = Find(object, key);
  if (value == nullptr) {
    return required ? KeyError(key, "is required") : absl::OkStatus();
  }
  if (!value->is_number_integer()) {
    return KeyError(key, absl::StrCat("must be an integer, got ", Shown(*value)));
  }
  if (value->is_number_unsigned()
          ? value->get<uint64_t>() > uint64_t{INT32_MAX}
          : (value->get<int64_t>() > INT32_MAX || value->get<int64_t>() < INT32_MIN)) {
    return KeyError(key, absl::StrCat("is out of range: ", Shown(*value)));
  }
  *out = static_cast<int>(value->get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadFloat(const json& object, const char* key, bool required, float* out) {
  const json* value = Find(object, key);
  if (value == nullptr) {
    return required ? KeyError(key, "is required") : absl::OkStatus();
  }
  if (!value->is_number()) {
    return KeyError(key, absl::StrCat("must be a number, got ", Shown(*value)));
  }
  const double v = value->get<double>();
  if (!std::isfinite(v) || std::fabs(v) > std::numeric_limits<float>::max()) {
    return KeyError(key, absl::StrCat("must be a finite float, got ", Shown(*value)));
  }
  *out = static_cast<float>(v);
  return absl::OkStatus();
}

absl::Status ReadBool(const json& object, const char* key, bool* out) {
  const json* value = Find(object, key);
  if (value == nullptr) return absl::OkStatus();
  if (!value->is_boolean()) {
    return KeyError(key, absl::StrCat("must be true or false, got ", Shown(*value)));
  }
  *out = value->get<bool>();
  return absl::OkStatus();
}

absl::Status RequirePositive(absl::string_view key, double value) {
  if (value > 0) return absl::OkStatus();
  return KeyError(key, absl::StrCat("must be positive, got ", value));
}

absl::StatusOr<Architecture> ParseArchitecture(const json& object) {
  if (const json* list = Find(object, "architectures")) {
    if (!list->is_array() || list->empty() || !(*list)[0].is_string()) {
      return KeyError("architectures",
                      absl::StrCat("must be a non-empty list of names, got ", Shown(*list)));
    }
    const std::string name = (*list)[0].get<std::string>();
    for (Architecture arch : {Architecture::kLlama, Architecture::kMistral, Architecture::kQwen2}) {
      if (name == ArchitectureName(arch)) return arch;
    }
    return absl::UnimplementedError(
        absl::StrCat("config key 'architectures': unsupported architecture '", name,
                     "' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM)"));
  }
  if (const json* type = Find(object, "model_type")) {
    if (type->is_string()) {
      const std::string name = type->get<std::string>();
      if (name == "llama") return Architecture::kLlama;
      if (name == "mistral") return Architecture::kMistral;
      if (name == "qwen2") return Architecture::kQwen2;
      return absl::UnimplementedError(absl::StrCat(
          "config key 'model_type': unsupported model type '", name, "' (no 'architectures')"));
    }
  }
  return KeyError("architectures", "is required (or a known 'model_type')");
}

absl::Status ParseRopeScaling(const json& object, RopeScaling* out) {
  const json* scaling = Find(object, "rope_scaling");
  if (scaling == nullptr) return absl::OkStatus();
  if (!scaling->is_object()) {
    return KeyError("rope_scaling",
                    absl::StrCat("must be null or an object, got ", Shown(*scaling)));
  }
  const json* type = Find(*scaling, "rope_type");
  if (type == nullptr) type = Find(*scaling, "type");
  if (type == nullptr || !type->is_string()) {
    return KeyError("rope_scaling.rope_type", "must name the scaling type");
  }
  const std::string name = type->get<std::string>();
  RopeScaling result;
  if (name == "default") {
    *out = result;
    return absl::OkStatus();
  }
  if (name == "linear") {
    result.type = RopeScaling::Type::kLinear;
  } else if (name == "llama3") {
    result.type = RopeScaling::Type::kLlama3;
  } else {
    return absl::UnimplementedError(
        absl::StrCat("config key 'rope_scaling': rope type '", name,
                     "' is not supported (supported: default, linear, llama3)"));
  }
  if (!ReadFloat(*scaling, "factor", true, &result.factor).ok()) {
    return KeyError("rope_scaling.factor", "is required and must be a number");
  }
  SCD_RETURN_IF_ERROR(RequirePositive("rope_scaling.factor", result.factor));
  if (result.type == RopeScaling::Type::kLlama3) {
    for (auto [key, field] : {std::pair{"low_freq_factor", &result.low_freq_factor},
                              std::pair{"high_freq_factor", &result.high_freq_factor}}) {
      if (!ReadFloat(*scaling, key, true, field).ok()) {
        return KeyError(absl::StrCat("rope_scaling.", key), "is required and must be a number");
      }
      SCD_RETURN_IF_ERROR(RequirePositive(absl::StrCat("rope_scaling.", key), *field));
    }
    if (!ReadInt(*scaling, "original_max_position_embeddings", true,
                 &result.original_max_position_embeddings)
             .ok()) {
      return KeyError("rope_scaling.original_max_position_embeddings",
                      "is required and must be an integer");
    }
    SCD_RETURN_IF_ERROR(RequirePositive("rope_scaling.original_max_position_embeddings",
                                        result.original_max_position_embeddings));
    if (!(result.high_freq_factor > result.low_freq_factor)) {
      return KeyError("rope_scaling.high_freq_factor",
                      absl::StrCat("must exceed low_freq_factor (", result.low_freq_factor,
                                   "), got ", result.high_freq_factor));
    }
  }
  *out = result;
  return absl::OkStatus();
}

absl::Status ParseSlidingWindow(const json& object, ModelConfig* config) {
  config->sliding_window = 0;
  if (config->arch == Architecture::kLlama) return absl::OkStatus();
  const bool absent = object.find("sliding_window") == object.end();
  int window = 0;
  SCD_RETURN_IF_ERROR(ReadInt(object, "sliding_window", false, &window));
  if (Find(object, "sliding_window") != nullptr) {
    SCD_RETURN_IF_ERROR(RequirePositive("sliding_window", window));
  }
  if (config->arch == Architecture::kMistral) {
    config->sliding_window = absent ? kMistralDefaultSlidingWindow : window;
    return absl::OkStatus();
  }
  // Qwen2.
  bool use_sliding_window = false;
  SCD_RETURN_IF_ERROR(ReadBool(object, "use_sliding_window", &use_sliding_window));
  if (!use_sliding_window) return absl::OkStatus();
  if (absent) window = kMistralDefaultSlidingWindow;  // Qwen2Config's default is also 4096
  int max_window_layers = kQwen2DefaultMaxWindowLayers;
  SCD_RETURN_IF_ERROR(ReadInt(object, "max_window_layers", false, &max_window_layers));
  if (max_window_layers < 0) return KeyError("max_window_layers", "must not be negative");
  if (max_window_layers >= config->num_layers) return absl::OkStatus();  // no layer slides
  if (max_window_layers == 0) {
    config->sliding_window = window;
    return absl::OkStatus();
  }
  return absl::UnimplementedError(absl::StrCat(
      "config key 'max_window_layers': a sliding window on layers ", max_window_layers, "..",
      config->num_layers - 1, " only is not supported (needs 0 or >= num_hidden_layers)"));
}

absl::Status ParseTokenIds(const json& object, ModelConfig* config) {
  SCD_RETURN_IF_ERROR(ReadInt(object, "bos_token_id", false, &config->bos_token_id));
  config->eos_token_ids.clear();
  const json* eos = Find(object, "eos_token_id");
  if (eos == nullptr) return absl::OkStatus();
  if (eos->is_number_integer()) {
    int id = 0;
    SCD_RETURN_IF_ERROR(ReadInt(object, "eos_token_id", false, &id));
    config->eos_token_ids.push_back(id);
    return absl::OkStatus();
  }
  if (!eos->is_array()) {
    return KeyError("eos_token_id",
                    absl::StrCat("must be an integer or a list of integers, got ", Shown(*eos)));
  }
  for (const json& item : *eos) {
    if (!item.is_number_integer() || item.get<int64_t>() < 0 || item.get<int64_t>() > INT32_MAX) {
      return KeyError("eos_token_id", absl::StrCat("has an invalid entry ", Shown(item)));
    }
    config->eos_token_ids.push_back(static_cast<int>(item.get<int64_t>()));
  }
  return absl::OkStatus();
}

// The shortest decimal that reads back as `f`, as a double (so JSON shows 1e-05, not
// 9.999999747378752e-06).
double ShortestDouble(float f) {
  char buf[32];
  for (int precision = 6; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, static_cast<double>(f));
    if (std::strtof(buf, nullptr) == f) break;
  }
  return std::strtod(buf, nullptr);
}

json RopeScalingJson(const RopeScaling& scaling) {
  switch (scaling.type) {
    case RopeScaling::Type::kNone:
      return nullptr;
    case RopeScaling::Type::kLinear:
      return {{"rope_type", "linear"}, {"factor", ShortestDouble(scaling.factor)}};
    case RopeScaling::Type::kLlama3:
      return {{"rope_type", "llama3"},
              {"factor", ShortestDouble(scaling.factor)},
              {"low_freq_factor", ShortestDouble(scaling.low_freq_factor)},
              {"high_freq_factor", ShortestDouble(scaling.high_freq_factor)},
              {"original_max_position_embeddings", scaling.original_max_position_embeddings}};
  }
  return nullptr;
}

}  // namespace

std::string_view ArchitectureName(Architecture arch) {
  switch (arch) {
    case Architecture::kLlama:
      return "LlamaForCausalLM";
    case Architecture::kMistral:
      return "MistralForCausalLM";
    case Architecture::kQwen2:
      return "Qwen2ForCausalLM";
  }
  return "unknown";
}

absl::Status ModelConfig::Validate() const {
  SCD_RETURN_IF_ERROR(RequirePositive("hidden_size", hidden_size));
  SCD_RETURN_IF_ERROR(RequirePositive("num_hidden_layers", num_layers));
  SCD_RETURN_IF_ERROR(RequirePositive("num_attention_heads", num_heads));
  SCD_RETURN_IF_ERROR(RequirePositive("num_key_value_heads", num_kv_heads));
  SCD_RETURN_IF_ERROR(RequirePositive("head_dim", head_dim));
  SCD_RETURN_IF_ERROR(RequirePositive("intermediate_size", intermediate_size));
  SCD_RETURN_IF_ERROR(RequirePositive("vocab_size", vocab_size));
  SCD_RETURN_IF_ERROR(RequirePositive("max_position_embeddings", max_position_embeddings));
  SCD_RETURN_IF_ERROR(RequirePositive("rms_norm_eps", rms_norm_eps));
  SCD_RETURN_IF_ERROR(RequirePositive("rope_theta", rope_theta));
  if (num_heads % num_kv_heads != 0) {
    return KeyError(
        "num_key_value_heads",
        absl::StrCat("(", num_kv_heads, ") must divide num_attention_heads (", num_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return KeyError("head_dim", absl::StrCat("must be even for RoPE, got ", head_dim));
  }
  if (sliding_window < 0) return KeyError("sliding_window", "must not be negative");
  if (bos_token_id < 0 || bos_token_id >= vocab_size) {
    return KeyError("bos_token_id",
                    absl::StrCat("(", bos_token_id, ") must be in [0, vocab_size)"));
  }
  for (int id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return KeyError("eos_token_id", absl::StrCat("(", id, ") must be in [0, vocab_size)"));
    }
  }
  if (rope_scaling.type != RopeScaling::Type::kNone) {
    SCD_RETURN_IF_ERROR(RequirePositive("rope_scaling.factor", rope_scaling.factor));
  }
  if (rope_scaling.type == RopeScaling::Type::kLlama3 &&
      !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor &&
        rope_scaling.low_freq_factor > 0 && rope_scaling.original_max_position_embeddings > 0)) {
    return KeyError("rope_scaling",
                    "needs 0 < low_freq_factor < high_freq_factor and "
                    "original_max_position_embeddings > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(std::string_view json_text,
                                                  std::string_view fallback_name) {
  json object;
  try {
    object = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    return absl::InvalidArgumentError(absl::StrCat("config is not valid JSON: ", e.what()));
  }
  if (!object.is_object()) {
    return absl::InvalidArgumentError("config must be a JSON object");
  }
  ModelConfig config;
  SCD_ASSIGN_OR_RETURN(config.arch, ParseArchitecture(object));
  config.name = std::string(fallback_name);
  if (const json* name = Find(object, "_name_or_path"); name != nullptr && name->is_string()) {
    if (!name->get<std::string>().empty()) config.name = name->get<std::string>();
  }
  switch (config.arch) {
    case Architecture::kLlama:
      config.max_position_embeddings = 2048;
      break;
    case Architecture::kMistral:
      config.max_position_embeddings = 4096 * 32;
      break;
    case Architecture::kQwen2:
      config.max_position_embeddings = 32768;
      break;
  }

  SCD_RETURN_IF_ERROR(ReadInt(object, "hidden_size", true, &config.hidden_size));
  SCD_RETURN_IF_ERROR(ReadInt(object, "num_hidden_layers", true, &config.num_layers));
  SCD_RETURN_IF_ERROR(ReadInt(object, "num_attention_heads", true, &config.num_heads));
  SCD_RETURN_IF_ERROR(ReadInt(object, "intermediate_size", true, &config.intermediate_size));
  SCD_RETURN_IF_ERROR(ReadInt(object, "vocab_size", true, &config.vocab_size));
  SCD_RETURN_IF_ERROR(RequirePositive("hidden_size", config.hidden_size));
  SCD_RETURN_IF_ERROR(RequirePositive("num_hidden_layers", config.num_layers));
  SCD_RETURN_IF_ERROR(RequirePositive("num_attention_heads", config.num_heads));
  config.num_kv_heads = config.num_heads;
  SCD_RETURN_IF_ERROR(ReadInt(object, "num_key_value_heads", false, &config.num_kv_heads));
  if (Find(object, "head_dim") != nullptr) {
    SCD_RETURN_IF_ERROR(ReadInt(object, "head_dim", false, &config.head_dim));
  } else if (config.hidden_size % config.num_heads != 0) {
    return KeyError("num_attention_heads",
                    absl::StrCat("(", config.num_heads, ") must divide hidden_size (",
                                 config.hidden_size, ") when head_dim is not given"));
  } else {
    config.head_dim = config.hidden_size / config.num_heads;
  }
  SCD_RETURN_IF_ERROR(
      ReadInt(object, "max_position_embeddings", false, &config.max_position_embeddings));
  SCD_RETURN_IF_ERROR(ReadFloat(object, "rms_norm_eps", false, &config.rms_norm_eps));
  SCD_RETURN_IF_ERROR(ReadFloat(object, "rope_theta", false, &config.rope_theta));
  SCD_RETURN_IF_ERROR(ParseRopeScaling(object, &config.rope_scaling));
  SCD_RETURN_IF_ERROR(ReadBool(object, "tie_word_embeddings", &config.tie_word_embeddings));

  if (const json* act = Find(object, "hidden_act")) {
    if (!act->is_string()) return KeyError("hidden_act", "must be a string");
    const std::string name = act->get<std::string>();
    if (name != "silu" && name != "swish") {
      return absl::UnimplementedError(absl::StrCat("config key 'hidden_act': activation '", name,
                                                   "' is not supported (only silu)"));
    }
  }
  if (config.arch == Architecture::kQwen2) {
    config.qkv_bias = true;
  } else if (config.arch == Architecture::kLlama) {
    SCD_RETURN_IF_ERROR(ReadBool(object, "attention_bias", &config.qkv_bias));
    bool mlp_bias = false;
    SCD_RETURN_IF_ERROR(ReadBool(object, "mlp_bias", &mlp_bias));
    if (mlp_bias) {
      return absl::UnimplementedError("config key 'mlp_bias': MLP biases are not supported");
    }
  }
  SCD_RETURN_IF_ERROR(ParseSlidingWindow(object, &config));
  SCD_RETURN_IF_ERROR(ParseTokenIds(object, &config));
  SCD_RETURN_IF_ERROR(config.Validate());
  return config;
}

absl::StatusOr<ModelConfig> ModelConfig::FromDirectory(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("model config not found: ", path));
    }
    return text.status();
  }
  std::string fallback = std::filesystem::path(dir).lexically_normal().filename().string();
  if (fallback.empty()) {
    fallback = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  }
  absl::StatusOr<ModelConfig> config = FromJson(*text, fallback);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::string ModelConfig::ToCanonicalJson() const {
  json object = {
      {"architecture", std::string(ArchitectureName(arch))},
      {"hidden_size", hidden_size},
      {"num_layers", num_layers},
      {"num_heads", num_heads},
      {"num_kv_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"intermediate_size", intermediate_size},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", ShortestDouble(rms_norm_eps)},
      {"rope_theta", ShortestDouble(rope_theta)},
      {"rope_scaling", RopeScalingJson(rope_scaling)},
      {"tie_word_embeddings", tie_word_embeddings},
      {"qkv_bias", qkv_bias},
      {"sliding_window", sliding_window},
      {"bos_token_id", bos_token_id},
      {"eos_token_ids", eos_token_ids},
  };
  return object.dump();
}

std::string ModelConfig::ToHfConfigJson() const {
  static constexpr const char* kModelTypes[] = {"llama", "mistral", "qwen2"};
  json object = {
      {"architectures", {std::string(ArchitectureName(arch))}},
      {"model_type", kModelTypes[static_cast<int>(arch)]},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_layers},
      {"num_attention_heads", num_heads},
      {"num_key_value_heads", num_kv_heads},
      {"head_dim", head_dim},
      {"intermediate_size", intermediate_size},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"rms_norm_eps", ShortestDouble(rms_norm_eps)},
      {"rope_theta", ShortestDouble(rope_theta)},
      {"rope_scaling", RopeScalingJson(rope_scaling)},
      {"tie_word_embeddings", tie_word_embeddings},
      {"hidden_act", "silu"},
      {"bos_token_id", bos_token_id},
      {"torch_dtype", "float32"},
  };
  if (!name.empty()) object["_name_or_path"] = name;
  if (eos_token_ids.size() == 1) {
    object["eos_token_id"] = eos_token_ids[0];
  } else if (!eos_token_ids.empty()) {
    object["eos_token_id"] = eos_token_ids;
  }
  const json window = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  switch (arch) {
    case Architecture::kLlama:
      object["attention_bias"] = qkv_bias;
      break;
    case Architecture::kMistral:
      object["sliding_window"] = window;
      break;
    case Architecture::kQwen2:
      object["use_sliding_window"] = sliding_window > 0;
      object["sliding_window"] = window;
      object["max_window_layers"] = 0;
      break;
  }
  return object.dump(2);
}

std::vector<float> RopeInverseFrequencies(const ModelConfig& config) {
  // HF: inv_freq[i] = 1 / theta^(2i / head_dim). Computed in double and rounded once (HF
  // rounds in F32 at each step; the two agree to about one F32 ulp).
  const int half = config.head_dim / 2;
  std::vector<float> inv_freq(half);
  const RopeScaling& scaling = config.rope_scaling;
  const double factor = scaling.factor;
  const double pi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(static_cast<double>(config.rope_theta),
                              2.0 * i / static_cast<double>(config.head_dim));
    if (scaling.type == RopeScaling::Type::kLinear) {
      f /= factor;
    } else if (scaling.type == RopeScaling::Type::kLlama3) {
      const double old_context = scaling.original_max_position_embeddings;
      const double low_freq_wavelen = old_context / scaling.low_freq_factor;
      const double high_freq_wavelen = old_context / scaling.high_freq_factor;
      const double wavelen = 2.0 * pi / f;
      if (wavelen > low_freq_wavelen) {
        f /= factor;  // long wavelengths: interpolate fully
      } else if (!(wavelen < high_freq_wavelen)) {
        // Medium band: blend the scaled and unscaled frequency.
        const double smooth = (old_context / wavelen - scaling.low_freq_factor) /
                              (scaling.high_freq_factor - scaling.low_freq_factor);
        f = (1.0 - smooth) * f / factor + smooth * f;
      }  // short wavelengths: unchanged
    }
    inv_freq[i] = static_cast<float>(f);
  }
  return inv_freq;
}

}  // namespace scd
