// Weights viewed in place in the mapped checkpoint: F32 tensors of a saved checkpoint load as
// views with the saved values, F16 and misaligned tensors are still copied, writes go to a
// private copy (never to the file or another view), ReleasePages keeps values readable, the
// digest does not depend on where the floats live, and a truncated file is a clear error.
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/base/file_io.h"
#include "common/model/checkpoint.h"
#include "common/model/weight_buffer.h"
#include "common/model/weight_layout.h"
#include "tests/model/model_dirs.h"
#include "tests/model/tiny_config.h"
#include "tests/test_support.h"

namespace scd {
namespace {

namespace fs = std::filesystem;

using testing::LoadOrFail;
using testing::NewModelDir;

// Large enough that the feed-forward matrices span many whole pages.
ModelConfig PageSizedConfig() {
  ModelConfig config = testing::TinyConfig();
  config.hidden_size = 128;
  config.intermediate_size = 384;
  return config;
}

// The same weights, each held in its own vector.
ModelWeights OwnedCopy(const ModelConfig& config, const ModelWeights& weights) {
  ModelWeights copy;
  copy.layers.resize(weights.layers.size());
  for (const WeightEntry& entry : WeightLayout(config)) {
    const WeightBuffer& from = WeightData(weights, entry);
    WeightData(copy, entry) = std::vector<float>(from.begin(), from.end());
  }
  return copy;
}

// Resident file-backed pages of this process (VmRSS's file part), in kB.
long RssFileKb() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

TEST_CASE("A saved F32 checkpoint loads as views of the file, equal to what was saved", "[cpu]") {
  const ModelConfig config = testing::TinyConfig(Architecture::kQwen2);  // biases too
  auto synthetic = MakeSyntheticModel(config, 5);
  REQUIRE(synthetic != nullptr);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir).ok());

  // The data region starts on a 64-byte boundary, so every F32 tensor is aligned.
  const std::string bytes = testing::ReadFileOrFail(dir + "/" + kSafetensorsFileName);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  CHECK((8 + header_len) % 64 == 0);

  auto loaded = LoadOrFail(dir);
  for (const WeightEntry& entry : WeightLayout(config)) {
    INFO(entry.name);
    const WeightBuffer& data = WeightData(loaded->weights, entry);
    CHECK(data.is_mapped());
    CHECK(data == WeightData(synthetic->weights, entry));
  }
  CHECK(loaded->digest() == synthetic->digest());
}

TEST_CASE("F16 and misaligned F32 tensors still load, as owned copies", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 6);
  REQUIRE(synthetic != nullptr);

  SECTION("F16 is widened into owned floats") {
    const std::string dir = NewModelDir();
    REQUIRE(SaveModel(config, synthetic->weights, dir, {DType::kF16, 1}).ok());
    auto loaded = LoadOrFail(dir);
    const WeightBuffer& wq = loaded->weights.layers[0].wq;
    CHECK_FALSE(wq.is_mapped());
    REQUIRE(wq.size() == synthetic->weights.layers[0].wq.size());
    CHECK(std::abs(wq[0] - synthetic->weights.layers[0].wq[0]) < 1e-3f);
  }

  SECTION("an F32 data region that starts off a 4-byte boundary is copied") {
    const std::string dir = NewModelDir();
    REQUIRE(SaveModel(config, synthetic->weights, dir).ok());
    // One more space in the header shifts every tensor by one byte.
    const std::string path = dir + "/" + kSafetensorsFileName;
    std::string bytes = testing::ReadFileOrFail(path);
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    bytes.insert(8 + header_len, " ");
    ++header_len;
    std::memcpy(bytes.data(), &header_len, 8);
    REQUIRE(WriteFileAtomically(path, bytes).ok());

    auto loaded = LoadOrFail(dir);
    for (const WeightEntry& entry : WeightLayout(config)) {
      INFO(entry.name);
      const WeightBuffer& data = WeightData(loaded->weights, entry);
      CHECK_FALSE(data.is_mapped());
      CHECK(data == WeightData(synthetic->weights, entry));
    }
    CHECK(loaded->digest() == synthetic->digest());
  }
}

