// GenerationService: the client-facing scd.v1.Generation gRPC service over the
// GenerationPipeline (the gRPC twin of the OpenAI HTTP API). Errors before the first event are
// gRPC statuses (UNAUTHENTICATED, NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// UNAVAILABLE; a request shed by admission also gets a `retry-after` trailer in whole seconds);
// later ones are a final `error` event. The request id (scd::NewRequestId, the
// HTTP API's X-Request-Id format) goes out in the initial metadata as "x-request-id".
// Under mutual TLS (grpc.tls.ca) a caller also needs a certificate of that CA (peer_auth.h);
// one without is refused (UNAUTHENTICATED), logged and counted.
#ifndef SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
#define SCD_PREFILL_SERVER_GENERATION_SERVICE_H_

#include <atomic>
#include <string>

#include "common/daemon/refusal_log.h"
#include "common/http/openai_api.h"
#include "common/rpc/peer_auth.h"
#include "prefill_server/generation_pipeline.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

class GenerationService final : public scd::v1::Generation::Service {
 public:
  // `api_key` empty: no authentication. `auth` (callers' certificates) and `refusals` are
  // not owned and may be null.
  GenerationService(GenerationPipeline* pipeline, std::string api_key, http::RequestLimits limits,
                    const rpc::PeerAuthenticator* auth = nullptr,
                    daemon::RefusalLog* refusals = nullptr)
      : pipeline_(pipeline),
        api_key_(std::move(api_key)),
        limits_(limits),
        auth_(auth),
        refusals_(refusals) {}

  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::GenerateRequest* request,
                        grpc::ServerWriter<scd::v1::GenerateEvent>* writer) override;

  void StopAccepting() { accepting_.store(false); }

 private:
  absl::Status Authorize(grpc::ServerContext* context, const scd::v1::GenerateRequest& r) const;
  absl::StatusOr<GenerationRequest> Translate(const scd::v1::GenerateRequest& r) const;

  GenerationPipeline* const pipeline_;
  const std::string api_key_;
  const http::RequestLimits limits_;
  const rpc::PeerAuthenticator* const auth_;
  daemon::RefusalLog* const refusals_;
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> counter_{0};
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
