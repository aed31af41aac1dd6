// ModelConfig parsing: the shared checkpoints, Mistral/Qwen2 specifics, RoPE scaling against
// hand-computed frequencies, and errors that name the offending key.
#include "common/model/config.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "tests/test_support.h"

namespace scd {
namespace {

// A minimal Llama config.json with `extra` spliced into the object.
std::string LlamaJson(const std::string& extra = "") {
  return R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64,
             "num_hidden_layers": 2, "num_attention_heads": 8, "intermediate_size": 128,
             "vocab_size": 100)" +
         (extra.empty() ? std::string() : ", " + extra) + "}";
}

// The error message of parsing `json`, which must fail.
std::string ErrorOf(const std::string& json) {
  auto config = ModelConfig::FromJson(json);
  REQUIRE(!config.ok());
  return std::string(config.status().message());
}

TEST_CASE("stories260K config.json parses to the documented shape", "[cpu]") {
  for (const char* name : {"stories260K", "stories260K-babi-qa", "stories260K-wiki"}) {
    auto config = ModelConfig::FromDirectory(testing::SharedPath(std::string("models/") + name));
    REQUIRE(config.ok());
    CHECK(config->name == name);
    CHECK(config->arch == Architecture::kLlama);
    CHECK(config->hidden_size == 64);
    CHECK(config->num_layers == 5);
    CHECK(config->num_heads == 8);
    CHECK(config->num_kv_heads == 4);
    CHECK(config->head_dim == 8);
    CHECK(config->q_dim() == 64);
    CHECK(config->kv_dim() == 32);
    CHECK(config->group_size() == 2);
    CHECK(config->intermediate_size == 172);
    CHECK(config->vocab_size == 512);
    CHECK(config->max_position_embeddings == 512);
    CHECK(config->rms_norm_eps == 1e-5f);
    CHECK(config->rope_theta == 10000.0f);
    CHECK(config->rope_scaling.type == RopeScaling::Type::kNone);
    CHECK(config->tie_word_embeddings);
    CHECK_FALSE(config->qkv_bias);
    CHECK(config->sliding_window == 0);
    CHECK(config->bos_token_id == 1);
    CHECK(config->eos_token_ids == std::vector<int>{2});
  }
}

TEST_CASE("Defaults follow Hugging Face", "[cpu]") {
  auto config = ModelConfig::FromJson(LlamaJson(), "dirname");
  REQUIRE(config.ok());
  CHECK(config->name == "dirname");
  CHECK(config->num_kv_heads == 8);  // = num_attention_heads
  CHECK(config->head_dim == 8);      // = hidden / heads
  CHECK(config->max_position_embeddings == 2048);
  CHECK(config->rms_norm_eps == 1e-6f);
  CHECK(config->rope_theta == 10000.0f);
  CHECK_FALSE(config->tie_word_embeddings);
  CHECK_FALSE(config->qkv_bias);
  CHECK(config->eos_token_ids.empty());
  // Explicit head_dim need not be hidden / heads; null means the default.
  CHECK(ModelConfig::FromJson(LlamaJson(R"("head_dim": 16)"))->head_dim == 16);
  CHECK(ModelConfig::FromJson(LlamaJson(R"("head_dim": null)"))->head_dim == 8);
  CHECK(ModelConfig::FromJson(LlamaJson(R"("eos_token_id": [5, 7, 9])"))->eos_token_ids ==
        std::vector<int>{5, 7, 9});
  // A Llama config's sliding_window is ignored; model_type works without architectures.
  CHECK(ModelConfig::FromJson(LlamaJson(R"("sliding_window": 16)"))->sliding_window == 0);
  auto by_type = ModelConfig::FromJson(
      R"({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10})");
  REQUIRE(by_type.ok());
  CHECK(by_type->arch == Architecture::kQwen2);
}

TEST_CASE("Mistral sliding window: absent means 4096, null means none", "[cpu]") {
  const std::string base = R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096,
      "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 14336, "vocab_size": 32000, "rope_theta": 1000000.0)";
  auto absent = ModelConfig::FromJson(base + "}");
  REQUIRE(absent.ok());
  CHECK(absent->arch == Architecture::kMistral);
  CHECK(ArchitectureName(absent->arch) == "MistralForCausalLM");
  CHECK(absent->sliding_window == 4096);
  CHECK(absent->head_dim == 128);
  CHECK(absent->group_size() == 4);
  CHECK(absent->rope_theta == 1e6f);
  CHECK(ModelConfig::FromJson(base + R"(, "sliding_window": null})")->sliding_window == 0);
  CHECK(ModelConfig::FromJson(base + R"(, "sliding_window": 1024})")->sliding_window == 1024);
  CHECK(ErrorOf(base + R"(, "sliding_window": -5})").find("sliding_window") != std::string::npos);
  CHECK(ErrorOf(base + R"(, "sliding_window": "big"})").find("sliding_window") !=
        std::string::npos);
}

TEST_CASE("Qwen2 has q/k/v biases and a window only with use_sliding_window", "[cpu]") {
  const std::string base = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 896,
      "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
      "intermediate_size": 4864, "vocab_size": 151936, "bos_token_id": 151643,
      "eos_token_id": 151645, "sliding_window": 32768, "tie_word_embeddings": true)";
  auto off = ModelConfig::FromJson(base + R"(, "use_sliding_window": false})");
  REQUIRE(off.ok());
  CHECK(off->arch == Architecture::kQwen2);
  CHECK(off->qkv_bias);
  CHECK(off->sliding_window == 0);
  CHECK(off->head_dim == 64);
  CHECK(off->tie_word_embeddings);
  CHECK(off->eos_token_ids == std::vector<int>{151645});
  // Windowed layers start at max_window_layers (default 28 ≥ 24 layers: none slide).
  CHECK(ModelConfig::FromJson(base + R"(, "use_sliding_window": true})")->sliding_window == 0);
  CHECK(ModelConfig::FromJson(base + R"(, "use_sliding_window": true, "max_window_layers": 0})")
            ->sliding_window == 32768);
  auto partial = ModelConfig::FromJson(base + R"(, "use_sliding_window": true,
                                                   "max_window_layers": 12})");
  REQUIRE(!partial.ok());
  CHECK(absl::IsUnimplemented(partial.status()));
  CHECK(std::string(partial.status().message()).find("max_window_layers") != std::string::npos);
}

