// See sekv_session.h.
#include "common/serving/sekv_session.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
#include "common/runtime/cpu_backend.h"
#include "common/scd/wire_format.h"
#include "common/sekv/kv_capture_backend.h"

namespace scd {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

absl::StatusOr<std::vector<float>> PayloadSurprisal(const Payload& payload) {
  const PayloadBlock* b = payload.Find(BlockKind::kSurprisal, 0);
  if (b == nullptr) return absl::NotFoundError("the payload carries no surprisal block");
  if (b->rows != payload.token_ids.size() || b->cols != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the payload's surprisal block is [", b->rows,
                                                   ", ", b->cols, "], not [",
                                                   payload.token_ids.size(), ", 1]"));
  }
  return b->ToFloats();
}

absl::StatusOr<std::unique_ptr<SekvSession>> SekvSession::Start(
    Backend& backend, const ConsumerCodec& codec, sekv::SekvDecoder& decoder,
    const Payload* payload, absl::Span<const int32_t> suffix, const SekvServingOptions& options,
    std::vector<float>* logits) {
  SCD_ASSIGN_OR_RETURN(SekvPrompt prompt, Prepare(backend, codec, payload, suffix));
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<SekvSession> s,
      Build(decoder, std::move(prompt), options, TierFor(backend, decoder, options), &backend));
  SCD_RETURN_IF_ERROR(s->Activate(backend, options, logits));
  return s;
}

absl::StatusOr<std::unique_ptr<SekvPrefill>> SekvPrefill::Begin(Backend& backend,
                                                                const ConsumerCodec& codec,
                                                                std::optional<Payload> payload,
                                                                absl::Span<const int32_t> suffix) {
  if (suffix.empty()) return absl::InvalidArgumentError("SEKV needs at least one suffix token");
  if (payload && payload->start_position != 0) {
    return absl::UnimplementedError("SEKV serves payloads that start at position 0 only");
  }
  if (payload && payload->mode == CodecMode::kRecompute) {
    return absl::UnimplementedError(
        "SEKV cannot serve recompute payloads (their rebuild fills layers inside the backend)");
  }
  const int payload_tokens = payload ? static_cast<int>(payload->token_ids.size()) : 0;
  const int t = payload_tokens + static_cast<int>(suffix.size()) - 1;  // positions in the cache
  if (t == 0) {
    return absl::InvalidArgumentError("SEKV needs a prompt of at least two tokens");
  }
  std::unique_ptr<SekvPrefill> p(new SekvPrefill(backend, codec));
  SekvPrompt& prompt = p->prompt_;
  prompt.last_token = suffix.back();
  SCD_ASSIGN_OR_RETURN(p->seq_, backend.NewSequence(t));
  const size_t layers = static_cast<size_t>(backend.model().config.num_layers);
  const size_t row = static_cast<size_t>(backend.model().config.kv_dim());
  if (payload) {
    SCD_RETURN_IF_ERROR(codec.Check(*payload, *p->seq_));
    if (payload->mode == CodecMode::kOracle) {  // its tokens are prefilled (Advance)
      p->chunks_.tokens = std::move(payload->token_ids);
      p->chunks_.payload_end = p->chunks_.tokens.size();
    } else {  // 1. its rows are rebuilt (AdvanceRebuild), with the producer's surprisal
      SCD_ASSIGN_OR_RETURN(prompt.surprisal, PayloadSurprisal(*payload));
      p->rebuild_ = PayloadChunks(std::move(*payload));
    }
  }
  p->chunks_.tokens.insert(p->chunks_.tokens.end(), suffix.begin(), suffix.end() - 1);
  prompt.kv.k_pre_rope.resize(layers);
  prompt.kv.v.resize(layers);
  for (size_t l = 0; l < layers; ++l) {
    prompt.kv.k_pre_rope[l].reserve(static_cast<size_t>(t) * row);
    prompt.kv.v[l].reserve(static_cast<size_t>(t) * row);
  }
  prompt.surprisal.reserve(static_cast<size_t>(t));
  return p;
}

