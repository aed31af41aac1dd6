// GenerationPipeline's fan-out (generation_pipeline.h): one prompt, several specialists, one
// payload where their codes are on one shared basis.
#include <algorithm>
#include <future>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/http/openai_api.h"
#include "common/http/openai_error.h"
#include "prefill_server/generation_pipeline.h"

namespace scd {
namespace {

// Whether `r`'s payload is the same bytes as `first`'s: the same tokens, mode and rung, and
// the same pair tag (for scd codes on one shared basis, the basis digest).
bool SharesPayload(const PreparedRequest& first, const PreparedRequest& r) {
  return r.mode.mode == first.mode.mode && r.mode.rung == first.mode.rung &&
         r.mode.mode != CodecMode::kOracle && r.tokens == first.tokens &&
         r.specialist->PairTag(r.mode.mode) == first.specialist->PairTag(first.mode.mode);
}

}  // namespace

absl::StatusOr<std::vector<PreparedRequest>> GenerationPipeline::PrepareFanout(
    const GenerationRequest& request, const std::vector<std::string>& models,
    std::string_view field) {
  if (models.empty() || models.size() > http::kMaxFanout ||
      std::set<std::string>(models.begin(), models.end()).size() != models.size()) {
    return http::FieldError(
        field, absl::StrCat("must list 1 to ", http::kMaxFanout, " distinct specialists"));
  }
  if (std::find(models.begin(), models.end(), request.model) == models.end()) {
    return http::FieldError(field,
                            absl::StrCat("must list the request's model '", request.model, "'"));
  }
  std::vector<PreparedRequest> out;
  for (const std::string& model : models) {
    GenerationRequest g = request;
    g.model = model;
    if (!out.empty() && !request.mode.mode.has_value()) {
      const PreparedRequest& first = out.front();
      auto it = specialists_->find(model);
      const CodecMode m = first.mode.mode;
      if (it != specialists_->end() && m != CodecMode::kOracle &&
          it->second->PairTag(m) == first.specialist->PairTag(m)) {
        g.mode.mode = m;
        g.mode.rung = first.mode.rung;
      }
    }
    absl::StatusOr<PreparedRequest> p = Prepare(std::move(g));
    if (!p.ok()) {
      return absl::Status(p.status().code(),
                          absl::StrCat("fan-out to '", model, "': ", p.status().message()));
    }
    out.push_back(std::move(*p));
  }
  return out;
}

std::vector<absl::StatusOr<GenerationOutcome>> GenerationPipeline::RunFanout(
    const std::vector<PreparedRequest>& requests, const std::vector<GenerationSink*>& sinks) {
  const size_t n = std::min(requests.size(), sinks.size());
  std::vector<absl::StatusOr<GenerationOutcome>> out(
      n, absl::InternalError("fan-out request not run"));
  if (n == 0) return out;
  // The first request's payload, once built, for the others that share it.
  std::promise<absl::StatusOr<Encoded>> built;
  std::shared_future<absl::StatusOr<Encoded>> first_payload = built.get_future().share();
  bool published = false;
  auto publish = [&](const absl::StatusOr<Encoded>& e) {
    if (!published) built.set_value(e);
    published = true;
  };
  std::vector<std::thread> threads;
  for (size_t i = 1; i < n; ++i) {
    threads.emplace_back([&, i] {
      const PreparedRequest& r = requests[i];
      if (!SharesPayload(requests[0], r)) {
        out[i] = Run(r, *sinks[i]);
        return;
      }
      out[i] = RunWith(r, *sinks[i], [&](scd::v1::Timings* t) -> absl::StatusOr<Encoded> {
        const absl::StatusOr<Encoded>& e = first_payload.get();
        if (!e.ok()) return BuildPayload(r, t);  // the first's failure is its own to report
        // Like a prefix-cache hit: no prefill or encode of its own (and none observed).
        Encoded copy = *e;
        copy.cache_hit = true;
        t->set_prefix_cache_hit(true);
        return copy;
      });
    });
  }
  out[0] = RunWith(requests[0], *sinks[0], [&](scd::v1::Timings* t) {
    absl::StatusOr<Encoded> e = BuildPayload(requests[0], t);
    publish(e);
    return e;
  });
  publish(absl::InternalError("the first request of the fan-out ended before its payload"));
  for (std::thread& t : threads) t.join();
  return out;
}

}  // namespace scd
