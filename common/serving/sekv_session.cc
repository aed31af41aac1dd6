// See sekv_session.h.
#include "common/serving/sekv_session.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "common/base/elapsed.h"
#include "common/base/status_macros.h"
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
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<SekvSession> s, Build(decoder, std::move(prompt), options));
  SCD_RETURN_IF_ERROR(s->Activate(backend, options, logits));
  return s;
}

absl::StatusOr<SekvPrompt> SekvSession::Prepare(Backend& backend, const ConsumerCodec& codec,
                                                const Payload* payload,
                                                absl::Span<const int32_t> suffix) {
  if (suffix.empty()) return absl::InvalidArgumentError("SEKV needs at least one suffix token");
  if (payload != nullptr && payload->start_position != 0) {
    return absl::UnimplementedError("SEKV serves payloads that start at position 0 only");
  }
  if (payload != nullptr && payload->mode == CodecMode::kRecompute) {
    return absl::UnimplementedError(
        "SEKV cannot serve recompute payloads (their rebuild fills layers inside the backend)");
  }
  const bool own_prefill = payload == nullptr || payload->mode == CodecMode::kOracle;
  const std::vector<int32_t> head(suffix.begin(), suffix.end() - 1);
  const int payload_tokens = payload != nullptr ? static_cast<int>(payload->token_ids.size()) : 0;
  const int t = payload_tokens + static_cast<int>(head.size());  // positions in the cache
  if (t == 0) {
    return absl::InvalidArgumentError("SEKV needs a prompt of at least two tokens");
  }

  // 1-2. The prompt's pre-RoPE K/V and surprisal, from the rebuild and/or a prefill.
  SekvPrompt prompt;
  prompt.last_token = suffix.back();
  SekvStartTimes& times = prompt.times;
  auto phase = Clock::now();
  ExternalKv& kv = prompt.kv;
  std::vector<float>& surprisal = prompt.surprisal;
  SCD_ASSIGN_OR_RETURN(auto seq, backend.NewSequence(t));
  PrefillOptions po;
  po.layer_states = po.surprisal = true;
  if (own_prefill) {
    std::vector<int32_t> tokens = payload != nullptr ? payload->token_ids : std::vector<int32_t>{};
    tokens.insert(tokens.end(), head.begin(), head.end());
    PrefillResult pr;
    SCD_RETURN_IF_ERROR(backend.Prefill(*seq, tokens, po, &pr));
    kv.num_tokens = t;
    for (LayerStates& s : pr.layers) {
      kv.k_pre_rope.push_back(std::move(s.k_pre_rope));
      kv.v.push_back(std::move(s.v));
    }
    surprisal = std::move(pr.surprisal);
    (payload != nullptr ? times.rebuild_ms : times.suffix_prefill_ms) = MsSince(phase);
  } else {
    SCD_ASSIGN_OR_RETURN(surprisal, PayloadSurprisal(*payload));
    sekv::KvCaptureBackend capture(backend);
    SCD_RETURN_IF_ERROR(codec.Rebuild(*payload, capture, *seq));
    kv = capture.TakeCaptured();
    if (kv.num_tokens != payload_tokens) {
      return absl::InternalError("the payload's rebuild did not append its K/V in one piece");
    }
    times.rebuild_ms = MsSince(phase);
    phase = Clock::now();
    if (!head.empty()) {
      PrefillResult pr;
      SCD_RETURN_IF_ERROR(backend.Prefill(*seq, head, po, &pr));
      const size_t kvd = static_cast<size_t>(backend.model().config.kv_dim());
      for (size_t l = 0; l < kv.k_pre_rope.size(); ++l) {
        if (pr.layers[l].k_pre_rope.size() != head.size() * kvd) {
          return absl::InternalError("the suffix prefill returned no layer states");
        }
        kv.k_pre_rope[l].insert(kv.k_pre_rope[l].end(), pr.layers[l].k_pre_rope.begin(),
                                pr.layers[l].k_pre_rope.end());
        kv.v[l].insert(kv.v[l].end(), pr.layers[l].v.begin(), pr.layers[l].v.end());
      }
      surprisal.insert(surprisal.end(), pr.surprisal.begin(), pr.surprisal.end());
      kv.num_tokens = t;
    }
    times.suffix_prefill_ms = MsSince(phase);
  }
  return prompt;  // the backend sequence is freed: from here on the SEKV cache holds the prompt
}

absl::StatusOr<std::unique_ptr<SekvSession>> SekvSession::Build(sekv::SekvDecoder& decoder,
                                                                SekvPrompt prompt,
                                                                const SekvServingOptions& options) {
  // 3. The hierarchy at the budget.
  const auto phase = Clock::now();
  if (options.before_build) options.before_build();
  const int t = prompt.kv.num_tokens;
  SCD_ASSIGN_OR_RETURN(sekv::PrefixKv prefix,
                       decoder.MakePrefix(prompt.kv, std::move(prompt.surprisal)));
  prompt.kv = ExternalKv{};
  const sekv::CacheShape shape = decoder.shape();
  const sekv::BudgetPlan plan = sekv::PlanBudget(prefix.surprisal, options.budget, options.cache,
                                                 options.shares, shape.head_dim);
  std::unique_ptr<SekvSession> s(new SekvSession(decoder));
  SCD_ASSIGN_OR_RETURN(s->cache_, sekv::SekvCache::CreateWithSegmentation(
                                      shape, prefix, plan.segmentation, plan.sekv, options.router));
  s->length_ = t;
  s->last_token_ = prompt.last_token;
  s->start_times_ = prompt.times;
  s->start_times_.build_ms = MsSince(phase);
  return s;
}

absl::Status SekvSession::Activate(Backend& backend, const SekvServingOptions& options,
                                   std::vector<float>* logits) {
  if (last_token_ < 0) return absl::FailedPreconditionError("SEKV session already activated");
  auto phase = Clock::now();
  if (options.gpu && sekv::GpuSekv::Applies(backend)) {
    SCD_ASSIGN_OR_RETURN(
        gpu_, sekv::GpuSekv::Create(backend, *cache_, options.gpu_tier, options.gpu_zoom));
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
