// GenerationService: the client-facing scd.v1.Generation gRPC service over the
// GenerationPipeline (the gRPC twin of the OpenAI HTTP API). Errors before the first event are
// gRPC statuses (UNAUTHENTICATED, NOT_FOUND, INVALID_ARGUMENT, RESOURCE_EXHAUSTED,
// UNAVAILABLE; a request shed by admission also gets a `retry-after` trailer in whole seconds);
// later ones are a final `error` event. The request id (scd::NewRequestId, the
// HTTP API's X-Request-Id format) goes out in the initial metadata as "x-request-id".
// Under mutual TLS (grpc.tls.ca) a caller also needs a certificate of that CA (peer_auth.h);
// one without is refused (UNAUTHENTICATED), logged and counted. The API key (the request's
// api_key field, or `authorization: Bearer <key>` metadata) passes its limits before any work
// (api_keys.h: RESOURCE_EXHAUSTED with a `retry-after` trailer when over one) and holds its
// lease until the call returns, however it ends.
#ifndef SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
#define SCD_PREFILL_SERVER_GENERATION_SERVICE_H_

#include <atomic>
#include <string>

#include "common/daemon/refusal_log.h"
#include "common/http/openai_api.h"
#include "common/rpc/peer_auth.h"
#include "prefill_server/api_keys.h"
#include "prefill_server/generation_pipeline.h"
#include "proto/scd.grpc.pb.h"

namespace scd {

class GenerationService final : public scd::v1::Generation::Service {
 public:
  // `keys` empty: no authentication. Nothing is owned; `auth` (callers' certificates) and
  // `refusals` may be null.
  GenerationService(GenerationPipeline* pipeline, ApiKeyRing* keys, http::RequestLimits limits,
                    const rpc::PeerAuthenticator* auth = nullptr,
                    daemon::RefusalLog* refusals = nullptr)
      : pipeline_(pipeline), keys_(keys), limits_(limits), auth_(auth), refusals_(refusals) {}

  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::GenerateRequest* request,
                        grpc::ServerWriter<scd::v1::GenerateEvent>* writer) override;

  void StopAccepting() { accepting_.store(false); }

 private:
  // The key's lease, or UNAUTHENTICATED, or RESOURCE_EXHAUSTED over the key's limits.
  absl::StatusOr<ApiKeyLease> Authorize(grpc::ServerContext* context,
                                        const scd::v1::GenerateRequest& r) const;
  absl::StatusOr<GenerationRequest> Translate(const scd::v1::GenerateRequest& r) const;
  // A request with `fanout`: one answer per listed specialist, each event naming its choice.
  grpc::Status GenerateFanout(grpc::ServerContext* context, const scd::v1::GenerateRequest& request,
                              const GenerationRequest& g,
                              grpc::ServerWriter<scd::v1::GenerateEvent>* writer);

  GenerationPipeline* const pipeline_;
  ApiKeyRing* const keys_;
  const http::RequestLimits limits_;
  const rpc::PeerAuthenticator* const auth_;
  daemon::RefusalLog* const refusals_;
  std::atomic<bool> accepting_{true};
  std::atomic<uint64_t> counter_{0};
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_GENERATION_SERVICE_H_
