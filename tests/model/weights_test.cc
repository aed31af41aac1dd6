// LoadModel on the shared checkpoints (shape, digests, speed, values against the raw file)
// and on broken copies of them (missing files, shape mismatches, untied without lm_head,
// biases we cannot run).
#include "common/model/weights.h"

#include <time.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <string>

#include "common/base/file_io.h"
#include "common/model/checkpoint.h"
#include "common/model/safetensors.h"
#include "common/model/weight_layout.h"
#include "tests/model/model_dirs.h"
#include "tests/model/tiny_config.h"
#include "tests/test_support.h"

namespace scd {
namespace {

namespace fs = std::filesystem;

// A writable copy of a shared model directory.
std::string CopyOfSharedModel(const std::string& name) {
  const std::string src = testing::SharedPath("models/" + name);
  const std::string dst = testing::TempDir() + "/" + name;
  fs::create_directories(dst);
  for (const auto& entry : fs::directory_iterator(src)) {
    fs::copy_file(entry.path(), fs::path(dst) / entry.path().filename());
    fs::permissions(fs::path(dst) / entry.path().filename(), fs::perms::owner_write,
                    fs::perm_options::add);
  }
  return dst;
}

void EditConfig(const std::string& dir, const std::string& from, const std::string& to) {
  const std::string path = dir + "/config.json";
  std::string text = testing::ReadFileOrFail(path);
  const size_t pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  REQUIRE(WriteFileAtomically(path, text).ok());
}

TEST_CASE("The shared checkpoints load with the documented shape", "[cpu]") {
  std::vector<std::string> digests;
  for (const char* name : {"stories260K", "stories260K-babi-qa", "stories260K-wiki"}) {
    INFO(name);
    const std::string dir = testing::SharedPath(std::string("models/") + name);
    const auto start = std::chrono::steady_clock::now();
    const double cpu_start = testing::ProcessCpuSeconds();
    auto loaded = LoadModel(dir);
    const double cpu_ms = (testing::ProcessCpuSeconds() - cpu_start) * 1e3;
    const double wall_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    REQUIRE(loaded.ok());
    const Model& model = **loaded;
    INFO("load took " << cpu_ms << " ms CPU, " << wall_ms << " ms wall");
    if (testing::kOptimizedBuild) {
      CHECK(cpu_ms < 100.0);
      // Only guards against hangs: the CPU time above is the figure. A loaded CI host has
      // stalled a 3 ms load for 2.5 s of wall time (reading ../shared on a fresh clone).
      CHECK(wall_ms < 30000.0);
    }
    CHECK(model.dir == dir);
    CHECK(model.config.name == name);
    CHECK(model.config.hidden_size == 64);
    CHECK(model.config.num_layers == 5);
    CHECK(model.config.num_heads == 8);
    CHECK(model.config.num_kv_heads == 4);
    CHECK(model.config.head_dim == 8);
    CHECK(model.config.intermediate_size == 172);
    CHECK(model.config.vocab_size == 512);
    CHECK(model.config.tie_word_embeddings);

    const ModelWeights& w = model.weights;
    CHECK(w.embed.size() == 512 * 64);
    CHECK(w.lm_head.empty());
    CHECK(&w.output_matrix() == &w.embed);
    CHECK(w.final_norm.size() == 64);
    REQUIRE(w.layers.size() == 5);
    for (const LayerWeights& l : w.layers) {
      CHECK(l.attn_norm.size() == 64);
      CHECK(l.wq.size() == 64 * 64);
      CHECK(l.wk.size() == 32 * 64);
      CHECK(l.wv.size() == 32 * 64);
      CHECK(l.wo.size() == 64 * 64);
      CHECK(l.bq.empty());
      CHECK(l.ffn_norm.size() == 64);
      CHECK(l.w_gate.size() == 172 * 64);
      CHECK(l.w_up.size() == 172 * 64);
      CHECK(l.w_down.size() == 64 * 172);
    }
    // 512·64 + 5·(2·64 + 2·64² + 2·32·64 + 3·172·64) + 64.
    const size_t per_layer = 2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 3 * 172 * 64;
    CHECK(w.ParameterCount() == 512 * 64 + 5 * per_layer + 64);
    CHECK(w.DecodeBytesStreamed() == (5 * per_layer + 64 + 512 * 64) * sizeof(float));

    // Values come straight from the file, in HF layout.
    auto file = SafetensorsFile::Open(dir + "/model.safetensors");
    REQUIRE(file.ok());
    CHECK(*(*file)->ReadAsFloat("model.layers.3.mlp.down_proj.weight") == w.layers[3].w_down);
    CHECK(*(*file)->ReadAsFloat("model.embed_tokens.weight") == w.embed);
    CHECK(*(*file)->ReadAsFloat("model.norm.weight") == w.final_norm);

    CHECK(model.digest().size() == 64);
    CHECK(model.digest() == ComputeModelDigest(model.config, model.weights));
    auto again = LoadModel(dir);
    REQUIRE(again.ok());
    CHECK((*again)->digest() == model.digest());  // stable across loads
    digests.push_back(model.digest());
  }
  CHECK(digests[0] != digests[1]);
  CHECK(digests[0] != digests[2]);
  CHECK(digests[1] != digests[2]);
}

TEST_CASE("The digest covers every tensor and the config", "[cpu]") {
  auto loaded = LoadModel(testing::SharedPath("models/stories260K"));
  REQUIRE(loaded.ok());
  const Model& model = **loaded;
  for (const WeightEntry& entry : WeightLayout(model.config)) {
    ModelWeights changed = model.weights;
    WeightData(changed, entry).back() += 1e-6f;
    REQUIRE(ComputeModelDigest(model.config, changed) != model.digest());
  }
  ModelConfig config = model.config;
  config.rope_theta = 10001.0f;
  CHECK(ComputeModelDigest(config, model.weights) != model.digest());
  config = model.config;
  config.name = "renamed";  // the name is not part of the function
  CHECK(ComputeModelDigest(config, model.weights) == model.digest());
}

TEST_CASE("Missing config.json or weights are NotFound naming the path", "[cpu]") {
  const std::string dir = CopyOfSharedModel("stories260K");
  fs::remove(dir + "/model.safetensors");
  auto no_weights = LoadModel(dir);
  REQUIRE(!no_weights.ok());
  CHECK(absl::IsNotFound(no_weights.status()));
  CHECK(testing::StatusHas(no_weights.status(), dir + "/model.safetensors"));

  fs::remove(dir + "/config.json");
  auto no_config = LoadModel(dir);
  REQUIRE(!no_config.ok());
  CHECK(absl::IsNotFound(no_config.status()));
  CHECK(testing::StatusHas(no_config.status(), dir + "/config.json"));

  auto no_dir = LoadModel(dir + "/nonexistent");
  CHECK(absl::IsNotFound(no_dir.status()));
}

TEST_CASE("Shapes are checked against the config, naming tensor and both shapes", "[cpu]") {
  const std::string dir = CopyOfSharedModel("stories260K");
  EditConfig(dir, "\"intermediate_size\": 172", "\"intermediate_size\": 170");
  auto model = LoadModel(dir);
  REQUIRE(!model.ok());
  INFO(model.status().message());
  CHECK(absl::IsInvalidArgument(model.status()));
  CHECK(testing::StatusHas(model.status(), "model.layers.0.mlp.gate_proj.weight"));
  CHECK(testing::StatusHas(model.status(), "[172, 64]"));
  CHECK(testing::StatusHas(model.status(), "expected [170, 64]"));
  CHECK(testing::StatusHas(model.status(), dir + "/model.safetensors"));

  const std::string dir2 = CopyOfSharedModel("stories260K");
  EditConfig(dir2, "\"num_key_value_heads\": 4", "\"num_key_value_heads\": 8");
  auto kv = LoadModel(dir2);
  REQUIRE(!kv.ok());
  CHECK(testing::StatusHas(kv.status(), "model.layers.0.self_attn.k_proj.weight"));
  CHECK(testing::StatusHas(kv.status(), "expected [64, 64]"));
}

TEST_CASE("Untied models need lm_head; tied ones ignore it", "[cpu]") {
  const std::string dir = CopyOfSharedModel("stories260K");
  EditConfig(dir, "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
  auto untied = LoadModel(dir);
  REQUIRE(!untied.ok());
  CHECK(absl::IsNotFound(untied.status()));
  CHECK(testing::StatusHas(untied.status(), "lm_head.weight"));
  CHECK(testing::StatusHas(untied.status(), "tie_word_embeddings"));

  // A tied config over a checkpoint that also stores lm_head: the head is ignored.
  ModelConfig config = testing::TinyConfig(Architecture::kLlama, /*tied=*/false);
  auto synthetic = MakeSyntheticModel(config, 3);
  const std::string dir2 = testing::TempDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir2).ok());
  config.tie_word_embeddings = true;
  REQUIRE(WriteFileAtomically(dir2 + "/config.json", config.ToHfConfigJson()).ok());
  auto tied = LoadModel(dir2);
  REQUIRE(tied.ok());
  CHECK((*tied)->weights.lm_head.empty());
  CHECK((*tied)->weights.embed == synthetic->weights.embed);
}

TEST_CASE("Biases: q/k/v when configured, zero o_proj accepted, others rejected", "[cpu]") {
  // A Llama checkpoint with attention_bias: HF also stores o_proj.bias.
  ModelConfig config = testing::TinyConfig(Architecture::kLlama);
  config.qkv_bias = true;
  auto synthetic = MakeSyntheticModel(config, 4);
  REQUIRE(!synthetic->weights.layers[0].bq.empty());
  auto write_with_o_bias = [&](float value) {
    const std::string dir = testing::TempDir();
    REQUIRE(SaveModel(config, synthetic->weights, dir).ok());
    std::map<std::string, SafetensorsTensor> tensors;
    auto file = SafetensorsFile::Open(dir + "/model.safetensors");
    REQUIRE(file.ok());
    for (const std::string& name : (*file)->TensorNames()) {
      const TensorInfo* info = (*file)->Find(name);
      tensors[name] =
          SafetensorsTensor::FromFloats(DType::kF32, info->shape, *(*file)->ReadAsFloat(name));
    }
    file->reset();
    std::vector<float> bias(config.hidden_size, 0.0f);
    bias[3] = value;
    tensors["model.layers.1.self_attn.o_proj.bias"] =
        SafetensorsTensor::FromFloats(DType::kF32, {config.hidden_size}, bias);
    REQUIRE(WriteSafetensors(dir + "/model.safetensors", tensors).ok());
    return dir;
  };
  auto zero = LoadModel(write_with_o_bias(0.0f));
  REQUIRE(zero.ok());
  CHECK((*zero)->config.qkv_bias);
  CHECK((*zero)->weights.layers[2].bv == synthetic->weights.layers[2].bv);
  CHECK((*zero)->digest() == synthetic->digest());

  auto nonzero = LoadModel(write_with_o_bias(0.5f));
  REQUIRE(!nonzero.ok());
  CHECK(absl::IsUnimplemented(nonzero.status()));
  CHECK(testing::StatusHas(nonzero.status(), "model.layers.1.self_attn.o_proj.bias"));

  // Qwen2 without its biases: the missing bias is named.
  ModelConfig qwen = testing::TinyConfig(Architecture::kQwen2);
  ModelConfig no_bias = qwen;
  no_bias.arch = Architecture::kLlama;
  no_bias.qkv_bias = false;
  auto plain = MakeSyntheticModel(no_bias, 4);
  const std::string dir = testing::TempDir();
  REQUIRE(SaveModel(no_bias, plain->weights, dir).ok());
  REQUIRE(WriteFileAtomically(dir + "/config.json", qwen.ToHfConfigJson()).ok());
  auto missing = LoadModel(dir);
  REQUIRE(!missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(testing::StatusHas(missing.status(), "model.layers.0.self_attn.q_proj.bias"));

  // And the converse: non-zero q/k/v biases under a config without them are rejected.
  auto qwen_model = MakeSyntheticModel(qwen, 4);
  const std::string dir2 = testing::TempDir();
  REQUIRE(SaveModel(qwen, qwen_model->weights, dir2).ok());
  REQUIRE(WriteFileAtomically(dir2 + "/config.json", no_bias.ToHfConfigJson()).ok());
  auto extra = LoadModel(dir2);
  REQUIRE(!extra.ok());
  CHECK(testing::StatusHas(extra.status(), "_proj.bias"));
}

}  // namespace
}  // namespace scd
