// Invariants of the KV-cache paths of the CPU backend:
//   - decoding token by token from a cache gives the logits of a full recompute;
//   - prefill that starts from an externally supplied (pre-RoPE) cache equals normal prefill;
//   - a batched decode step equals the same steps run one sequence at a time;
// on the real stories260K checkpoint and on synthetic Mistral (sliding window) and Qwen2
// (q/k/v bias) configs, so that every architecture feature takes every path.
#include <catch2/catch.hpp>
#include <cmath>

#include "common/model/weights.h"
#include "common/runtime/backend.h"
#include "tests/runtime/runtime_fixtures.h"

namespace scd {
namespace {

float MaxAbs(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

ModelConfig SmallConfig(Architecture arch) {
  ModelConfig c;
  c.arch = arch;
  c.name = "synthetic";
  c.hidden_size = 48;
  c.num_layers = 3;
  c.num_heads = 6;
  c.num_kv_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 96;
  c.vocab_size = 97;
  c.max_position_embeddings = 256;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 10000.0f;
  c.tie_word_embeddings = arch != Architecture::kQwen2;
  c.qkv_bias = arch == Architecture::kQwen2;
  c.sliding_window = arch == Architecture::kMistral ? 7 : 0;
  c.eos_token_ids = {2};
  return c;
}

std::vector<int32_t> Tokens(int n, int vocab, int seed) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7919 + seed * 31 + 3) % vocab);
  return t;
}

std::vector<std::unique_ptr<Backend>> Backends() {
  std::vector<std::unique_ptr<Backend>> out;
  out.push_back(testing::MakeBackend("models/stories260K"));
  for (Architecture a : {Architecture::kMistral, Architecture::kQwen2}) {
    // A larger init makes attention non-uniform, so masking mistakes would show.
    auto backend = CreateBackend(BackendKind::kCpu, MakeSyntheticModel(SmallConfig(a), 7, 0.3f));
    REQUIRE(backend.ok());
    out.push_back(std::move(backend).value());
  }
  return out;
}

}  // namespace

TEST_CASE("Decode from the KV cache equals full recompute", "[cpu]") {
  for (auto& backend : Backends()) {
    const ModelConfig& c = backend->model().config;
    INFO(ArchitectureName(c.arch));
    const auto tokens = Tokens(24, c.vocab_size, 1);
    const int prompt = 9;
    auto full_seq = backend->NewSequence(64).value();
    PrefillResult full;
    PrefillOptions all;
    all.all_logits = true;
    REQUIRE(backend->Prefill(*full_seq, tokens, all, &full).ok());

    auto seq = backend->NewSequence(64).value();
    PrefillResult head;
    REQUIRE(backend->Prefill(*seq, absl::MakeConstSpan(tokens).first(prompt), {}, &head).ok());
    CHECK(MaxAbs(head.logits.data(), full.logits.data() + (prompt - 1) * c.vocab_size,
                 c.vocab_size) < 1e-4f);
    std::vector<float> logits;
    for (int t = prompt; t < static_cast<int>(tokens.size()); ++t) {
      Sequence* batch[] = {seq.get()};
      REQUIRE(backend->Decode(batch, absl::MakeConstSpan(&tokens[t], 1), &logits).ok());
      INFO("position " << t);
      CHECK(MaxAbs(logits.data(), full.logits.data() + t * c.vocab_size, c.vocab_size) < 1e-4f);
    }
    CHECK(seq->length() == static_cast<int>(tokens.size()));
  }
}