absl::Status SekvPrefill::AppendRows(const std::vector<std::vector<float>>& k,
                                     const std::vector<std::vector<float>>& v, size_t n) {
  ExternalKv& kv = prompt_.kv;
  const size_t row = static_cast<size_t>(backend_.model().config.kv_dim());
  if (k.size() != kv.k_pre_rope.size() || v.size() != kv.v.size()) {
    return absl::InternalError("no K/V of every layer for the prompt's rows");
  }
  for (size_t l = 0; l < kv.k_pre_rope.size(); ++l) {
    if (k[l].size() != n * row || v[l].size() != n * row) {
      return absl::InternalError("no K/V of every layer for the prompt's rows");
    }
    kv.k_pre_rope[l].insert(kv.k_pre_rope[l].end(), k[l].begin(), k[l].end());
    kv.v[l].insert(kv.v[l].end(), v[l].begin(), v[l].end());
  }
  kv.num_tokens += static_cast<int>(n);
  return absl::OkStatus();
}

absl::StatusOr<size_t> SekvPrefill::AdvanceRebuild(size_t max_rows) {
  if (max_rows == 0) return absl::InvalidArgumentError("AdvanceRebuild needs max_rows >= 1");
  if (rebuild_.remaining() == 0) return 0;
  const auto t0 = Clock::now();
  // The codec appends the rows' K/V to the sequence; the capture keeps them for the hierarchy.
  sekv::KvCaptureBackend capture(backend_);
  SCD_ASSIGN_OR_RETURN(const size_t n, rebuild_.Advance(codec_, capture, *seq_, max_rows));
  const ExternalKv rows = capture.TakeCaptured();
  if (static_cast<size_t>(rows.num_tokens) != n) {
    return absl::InternalError("the payload's rebuild did not append its rows' K/V in one piece");
  }
  SCD_RETURN_IF_ERROR(AppendRows(rows.k_pre_rope, rows.v, n));
  prompt_.times.rebuild_ms += MsSince(t0);
  return n;
}

absl::StatusOr<size_t> SekvPrefill::Advance(size_t max_tokens) {
  if (max_tokens == 0) return absl::InvalidArgumentError("Advance needs max_tokens >= 1");
  if (rebuild_.remaining() > 0) {
    return absl::FailedPreconditionError("the payload's rows come before the prompt's prefill");
  }
  const bool payload_part = chunks_.in_payload();
  const absl::Span<const int32_t> chunk = chunks_.Next(max_tokens);
  const size_t n = chunk.size();
  if (n == 0) return 0;
  // 2. The consumer's own prefill of these tokens, with their K/V and surprisal.
  const auto t0 = Clock::now();
  PrefillOptions po;
  po.layer_states = po.surprisal = true;
  PrefillResult pr;
  SCD_RETURN_IF_ERROR(backend_.Prefill(*seq_, chunk, po, &pr));
  if (pr.surprisal.size() != n) {
    return absl::InternalError("the prefill returned no surprisal");
  }
  std::vector<std::vector<float>> k(pr.layers.size()), v(pr.layers.size());
  for (size_t l = 0; l < pr.layers.size(); ++l) {
    k[l] = std::move(pr.layers[l].k_pre_rope);
    v[l] = std::move(pr.layers[l].v);
  }
  SCD_RETURN_IF_ERROR(AppendRows(k, v, n));
  prompt_.surprisal.insert(prompt_.surprisal.end(), pr.surprisal.begin(), pr.surprisal.end());
  chunks_.prefilled += n;
  (payload_part ? prompt_.times.rebuild_ms : prompt_.times.suffix_prefill_ms) += MsSince(t0);
  return n;
}

SekvPrompt SekvPrefill::Take() {
  seq_.reset();  // from here on the SEKV cache holds the prompt
  return std::move(prompt_);
}

