// Fuzzes the calibration-artifact loader (ScdArtifact::Load, common/scd/artifact.h): the
// safetensors container, the "scd" metadata JSON (dimensions, ranks, patch layers, selection
// trace) and the shape of every REUSE and PATCH tensor it names. The input is the file; Load
// only opens paths, so it goes through an in-memory file. An accepted artifact must be
// self-consistent: one REUSE pair per layer with the declared ranks, and the patch order naming
// fitted layers only.
#include <cstddef>
#include <cstdint>

#include "common/scd/artifact.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = scd::fuzz::InMemoryFile::Get().Write(data, size);
  auto artifact = scd::ScdArtifact::Load(path);
  if (!artifact.ok()) return 0;
  FUZZ_CHECK(static_cast<int>(artifact->reuse.size()) == artifact->num_layers);
  for (const scd::ReuseLayer& layer : artifact->reuse) {
    FUZZ_CHECK(layer.key.rank == artifact->rank_k && layer.value.rank == artifact->rank_v);
    FUZZ_CHECK(layer.key.encoder.size() == size_t(artifact->kv_dim) * artifact->rank_k);
  }
  for (int l : artifact->PatchLayers()) FUZZ_CHECK(artifact->patches.count(l) == 1);
  FUZZ_CHECK(artifact->id.size() == 64);
  return 0;
}