TEST_CASE("Prefill from an externally supplied KV cache equals normal prefill", "[cpu]") {
  for (auto& backend : Backends()) {
    const ModelConfig& c = backend->model().config;
    INFO(ArchitectureName(c.arch));
    const auto tokens = Tokens(30, c.vocab_size, 2);
    const int split = 17;
    PrefillOptions opts;
    opts.all_logits = true;
    opts.layer_states = true;
    auto ref_seq = backend->NewSequence(64).value();
    PrefillResult ref;
    REQUIRE(backend->Prefill(*ref_seq, tokens, opts, &ref).ok());

    // The external cache: the reference run's own pre-RoPE K and V of the first `split`.
    ExternalKv kv;
    kv.num_tokens = split;
    for (int l = 0; l < c.num_layers; ++l) {
      const size_t n = static_cast<size_t>(split) * c.kv_dim();
      kv.k_pre_rope.emplace_back(ref.layers[l].k_pre_rope.begin(),
                                 ref.layers[l].k_pre_rope.begin() + n);
      kv.v.emplace_back(ref.layers[l].v.begin(), ref.layers[l].v.begin() + n);
    }
    auto seq = backend->NewSequence(64).value();
    REQUIRE(backend->AppendKv(*seq, kv).ok());
    CHECK(seq->length() == split);
    PrefillResult rest;
    REQUIRE(backend->Prefill(*seq, absl::MakeConstSpan(tokens).subspan(split), opts, &rest).ok());
    CHECK(MaxAbs(rest.logits.data(), ref.logits.data() + split * c.vocab_size, rest.logits.size()) <
          1e-4f);
    // And decoding continues identically.
    std::vector<float> a, b;
    Sequence* s1[] = {seq.get()};
    Sequence* s2[] = {ref_seq.get()};
    const int32_t next = 5;
    REQUIRE(backend->Decode(s1, absl::MakeConstSpan(&next, 1), &a).ok());
    REQUIRE(backend->Decode(s2, absl::MakeConstSpan(&next, 1), &b).ok());
    CHECK(MaxAbs(a.data(), b.data(), a.size()) < 1e-4f);
  }
}

TEST_CASE("Batched decode equals one-at-a-time decode", "[cpu]") {
  for (auto& backend : Backends()) {
    const ModelConfig& c = backend->model().config;
    INFO(ArchitectureName(c.arch));
    std::vector<std::unique_ptr<Sequence>> batched, single;
    const int lengths[] = {3, 11, 6};
    for (int i = 0; i < 3; ++i) {
      for (auto* set : {&batched, &single}) {
        set->push_back(backend->NewSequence(32).value());
        PrefillResult r;
        REQUIRE(backend->Prefill(*set->back(), Tokens(lengths[i], c.vocab_size, i), {}, &r).ok());
      }
    }
    const std::vector<int32_t> next = {4, 9, 1};
    std::vector<float> batch_logits;
    std::vector<Sequence*> ptrs = {batched[0].get(), batched[1].get(), batched[2].get()};
    REQUIRE(backend->Decode(ptrs, next, &batch_logits).ok());
    for (int i = 0; i < 3; ++i) {
      std::vector<float> one;
      Sequence* p[] = {single[i].get()};
      REQUIRE(backend->Decode(p, absl::MakeConstSpan(&next[i], 1), &one).ok());
      CHECK(MaxAbs(one.data(), batch_logits.data() + i * c.vocab_size, c.vocab_size) < 1e-4f);
    }
  }
}

