// GenerationService: the client-facing scd.v1.Generation gRPC service over the
// GenerationPipeline (the gRPC twin of the OpenAI HTTP API). Errors before the first event are
// gRPC statuses (UNAUTHENTICATED, NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// UNAVAILABLE); later ones are a final `error` event. The request id goes out in the initial
// metadata as "x-request-id".
#ifndef SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
#define SCD_PREFILL_SERVER_GENERATION_SERVICE_H_

#include <atomic>
#include <string>

#include "common/http/openai_api.h"
#include "prefill_server/generation_pipeline.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

class GenerationService final : public scd::v1::Generation::Service {
 public:
  // `api_key` empty: no authentication.
  GenerationService(GenerationPipeline* pipeline, std::string api_key, http::RequestLimits limits)
      : pipeline_(pipeline), api_key_(std::move(api_key)), limits_(limits) {}

  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::GenerateRequest* request,
                        grpc::ServerWriter<scd::v1::GenerateEvent>* writer) override;

  void StopAccepting() { accepting_.store(false); }

 private:
  absl::Status Authorize(grpc::ServerContext* context, const scd::v1::GenerateRequest& r) const;
  absl::StatusOr<GenerationRequest> Translate(const scd::v1::GenerateRequest& r) const;

  GenerationPipeline* const pipeline_;
  const std::string api_key_;
  const http::RequestLimits limits_;
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> counter_{0};
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