absl::StatusOr<SekvPrompt> SekvSession::Prepare(Backend& backend, const ConsumerCodec& codec,
                                                const Payload* payload,
                                                absl::Span<const int32_t> suffix) {
  SCD_ASSIGN_OR_RETURN(
      std::unique_ptr<SekvPrefill> p,
      SekvPrefill::Begin(backend, codec,
                         payload != nullptr ? std::optional<Payload>(*payload) : std::nullopt,
                         suffix));
  while (p->rebuild_remaining() > 0) {
    SCD_RETURN_IF_ERROR(p->AdvanceRebuild(p->rebuild_remaining()).status());
  }
  while (p->remaining() > 0) {
    SCD_RETURN_IF_ERROR(p->Advance(p->remaining()).status());
  }
  return p->Take();
}

sekv::TierOverhead SekvSession::TierFor(const Backend& backend, const sekv::SekvDecoder& decoder,
                                        const SekvServingOptions& options) {
  if (!options.gpu || !sekv::GpuSekv::Applies(backend)) return sekv::TierOverhead{};
  return sekv::GpuSekv::PlanOverhead(decoder.shape(), options.cache, options.gpu_tier,
                                     options.gpu_zoom);
}

absl::StatusOr<std::unique_ptr<SekvSession>> SekvSession::Build(
    sekv::SekvDecoder& decoder, SekvPrompt prompt, const SekvServingOptions& options,
    const sekv::TierOverhead& tier, const Backend* backend, int positions_to_come) {
  // 3. The hierarchy at the budget.
  const auto phase = Clock::now();
  if (options.before_build) options.before_build();
  const int t = prompt.kv.num_tokens;
  SCD_ASSIGN_OR_RETURN(sekv::PrefixKv prefix,
                       decoder.MakePrefix(std::move(prompt.kv), std::move(prompt.surprisal)));
  const sekv::CacheShape shape = decoder.shape();
  sekv::BudgetPlan plan = sekv::PlanBudget(prefix.surprisal, options.budget, options.cache,
                                           options.shares, shape.head_dim, tier);
  plan.sekv.generated_reserve = std::max(positions_to_come, 0);
  std::unique_ptr<SekvSession> s(new SekvSession(decoder));
  SCD_ASSIGN_OR_RETURN(s->cache_, sekv::SekvCache::CreateWithSegmentation(
                                      shape, prefix, plan.segmentation, plan.sekv, options.router));
  if (backend != nullptr && options.gpu && options.gpu_zoom == sekv::GpuZoom::kDevice &&
      sekv::GpuSekv::Applies(*backend)) {
    SCD_ASSIGN_OR_RETURN(s->mapping_, sekv::GpuSekv::MapCpuTier(*backend, *s->cache_));
  }
  s->length_ = t;
  s->last_token_ = prompt.last_token;
  s->positions_to_come_ = positions_to_come;
  s->start_times_ = prompt.times;
  s->start_times_.build_ms = MsSince(phase);
  if (options.after_build) options.after_build();
  return s;
}

absl::Status SekvSession::Activate(Backend& backend, const SekvServingOptions& options,
                                   std::vector<float>* logits) {
  if (last_token_ < 0) return absl::FailedPreconditionError("SEKV session already activated");
  auto phase = Clock::now();
  if (options.gpu && sekv::GpuSekv::Applies(backend)) {
    SCD_ASSIGN_OR_RETURN(
        gpu_, sekv::GpuSekv::Create(backend, *cache_, options.gpu_tier, options.gpu_zoom,
                                    positions_to_come_ > 0 ? 0  // the window holds them all already
                                                           : sekv::GpuSekv::kDefaultWindowSlack,
                                    mapping_.get()));
  }
  start_times_.build_ms += MsSince(phase);

  // 4. The last prompt token through the cache.
  phase = Clock::now();
  SCD_RETURN_IF_ERROR(Step(last_token_, logits));
  last_token_ = -1;
  start_times_.suffix_prefill_ms += MsSince(phase);
  memory_ = gpu_ != nullptr ? gpu_->Memory() : cache_->Memory();
  return absl::OkStatus();
}

