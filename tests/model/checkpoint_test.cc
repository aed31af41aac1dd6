// Checkpoint directories: SaveModel → LoadModel round trips for every architecture and dtype,
// sharded (index + shards) against unsharded, and the index's failure modes.
#include "common/model/checkpoint.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "common/base/file_io.h"
#include "common/base/float16.h"
#include "common/model/weight_layout.h"
#include "tests/model/model_dirs.h"
#include "tests/model/tiny_config.h"
#include "tests/test_support.h"

namespace scd {
namespace {

namespace fs = std::filesystem;

using testing::LoadOrFail;
using testing::NewModelDir;

TEST_CASE("A two-shard checkpoint loads like the unsharded one", "[cpu]") {
  const ModelConfig config = testing::TinyConfig(Architecture::kLlama);
  auto synthetic = MakeSyntheticModel(config, 17);
  REQUIRE(synthetic != nullptr);
  const std::string single = NewModelDir(), sharded = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, single).ok());
  REQUIRE(SaveModel(config, synthetic->weights, sharded, {DType::kF32, 2}).ok());

  CHECK(fs::exists(fs::path(single) / "model.safetensors"));
  CHECK(!fs::exists(fs::path(single) / "model.safetensors.index.json"));
  CHECK(fs::exists(fs::path(sharded) / "model.safetensors.index.json"));
  CHECK(fs::exists(fs::path(sharded) / "model-00001-of-00002.safetensors"));
  CHECK(fs::exists(fs::path(sharded) / "model-00002-of-00002.safetensors"));

  auto checkpoint = SafetensorsCheckpoint::Open(sharded);
  REQUIRE(checkpoint.ok());
  CHECK((*checkpoint)->files().size() == 2);
  CHECK((*checkpoint)->files()[0]->num_tensors() > 0);
  CHECK((*checkpoint)->files()[1]->num_tensors() > 0);
  CHECK((*checkpoint)->TensorNames().size() == WeightLayout(config).size());
  const SafetensorsFile* owner = nullptr;
  REQUIRE((*checkpoint)->Find("lm_head.weight", &owner) != nullptr);
  CHECK(owner->path() == (fs::path(sharded) / "model-00002-of-00002.safetensors").string());

  auto a = LoadOrFail(single), b = LoadOrFail(sharded);
  CHECK(a->digest() == b->digest());
  CHECK(a->digest() == synthetic->digest());  // F32 round trip is exact
  CHECK(b->weights.layers[2].w_down == synthetic->weights.layers[2].w_down);
  CHECK(b->weights.lm_head == synthetic->weights.lm_head);
  CHECK(b->config.ToCanonicalJson() == config.ToCanonicalJson());
  CHECK(b->dir == sharded);
}

TEST_CASE("Every architecture round trips through SaveModel", "[cpu]") {
  for (Architecture arch : {Architecture::kLlama, Architecture::kMistral, Architecture::kQwen2}) {
    for (bool tied : {false, true}) {
      INFO(ArchitectureName(arch) << " tied=" << tied);
      const ModelConfig config = testing::TinyConfig(arch, tied);
      auto synthetic = MakeSyntheticModel(config, 5);
      const std::string dir = NewModelDir();
      REQUIRE(SaveModel(config, synthetic->weights, dir, {DType::kF32, 3}).ok());
      auto loaded = LoadOrFail(dir);
      CHECK(loaded->digest() == synthetic->digest());
      CHECK(loaded->config.arch == arch);
      CHECK(loaded->config.qkv_bias == (arch == Architecture::kQwen2));
      CHECK(loaded->config.sliding_window == config.sliding_window);
      CHECK(loaded->weights.lm_head.empty() == tied);
      if (arch == Architecture::kQwen2) {
        CHECK(loaded->weights.layers[1].bk.size() == 16);
        CHECK(loaded->weights.layers[1].bk == synthetic->weights.layers[1].bk);
      }
    }
  }
}

TEST_CASE("F16 and BF16 checkpoints widen exactly to the rounded values", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 8, 0.5f);
  for (DType dtype : {DType::kF16, DType::kBF16}) {
    const std::string dir = NewModelDir();
    REQUIRE(SaveModel(config, synthetic->weights, dir, {dtype, 2}).ok());
    auto loaded = LoadOrFail(dir);
    const WeightBuffer& original = synthetic->weights.layers[0].wq;
    const WeightBuffer& widened = loaded->weights.layers[0].wq;
    REQUIRE(widened.size() == original.size());
    for (size_t i = 0; i < original.size(); ++i) {
      const float expected = dtype == DType::kF16 ? HalfToFloat(FloatToHalf(original[i]))
                                                  : Bfloat16ToFloat(FloatToBfloat16(original[i]));
      REQUIRE(widened[i] == expected);
    }
    CHECK(loaded->digest() != synthetic->digest());
    CHECK(loaded->digest() == ComputeModelDigest(loaded->config, loaded->weights));
  }
}