TEST_CASE("DecodeSample picks what each request's sampler picks on the decode logits", "[cpu]") {
  auto backend = testing::MakeBackend("models/stories260K");
  const int vocab = backend->model().config.vocab_size;
  const SamplingParams settings[] = {{0.0f, 0, 1.0f, 1}, {0.8f, 0, 1.0f, 2}, {1.2f, 20, 0.9f, 3}};
  std::vector<std::unique_ptr<Sequence>> sampled, reference;
  std::vector<Sampler> drawing, sampling;
  for (int i = 0; i < 3; ++i) {
    for (auto* set : {&sampled, &reference}) {
      set->push_back(backend->NewSequence(40).value());
      PrefillResult r;
      REQUIRE(backend->Prefill(*set->back(), Tokens(5 + 3 * i, vocab, i), {}, &r).ok());
    }
    drawing.emplace_back(settings[i]);
    sampling.emplace_back(settings[i]);
  }
  std::vector<int32_t> inputs = {7, 8, 9};
  for (int step = 0; step < 12; ++step) {
    INFO("step " << step);
    std::vector<SampleDraw> draws;
    for (Sampler& s : drawing) draws.push_back(s.Draw());
    std::vector<Sequence*> a = {sampled[0].get(), sampled[1].get(), sampled[2].get()};
    std::vector<int32_t> next;
    REQUIRE(backend->DecodeSample(a, inputs, draws, &next).ok());
    std::vector<Sequence*> b = {reference[0].get(), reference[1].get(), reference[2].get()};
    std::vector<float> logits;
    REQUIRE(backend->Decode(b, inputs, &logits).ok());
    for (int i = 0; i < 3; ++i) {
      CHECK(next[i] == sampling[i].Sample(absl::MakeConstSpan(logits).subspan(i * vocab, vocab)));
    }
    inputs = next;
  }
  std::vector<Sequence*> one = {sampled[0].get()};
  std::vector<int32_t> next;
  CHECK(backend->DecodeSample(one, {inputs[0]}, {}, &next).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Backend rejects bad input without changing the sequence", "[cpu]") {
  auto backend = testing::MakeBackend("models/stories260K");
  auto seq = backend->NewSequence(8).value();
  PrefillResult r;
  CHECK(backend->Prefill(*seq, Tokens(9, 512, 0), {}, &r).code() == absl::StatusCode::kOutOfRange);
  CHECK(seq->length() == 0);
  const std::vector<int32_t> bad = {1, 512};
  CHECK(backend->Prefill(*seq, bad, {}, &r).code() == absl::StatusCode::kInvalidArgument);
  CHECK(backend->Prefill(*seq, {}, {}, &r).code() == absl::StatusCode::kInvalidArgument);
  CHECK(seq->length() == 0);
  CHECK(!backend->NewSequence(0).ok());
  CHECK(!backend->NewSequence(513).ok());
  ExternalKv wrong;
  wrong.num_tokens = 2;
  CHECK(backend->AppendKv(*seq, wrong).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(backend->Prefill(*seq, Tokens(8, 512, 0), {}, &r).ok());
  std::vector<float> logits;
  Sequence* p[] = {seq.get()};
  const int32_t t = 3;
  CHECK(backend->Decode(p, absl::MakeConstSpan(&t, 1), &logits).code() ==
        absl::StatusCode::kOutOfRange);
  auto roomy = backend->NewSequence(16).value();
  REQUIRE(backend->Prefill(*roomy, Tokens(4, 512, 0), {}, &r).ok());
  Sequence* twice[] = {roomy.get(), roomy.get()};
  const int32_t two[] = {3, 4};
  CHECK(backend->Decode(twice, two, &logits).code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace scd

namespace scd {

TEST_CASE("RecomputeLayers restores a block of layers from its entering residual", "[cpu]") {
  for (auto& backend : Backends()) {
    const ModelConfig& c = backend->model().config;
    INFO(ArchitectureName(c.arch));
    const auto tokens = Tokens(26, c.vocab_size, 3);
    const int split = 20, first = 1, end = 3;
    PrefillOptions opts;
    opts.all_logits = true;
    opts.layer_states = true;
    opts.residual = true;
    auto ref_seq = backend->NewSequence(64).value();
    PrefillResult ref;
    REQUIRE(backend->Prefill(*ref_seq, tokens, opts, &ref).ok());
    REQUIRE(ref.layers[first].residual.size() == tokens.size() * c.hidden_size);

    // External KV that is right outside the block and zero inside it.
    ExternalKv kv;
    kv.num_tokens = split;
    const size_t n = static_cast<size_t>(split) * c.kv_dim();
    for (int l = 0; l < c.num_layers; ++l) {
      const bool in_block = l >= first && l < end;
      kv.k_pre_rope.push_back(in_block ? std::vector<float>(n, 0.0f)
                                       : std::vector<float>(ref.layers[l].k_pre_rope.begin(),
                                                            ref.layers[l].k_pre_rope.begin() + n));
      kv.v.push_back(
          in_block ? std::vector<float>(n, 0.0f)
                   : std::vector<float>(ref.layers[l].v.begin(), ref.layers[l].v.begin() + n));
    }
    const std::vector<float> residual(
        ref.layers[first].residual.begin(),
        ref.layers[first].residual.begin() + static_cast<size_t>(split) * c.hidden_size);
    PrefillResult broken, fixed;
    PrefillOptions logits_only;
    logits_only.all_logits = true;
    {
      auto seq = backend->NewSequence(64).value();
      REQUIRE(backend->AppendKv(*seq, kv).ok());
      REQUIRE(
          backend->Prefill(*seq, absl::MakeConstSpan(tokens).subspan(split), logits_only, &broken)
              .ok());
    }
    auto seq = backend->NewSequence(64).value();
    REQUIRE(backend->AppendKv(*seq, kv).ok());
    REQUIRE(backend->RecomputeLayers(*seq, 0, first, end, residual).ok());
    REQUIRE(backend->Prefill(*seq, absl::MakeConstSpan(tokens).subspan(split), logits_only, &fixed)
                .ok());
    const float* want = ref.logits.data() + split * c.vocab_size;
    CHECK(MaxAbs(fixed.logits.data(), want, fixed.logits.size()) < 1e-4f);
    CHECK(MaxAbs(broken.logits.data(), want, broken.logits.size()) > 1e-3f);  // it mattered
    CHECK(!backend->RecomputeLayers(*seq, 0, 2, 2, residual).ok());
    CHECK(!backend->RecomputeLayers(*seq, 30, first, end, residual).ok());
  }
}

}  // namespace scd