absl::Status SekvSession::StepBatch(absl::Span<SekvSession* const> sessions,
                                    absl::Span<const int32_t> tokens,
                                    std::vector<std::vector<float>>* logits) {
  const size_t n = sessions.size();
  if (tokens.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SEKV batch step: ", n, " sessions and ", tokens.size(), " tokens"));
  }
  logits->resize(n);
  if (n == 0) return absl::OkStatus();
  std::vector<int> positions(n);
  std::vector<sekv::GpuSekv*> gpus;
  std::vector<sekv::KvCache*> caches;
  for (size_t i = 0; i < n; ++i) {
    SekvSession& s = *sessions[i];
    if (s.last_token_ >= 0) return absl::FailedPreconditionError("SEKV session not activated");
    if (&s.decoder_ != &sessions[0]->decoder_) {
      return absl::InvalidArgumentError("SEKV batch step: the sessions have different decoders");
    }
    positions[i] = s.length_;
    if (s.gpu_ != nullptr) {
      gpus.push_back(s.gpu_.get());
    } else {
      caches.push_back(s.cache_.get());
    }
  }
  if (!gpus.empty() && !caches.empty()) {
    return absl::InvalidArgumentError(
        "SEKV batch step: the sessions are not all on the GPU or all on the CPU");
  }
  if (!gpus.empty()) {
    SCD_RETURN_IF_ERROR(sekv::GpuSekv::StepBatch(gpus, tokens, positions, logits));
  } else {
    SCD_RETURN_IF_ERROR(sessions[0]->decoder_.StepBatch(tokens, positions, caches, logits));
  }
  for (SekvSession* s : sessions) ++s->length_;
  return absl::OkStatus();
}

bool SekvSession::SharesStep(const Backend& backend) const {
  if (gpu_ != nullptr) return gpu_->OnBackend(backend);
  return IsCpuBackend(backend) && &backend.model() == &decoder_.model();
}

absl::Status SekvSession::StepMixed(Backend& backend, absl::Span<Sequence* const> seqs,
                                    absl::Span<const int32_t> seq_tokens,
                                    absl::Span<const SampleDraw> draws, std::vector<int32_t>* next,
                                    absl::Span<SekvSession* const> sessions,
                                    absl::Span<const int32_t> tokens,
                                    std::vector<std::vector<float>>* logits) {
  const size_t n = sessions.size();
  if (tokens.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SEKV mixed step: ", n, " sessions and ", tokens.size(), " tokens"));
  }
  std::vector<int> positions(n);
  std::vector<sekv::GpuSekv*> gpus;
  std::vector<sekv::KvCacheRowAttention> caches;
  caches.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    SekvSession& s = *sessions[i];
    if (s.last_token_ >= 0) return absl::FailedPreconditionError("SEKV session not activated");
    if (!s.SharesStep(backend)) {
      return absl::InvalidArgumentError(
          absl::StrCat("SEKV mixed step: session ", i, " does not decode on the ",
                       std::string(backend.name()), " backend of the step"));
    }
    positions[i] = s.length_;
    if (s.gpu_ != nullptr) {
      gpus.push_back(s.gpu_.get());
    } else {
      caches.emplace_back(*s.cache_);
    }
  }
  if (!gpus.empty()) {  // then all are: a backend is CUDA or CPU, not both
    SCD_RETURN_IF_ERROR(sekv::GpuSekv::StepMixed(backend, seqs, seq_tokens, draws, next, gpus,
                                                 tokens, positions, logits));
  } else {
    std::vector<RowAttention*> attention;
    for (sekv::KvCacheRowAttention& c : caches) attention.push_back(&c);
    ExternalRows external;
    external.tokens = tokens;
    external.positions = positions;
    external.attention = attention;
    SCD_RETURN_IF_ERROR(backend.DecodeMixed(seqs, seq_tokens, draws, next, external, logits));
  }
  for (SekvSession* s : sessions) ++s->length_;
  return absl::OkStatus();
}

absl::Status SekvSession::Step(int32_t token, std::vector<float>* logits) {
  if (gpu_ != nullptr) {
    SCD_RETURN_IF_ERROR(gpu_->Step(token, length_, logits));
  } else {
    SCD_RETURN_IF_ERROR(decoder_.Step(token, length_, *cache_, logits));
  }
  ++length_;
  return absl::OkStatus();
}

}  // namespace scd