TEST_CASE("Llama attention_bias means q/k/v biases; mlp_bias is unsupported", "[cpu]") {
  CHECK(ModelConfig::FromJson(LlamaJson(R"("attention_bias": true)"))->qkv_bias);
  CHECK_FALSE(ModelConfig::FromJson(LlamaJson(R"("attention_bias": false)"))->qkv_bias);
  auto mlp = ModelConfig::FromJson(LlamaJson(R"("mlp_bias": true)"));
  REQUIRE(!mlp.ok());
  CHECK(absl::IsUnimplemented(mlp.status()));
  CHECK(std::string(mlp.status().message()).find("mlp_bias") != std::string::npos);
}

TEST_CASE("RoPE inverse frequencies without scaling and with linear scaling", "[cpu]") {
  auto config = ModelConfig::FromJson(LlamaJson());  // head_dim 8, theta 1e4
  REQUIRE(config.ok());
  const std::vector<float> base = RopeInverseFrequencies(*config);
  REQUIRE(base.size() == 4);
  // 1 / 10000^(2i/8) = 1, 0.1, 0.01, 0.001.
  CHECK(base[0] == 1.0f);
  CHECK(base[1] == Approx(0.1f).epsilon(1e-7));
  CHECK(base[2] == Approx(0.01f).epsilon(1e-7));
  CHECK(base[3] == Approx(0.001f).epsilon(1e-7));

  auto linear = ModelConfig::FromJson(LlamaJson(R"("rope_scaling": {"type": "linear",
                                                                      "factor": 4.0})"));
  REQUIRE(linear.ok());
  CHECK(linear->rope_scaling.type == RopeScaling::Type::kLinear);
  const std::vector<float> scaled = RopeInverseFrequencies(*linear);
  for (int i = 0; i < 4; ++i) CHECK(scaled[i] == Approx(base[i] / 4).epsilon(1e-7));

  // "default" is no scaling; rope_type wins over the legacy "type" key.
  auto def = ModelConfig::FromJson(LlamaJson(R"("rope_scaling": {"rope_type": "default"})"));
  REQUIRE(def.ok());
  CHECK(def->rope_scaling.type == RopeScaling::Type::kNone);
  CHECK(RopeInverseFrequencies(*def) == base);
}