TEST_CASE("Sharded index errors name the index, shard and tensor", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 1);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir, {DType::kF32, 2}).ok());
  const std::string index_path = (fs::path(dir) / "model.safetensors.index.json").string();
  const std::string index = testing::ReadFileOrFail(index_path);

  auto replace = [&](const std::string& from, const std::string& to) {
    std::string text = index;
    size_t pos = 0;
    while ((pos = text.find(from, pos)) != std::string::npos) {
      text.replace(pos, from.size(), to);
      pos += to.size();
    }
    REQUIRE(WriteFileAtomically(index_path, text).ok());
  };

  SECTION("a missing shard is NotFound naming it") {
    replace("model-00002-of-00002", "model-00009-of-00002");
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    REQUIRE(!checkpoint.ok());
    CHECK(absl::IsNotFound(checkpoint.status()));
    CHECK(testing::StatusHas(checkpoint.status(), "model-00009-of-00002.safetensors"));
    CHECK(testing::StatusHas(checkpoint.status(), index_path));
  }
  SECTION("a tensor mapped to the wrong shard") {
    replace("\"lm_head.weight\": \"model-00002-of-00002",
            "\"lm_head.weight\": \"model-00001-of-00002");
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    REQUIRE(!checkpoint.ok());
    CHECK(absl::IsDataLoss(checkpoint.status()));
    CHECK(testing::StatusHas(checkpoint.status(), "'lm_head.weight'"));
    CHECK(testing::StatusHas(checkpoint.status(), "model-00001-of-00002.safetensors"));
  }
  SECTION("a shard outside the directory") {
    replace("model-00001-of-00002", "../model-00001-of-00002");
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    REQUIRE(!checkpoint.ok());
    CHECK(testing::StatusHas(checkpoint.status(), "not a file name in the checkpoint directory"));
  }
  SECTION("an index that is not JSON") {
    REQUIRE(WriteFileAtomically(index_path, "{\"weight_map\": ").ok());
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    REQUIRE(!checkpoint.ok());
    CHECK(absl::IsDataLoss(checkpoint.status()));
    CHECK(testing::StatusHas(checkpoint.status(), index_path));
  }
  SECTION("an index without weight_map") {
    REQUIRE(WriteFileAtomically(index_path, "{\"metadata\": {}}").ok());
    auto checkpoint = SafetensorsCheckpoint::Open(dir);
    REQUIRE(!checkpoint.ok());
    CHECK(testing::StatusHas(checkpoint.status(), "weight_map"));
  }
  SECTION("a corrupt shard names the shard") {
    const std::string shard = (fs::path(dir) / "model-00002-of-00002.safetensors").string();
    const std::string bytes = testing::ReadFileOrFail(shard);
    REQUIRE(WriteFileAtomically(shard, bytes.substr(0, bytes.size() / 2)).ok());
    auto model = LoadModel(dir);
    REQUIRE(!model.ok());
    CHECK(absl::IsDataLoss(model.status()));
    CHECK(testing::StatusHas(model.status(), shard));
    CHECK(testing::StatusHas(model.status(), "tensor '"));
  }
}

TEST_CASE("A directory without weights is NotFound naming both candidates", "[cpu]") {
  const std::string dir = NewModelDir();
  auto checkpoint = SafetensorsCheckpoint::Open(dir);
  REQUIRE(!checkpoint.ok());
  CHECK(absl::IsNotFound(checkpoint.status()));
  CHECK(testing::StatusHas(checkpoint.status(), dir + "/model.safetensors"));
  CHECK(testing::StatusHas(checkpoint.status(), dir + "/model.safetensors.index.json"));
}

TEST_CASE("SaveModel rejects weights that do not match the config", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 1);
  ModelWeights weights = synthetic->weights;
  weights.layers[1].wv.pop_back();
  absl::Status status = SaveModel(config, weights, NewModelDir());
  CHECK(absl::IsInvalidArgument(status));
  CHECK(testing::StatusHas(status, "model.layers.1.self_attn.v_proj.weight"));
  CHECK(!SaveModel(config, synthetic->weights, NewModelDir(), {DType::kF32, 0}).ok());
}

}  // namespace
}  // namespace scd