TEST_CASE("Writing to a loaded model's weights copies them first", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 7);
  REQUIRE(synthetic != nullptr);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir).ok());
  const std::string path = dir + "/" + kSafetensorsFileName;
  const std::string file_before = testing::ReadFileOrFail(path);
  auto loaded = LoadOrFail(dir);
  const WeightBuffer& original = loaded->weights.layers[1].wk;
  const std::vector<float> values(original.begin(), original.end());

  ModelWeights copy = loaded->weights;
  CHECK(copy.layers[1].wk.is_mapped());  // copies of a view share the read-only mapping
  CHECK(std::as_const(copy.layers[1].wk).data() == original.data());  // reading never copies

  copy.layers[1].wk[3] += 1.0f;  // operator[]
  CHECK_FALSE(copy.layers[1].wk.is_mapped());
  CHECK(copy.layers[1].wk[3] == values[3] + 1.0f);
  copy.layers[1].wq.resize(2);
  copy.embed.assign(4, 9.0f);
  copy.final_norm.insert(copy.final_norm.end(), values.begin(), values.begin() + 2);
  std::fill(copy.layers[0].w_up.begin(), copy.layers[0].w_up.end(), 0.0f);  // begin()/end()

  CHECK(original.is_mapped());
  CHECK(original == values);
  CHECK(loaded->weights.layers[1].wq == synthetic->weights.layers[1].wq);
  CHECK(loaded->weights.embed == synthetic->weights.embed);
  CHECK(loaded->weights.final_norm == synthetic->weights.final_norm);
  CHECK(loaded->weights.layers[0].w_up == synthetic->weights.layers[0].w_up);
  CHECK(testing::ReadFileOrFail(path) == file_before);
  CHECK(LoadOrFail(dir)->digest() == synthetic->digest());
}

TEST_CASE("WeightBuffer behaves as a vector value", "[cpu]") {
  WeightBuffer a = std::vector<float>{1, 2, 3};
  WeightBuffer b = a;
  b[0] = 5;  // a deep copy
  CHECK(a == std::vector<float>{1, 2, 3});
  CHECK(b == std::vector<float>{5, 2, 3});
  CHECK(a != b);
  b = a;
  CHECK(a == b);
  WeightBuffer moved = std::move(b);
  CHECK(moved == a);
  CHECK(b.empty());  // NOLINT: moved-from is empty, as a vector's
  CHECK(WeightBuffer(4, 2.0f) == std::vector<float>{2, 2, 2, 2});
  CHECK(WeightBuffer{}.empty());
  CHECK_FALSE(a.is_mapped());
}

TEST_CASE("WeightBuffer::MapView rejects misaligned and out-of-file ranges", "[cpu]") {
  const std::string path = NewModelDir() + "/floats.bin";
  const std::vector<float> floats = {1.5f, -2.0f, 3.25f, 8.0f};
  REQUIRE(WriteFileAtomically(path, std::string_view(reinterpret_cast<const char*>(floats.data()),
                                                     floats.size() * sizeof(float)))
              .ok());
  auto opened = MappedFile::Open(path);
  REQUIRE(opened.ok());
  std::shared_ptr<const MappedFile> file = *std::move(opened);

  auto view = WeightBuffer::MapView(file, 4, 3);
  REQUIRE(view.ok());
  CHECK(view->is_mapped());
  CHECK(*view == std::vector<float>{-2.0f, 3.25f, 8.0f});
  CHECK(absl::IsInvalidArgument(WeightBuffer::MapView(file, 2, 1).status()));
  CHECK(absl::IsInvalidArgument(WeightBuffer::MapView(file, 4, 4).status()));
  CHECK(absl::IsInvalidArgument(WeightBuffer::MapView(file, 20, 0).status()));

  // The view keeps the mapping alive after every other owner lets go.
  WeightBuffer kept = *view;
  view = absl::UnknownError("dropped");
  file.reset();
  CHECK(kept == std::vector<float>{-2.0f, 3.25f, 8.0f});
}