TEST_CASE("Llama-3 RoPE scaling matches hand-computed frequencies", "[cpu]") {
  // Llama 3.1 8B: head_dim 128, theta 5e5, factor 8, low/high freq factors 1/4, 8192 ctx.
  // Bands by wavelength λ = 2π/f: λ < 8192/4 = 2048 unchanged; λ > 8192 divided by 8;
  // between, s = (8192/λ - 1)/3 and f' = (1-s)·f/8 + s·f. For i = 32: f = 5e5^-0.5 =
  // 1.41421e-3, λ = 4442.88, s = 0.281277, f' = f·(0.718723/8 + 0.281277) = 5.24846e-4.
  auto config = ModelConfig::FromJson(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
          "vocab_size": 128256, "rope_theta": 500000.0, "max_position_embeddings": 131072,
          "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8192, "rope_type": "llama3"},
          "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009]})");
  REQUIRE(config.ok());
  CHECK(config->rope_scaling.type == RopeScaling::Type::kLlama3);
  CHECK(config->rope_scaling.factor == 8.0f);
  CHECK(config->rope_scaling.original_max_position_embeddings == 8192);
  CHECK(config->eos_token_ids.size() == 3);
  const std::vector<float> f = RopeInverseFrequencies(*config);
  REQUIRE(f.size() == 64);
  CHECK(f[0] == 1.0f);                                              // high-frequency band
  CHECK(f[20] == Approx(0.016560440080994446).epsilon(1e-6));       // unchanged
  CHECK(f[30] == Approx(0.0013718935677611381).epsilon(1e-6));      // ramp, s = 0.5928
  CHECK(f[32] == Approx(0.0005248461609929547).epsilon(1e-6));      // ramp, s = 0.2813
  CHECK(f[34] == Approx(0.00017850781276799638).epsilon(1e-6));     // ramp, s = 0.0745
  CHECK(f[40] == Approx(0.0002742481756762073 / 8).epsilon(1e-6));  // low band: f/8
  CHECK(f[63] == Approx(2.455140791131609e-06 / 8).epsilon(1e-6));
}

TEST_CASE("Unsupported RoPE types are Unimplemented and named", "[cpu]") {
  for (const char* type : {"yarn", "dynamic", "longrope"}) {
    auto config = ModelConfig::FromJson(LlamaJson(
        std::string(R"("rope_scaling": {"rope_type": ")") + type + R"(", "factor": 2.0})"));
    REQUIRE(!config.ok());
    CHECK(absl::IsUnimplemented(config.status()));
    CHECK(std::string(config.status().message()).find(type) != std::string::npos);
  }
}

TEST_CASE("Invalid configs are errors naming the key", "[cpu]") {
  const std::pair<std::string, std::string> cases[] = {
      {LlamaJson(R"("num_key_value_heads": 3)"), "num_key_value_heads"},
      {LlamaJson(R"("num_key_value_heads": 0)"), "num_key_value_heads"},
      {LlamaJson(R"("rms_norm_eps": -1e-5)"), "rms_norm_eps"},
      {LlamaJson(R"("rms_norm_eps": "small")"), "rms_norm_eps"},
      {LlamaJson(R"("rope_theta": 0)"), "rope_theta"},
      {LlamaJson(R"("head_dim": 7)"), "head_dim"},
      {LlamaJson(R"("tie_word_embeddings": "yes")"), "tie_word_embeddings"},
      {LlamaJson(R"("max_position_embeddings": 1.5)"), "max_position_embeddings"},
      {LlamaJson(R"("eos_token_id": "eos")"), "eos_token_id"},
      {LlamaJson(R"("eos_token_id": [2, "x"])"), "eos_token_id"},
      {LlamaJson(R"("bos_token_id": 100)"), "bos_token_id"},  // vocab is 100
      {LlamaJson(R"("rope_scaling": {"rope_type": "linear"})"), "rope_scaling.factor"},
      {LlamaJson(R"("rope_scaling": {"rope_type": "linear", "factor": -2})"),
       "rope_scaling.factor"},
      {LlamaJson(R"("rope_scaling": {"factor": 2})"), "rope_scaling.rope_type"},
      {LlamaJson(R"("rope_scaling": "linear")"), "rope_scaling"},
      {LlamaJson(R"("rope_scaling": {"rope_type": "llama3", "factor": 8,
                     "low_freq_factor": 1, "high_freq_factor": 4})"),
       "rope_scaling.original_max_position_embeddings"},
      {LlamaJson(R"("rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                     "high_freq_factor": 4, "original_max_position_embeddings": 8192})"),
       "rope_scaling.high_freq_factor"},
      {LlamaJson(R"("hidden_act": "gelu")"), "hidden_act"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 0, "num_hidden_layers": 2,
           "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100})",
       "hidden_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": "64", "num_hidden_layers": 2,
           "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100})",
       "hidden_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 6, "intermediate_size": 128, "vocab_size": 100})",
       "num_attention_heads"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 8, "intermediate_size": 128})",
       "vocab_size"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": -2,
           "num_attention_heads": 8, "intermediate_size": 128, "vocab_size": 100})",
       "num_hidden_layers"},
      {R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 8, "intermediate_size": 1e3, "vocab_size": 100})",
       "intermediate_size"},
      {R"({"architectures": ["GPT2LMHeadModel"], "hidden_size": 64})", "GPT2LMHeadModel"},
      {R"({"architectures": "LlamaForCausalLM", "hidden_size": 64})", "architectures"},
      {R"({"hidden_size": 64})", "architectures"},
  };
  for (const auto& [json, key] : cases) {
    INFO(json);
    const std::string message = ErrorOf(json);
    INFO(message);
    CHECK(message.find(key) != std::string::npos);
  }
  CHECK(absl::IsInvalidArgument(ModelConfig::FromJson(LlamaJson(R"("head_dim": 7)")).status()));
  CHECK(absl::IsInvalidArgument(ModelConfig::FromJson("{not json").status()));
  CHECK(absl::IsInvalidArgument(ModelConfig::FromJson("[1, 2]").status()));
}

