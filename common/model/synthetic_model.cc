// MakeSyntheticModel (see weights.h): weights from N(0, init_std²), norm gains 1, for shapes
// we have no checkpoint for (benchmarks at stories110M or Llama-3 scale, tests).
// Determinism: tensor i of the WeightLayout draws from the counter-based stream
// SplitMix64Mix(seed ^ (i+1)·φ), so the weights depend on (config, seed, init_std) only, not
// on thread count or chunking. Speed: buffers are allocated in parallel and backed by huge
// pages (page faults, not arithmetic, dominate at 440 MB on VMs), and each digest chunk is
// hashed right after it is filled, while it is still in cache.
#include <algorithm>

#include "common/base/huge_pages.h"
#include "common/base/parallel_for.h"
#include "common/base/random.h"
#include "common/model/model_digest.h"
#include "common/model/weight_layout.h"
#include "common/model/weights.h"

namespace scd {

std::shared_ptr<const Model> MakeSyntheticModel(const ModelConfig& config, uint64_t seed,
                                                float init_std) {
  if (!config.Validate().ok()) return nullptr;
  auto model = std::make_shared<Model>();
  model->config = config;
  if (model->config.name.empty()) model->config.name = "synthetic";
  ModelWeights& weights = model->weights;
  weights.layers.resize(static_cast<size_t>(config.num_layers));
  const std::vector<WeightEntry> layout = WeightLayout(config);

  size_t total = 0;
  for (const WeightEntry& entry : layout) total += static_cast<size_t>(entry.NumElements());
  const size_t threads = total > 4 * kDigestChunkFloats ? 0 : 1;  // 0: all cores
  ParallelFor(
      layout.size(),
      [&](size_t t) {
        std::vector<float>& data = WeightData(weights, layout[t]).MutableVector();
        if (layout[t].is_norm()) {
          data.assign(static_cast<size_t>(layout[t].NumElements()), 1.0f);
        } else {
          ResizeWithHugePages(data, static_cast<size_t>(layout[t].NumElements()));
        }
      },
      threads);

  const std::vector<DigestChunk> chunks = DigestChunks(layout, weights);
  std::vector<Sha256::Digest> digests(chunks.size());
  ParallelFor(
      chunks.size(),
      [&](size_t i) {
        const DigestChunk& chunk = chunks[i];
        float* out = WeightData(weights, layout[chunk.tensor]).data() + chunk.first;
        if (!layout[chunk.tensor].is_norm()) {
          const uint64_t stream = SplitMix64Mix(seed ^ ((chunk.tensor + 1) * kGoldenGamma));
          FillNormal(out, chunk.count, stream, 0.0f, init_std, chunk.first);
        }
        Sha256 hasher;
        hasher.Update(out, chunk.count * sizeof(float));
        digests[i] = hasher.Finish();
      },
      threads);
  model->set_digest(CombineModelDigest(model->config, layout, weights, digests));
  return model;
}

std::shared_ptr<const Model> MakeNoisyVariant(const Model& base, float noise_std, uint64_t seed) {
  auto model = std::make_shared<Model>();
  model->config = base.config;
  model->config.name = base.config.name + "-variant";
  model->weights = base.weights;
  const std::vector<WeightEntry> layout = WeightLayout(model->config);
  ParallelFor(layout.size(), [&](size_t t) {
    if (layout[t].is_norm()) return;
    std::vector<float>& data = WeightData(model->weights, layout[t]).MutableVector();
    std::vector<float> noise(data.size());
    FillNormal(noise.data(), noise.size(), SplitMix64Mix(seed ^ ((t + 1) * kGoldenGamma)), 0.0f,
               noise_std);
    for (size_t i = 0; i < data.size(); ++i) data[i] += noise[i];
  });
  return model;  // its digest is computed when first read
}

}  // namespace scd