TEST_CASE("ReleasePages drops resident pages and the values stay readable", "[cpu]") {
  const ModelConfig config = PageSizedConfig();
  auto synthetic = MakeSyntheticModel(config, 8);
  REQUIRE(synthetic != nullptr);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir).ok());
  auto loaded = LoadOrFail(dir);
  const std::vector<WeightEntry> layout = WeightLayout(config);

  size_t bytes = 0;
  for (const WeightEntry& entry : layout) {
    // Reading every element maps its page into this process.
    const WeightBuffer& data = WeightData(loaded->weights, entry);
    REQUIRE(data == WeightData(synthetic->weights, entry));
    bytes += data.size() * sizeof(float);
  }
  REQUIRE(bytes > size_t{1} << 20);
  const long resident = RssFileKb();
  for (const WeightEntry& entry : layout) WeightData(loaded->weights, entry).ReleasePages();
  const long released = resident - RssFileKb();
  INFO("file-backed RSS before " << resident << " kB, released " << released << " kB of "
                                 << bytes / 1024 << " kB of weights");
  // Every whole page inside a tensor goes; only the partial pages at tensor ends may stay.
  CHECK(released >= static_cast<long>(bytes / 1024) - 4 * static_cast<long>(layout.size()));

  for (const WeightEntry& entry : layout) {
    INFO(entry.name);
    const WeightBuffer& data = WeightData(loaded->weights, entry);
    CHECK(data.is_mapped());
    CHECK(data == WeightData(synthetic->weights, entry));
  }
  WeightBuffer owned = std::vector<float>{1, 2};
  owned.ReleasePages();  // no effect on owned floats
  CHECK(owned == std::vector<float>{1, 2});
}

TEST_CASE("The digest of mapped weights equals that of the same weights in vectors", "[cpu]") {
  const ModelConfig config = PageSizedConfig();
  auto synthetic = MakeSyntheticModel(config, 9);
  REQUIRE(synthetic != nullptr);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir, {DType::kF32, 2}).ok());
  auto loaded = LoadOrFail(dir);
  REQUIRE(loaded->weights.layers[2].w_down.is_mapped());
  const ModelWeights owned = OwnedCopy(config, loaded->weights);
  REQUIRE_FALSE(owned.layers[2].w_down.is_mapped());
  const std::string expected = ComputeModelDigest(config, owned);
  CHECK(expected == synthetic->digest());

  // First reads from many threads at once all see the one digest.
  std::vector<std::string> seen(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back([&, i] { seen[i] = loaded->digest(); });
  }
  for (std::thread& t : threads) t.join();
  for (const std::string& digest : seen) CHECK(digest == expected);
  const Model copy = *loaded;  // a copy carries the digest already computed
  CHECK(copy.digest() == expected);
}

TEST_CASE("A truncated checkpoint is a clear error, not a crash", "[cpu]") {
  const ModelConfig config = testing::TinyConfig();
  auto synthetic = MakeSyntheticModel(config, 10);
  REQUIRE(synthetic != nullptr);
  const std::string dir = NewModelDir();
  REQUIRE(SaveModel(config, synthetic->weights, dir).ok());
  const std::string path = dir + "/" + kSafetensorsFileName;
  fs::resize_file(path, fs::file_size(path) - 100);
  auto loaded = LoadModel(dir);
  REQUIRE_FALSE(loaded.ok());
  CHECK(absl::IsDataLoss(loaded.status()));
  const std::string message(loaded.status().message());
  INFO(message);
  CHECK(message.find(path) != std::string::npos);
  CHECK(message.find("truncated") != std::string::npos);
}

}  // namespace
}  // namespace scd