TEST_CASE("FromDirectory names the missing or bad config.json", "[cpu]") {
  const std::string dir = testing::TempDir();
  auto missing = ModelConfig::FromDirectory(dir);
  REQUIRE(!missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find(dir + "/config.json") != std::string::npos);

  FILE* f = std::fopen((dir + "/config.json").c_str(), "w");
  REQUIRE(f != nullptr);
  std::fputs(LlamaJson(R"("rms_norm_eps": -1)").c_str(), f);
  std::fclose(f);
  auto bad = ModelConfig::FromDirectory(dir);
  REQUIRE(!bad.ok());
  const std::string message(bad.status().message());
  CHECK(message.find(dir + "/config.json") != std::string::npos);
  CHECK(message.find("rms_norm_eps") != std::string::npos);
}

TEST_CASE("ToHfConfigJson round-trips and the canonical JSON ignores the name", "[cpu]") {
  const std::string inputs[] = {
      LlamaJson(R"("num_key_value_heads": 2, "tie_word_embeddings": true,
                   "attention_bias": true, "eos_token_id": [3, 4], "rms_norm_eps": 1e-5,
                   "rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 1,
                   "high_freq_factor": 4, "original_max_position_embeddings": 64})"),
      R"({"architectures": ["MistralForCausalLM"], "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 1, "intermediate_size": 8,
          "vocab_size": 10, "sliding_window": 7, "eos_token_id": 2})",
      R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 4, "intermediate_size": 8, "vocab_size": 10,
          "use_sliding_window": true, "sliding_window": 5, "max_window_layers": 0,
          "rope_scaling": {"type": "linear", "factor": 2.5}})",
  };
  for (const std::string& input : inputs) {
    auto config = ModelConfig::FromJson(input, "a");
    REQUIRE(config.ok());
    auto again = ModelConfig::FromJson(config->ToHfConfigJson());
    REQUIRE(again.ok());
    CHECK(again->name == "a");
    CHECK(again->ToCanonicalJson() == config->ToCanonicalJson());
    CHECK(again->max_position_embeddings == config->max_position_embeddings);
  }
  auto a = ModelConfig::FromJson(LlamaJson(), "one");
  auto b = ModelConfig::FromJson(LlamaJson(), "two");
  auto c = ModelConfig::FromJson(LlamaJson(R"("rms_norm_eps": 1e-5)"), "one");
  CHECK(a->ToCanonicalJson() == b->ToCanonicalJson());
  CHECK(a->ToCanonicalJson() != c->ToCanonicalJson());
  CHECK(c->ToCanonicalJson().find("\"rms_norm_eps\":1e-05") != std::string::npos);
}

}  // namespace
}  // namespace scd
