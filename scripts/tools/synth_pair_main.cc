// scd-synth-pair: writes a synthetic producer/consumer pair of a chosen shape as two HF
// checkpoint directories, for timing runs at shapes we have no fine-tuned pair for (random
// weights; the specialist is the base plus seeded noise). The vocabulary, special tokens and
// tokenizer.json come from a real model directory, so the daemons and tools read the pair like
// any other.
//   scd-synth-pair --out DIR [--hidden 1024 --layers 8 --heads 16 --kv-heads 4 ...]
// writes DIR/base and DIR/specialist.
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/model/checkpoint.h"
#include "common/model/config.h"
#include "common/model/weights.h"
#include "common/tools/cli/flags.h"

namespace {

constexpr char kProgram[] = "scd-synth-pair";

}  // namespace

int main(int argc, char** argv) {
  std::string out, vocab_from = "../shared/models/stories260K";
  int hidden = 1024, layers = 8, heads = 16, kv_heads = 4, intermediate = 2816, context = 2048;
  float init_std = 0.02f, noise = 0.002f;
  uint64_t seed = 1;
  scd::cli::FlagParser flags(kProgram, "--out DIR [shape flags]");
  flags.AddString("out", &out, "output directory (base/ and specialist/ are written in it)", true);
  flags.AddString("vocab-from", &vocab_from,
                  "model directory whose vocabulary, special tokens and tokenizer.json are reused");
  flags.AddInt("hidden", &hidden, "hidden size");
  flags.AddInt("layers", &layers, "number of layers");
  flags.AddInt("heads", &heads, "attention heads");
  flags.AddInt("kv-heads", &kv_heads, "key/value heads (GQA)");
  flags.AddInt("intermediate", &intermediate, "MLP width");
  flags.AddInt("context", &context, "max_position_embeddings");
  flags.AddFloat("init-std", &init_std, "standard deviation of the base weights");
  flags.AddFloat("noise", &noise, "standard deviation of the specialist's perturbation");
  flags.AddUint64("seed", &seed, "seed (the specialist uses seed + 1)");
  if (std::optional<int> exit = flags.ParseOrExit(argc, argv)) return *exit;
  absl::StatusOr<scd::ModelConfig> vocab = scd::ModelConfig::FromDirectory(vocab_from);
  if (!vocab.ok()) return flags.Fail(vocab.status());
  scd::ModelConfig c;
  c.name = absl::StrCat("synthetic-d", hidden, "-l", layers);
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = heads > 0 ? hidden / heads : 0;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab->vocab_size;
  c.max_position_embeddings = context;
  c.bos_token_id = vocab->bos_token_id;
  c.eos_token_ids = vocab->eos_token_ids;
  if (absl::Status st = c.Validate(); !st.ok()) return flags.Fail(st);
  std::cerr << kProgram << ": base " << c.name << " (" << hidden << "d, " << layers << " layers, "
            << heads << "/" << kv_heads << " heads), seed " << seed << "\n";
  std::shared_ptr<const scd::Model> base = scd::MakeSyntheticModel(c, seed, init_std);
  if (base == nullptr) return flags.Fail("cannot make the synthetic model");
  std::shared_ptr<const scd::Model> specialist = scd::MakeNoisyVariant(*base, noise, seed + 1);
  namespace fs = std::filesystem;
  for (const auto& [name, model] : {std::pair{"base", base}, std::pair{"specialist", specialist}}) {
    const fs::path dir = fs::path(out) / name;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) return flags.Fail(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
    if (absl::Status st = scd::SaveModel(model->config, model->weights, dir.string()); !st.ok()) {
      return flags.Fail(st);
    }
    fs::copy_file(fs::path(vocab_from) / "tokenizer.json", dir / "tokenizer.json",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return flags.Fail(absl::StrCat("cannot copy tokenizer.json: ", ec.message()));
    std::cerr << kProgram << ": wrote " << dir.string() << " (digest "
              << model->digest().substr(0, 16) << ")\n";
  }
  return 0;
}
