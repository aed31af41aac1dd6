// OpenAiFrontend: the prefill daemon's OpenAI-compatible HTTP routes over the
// GenerationPipeline: POST /v1/completions and /v1/chat/completions (streaming with SSE, and
// stream_options.include_usage, or one JSON body), GET /v1/models. A POST body that is not
// sent as application/json gets 415 (http::CheckJsonContentType). Validation errors, unknown
// models, missing decode daemons and requests shed by admission (429 with the Retry-After it
// derived) are answered before any byte of a stream (4xx/503 with an OpenAI error body); a
// failure after the stream started arrives as an OpenAI error event.
//
// Before anything else a completion request passes its API key's limits (api_keys.h: 429 with
// Retry-After and the code rate_limit_exceeded when over one); the lease it gets is held until
// the request ends, and given back before the stream's last event goes out, so that a client
// that has read [DONE] finds its slot free.
//
// A streaming request runs on its own worker thread (the HTTP pool thread drains the SSE
// queue); workers are counted so that Drain can wait for them at shutdown.
//
// Fan-out (the `scd.fanout` extension, openai_api.h): the same prompt to several specialists
// at once, one choice each; on one shared basis they share one payload (one prefill and one
// encode, GenerationPipeline::RunFanout). A streamed choice's chunks carry its index and model;
// each choice's finishing chunk follows once every choice has ended.
#ifndef SCD_PREFILL_SERVER_OPENAI_FRONTEND_H_
#define SCD_PREFILL_SERVER_OPENAI_FRONTEND_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/http/http_server.h"
#include "common/http/openai_api.h"
#include "common/http/openai_response.h"
#include "prefill_server/api_keys.h"
#include "prefill_server/generation_pipeline.h"

namespace scd {

class OpenAiFrontend {
 public:
  // Registers the routes on `server`. Nothing is owned; `keys` outlives the frontend and its
  // workers.
  OpenAiFrontend(http::HttpServer* server, GenerationPipeline* pipeline, ApiKeyRing* keys,
                 std::vector<std::string> model_names, http::RequestLimits limits);
  ~OpenAiFrontend();  // waits for workers

  // Waits up to `timeout` for streaming workers to finish; returns how many are left.
  int WaitForWorkers(std::chrono::milliseconds timeout);

 private:
  void Handle(bool chat, const http::HttpRequest& req, http::HttpResponse& res);
  // A request whose `scd.fanout` names several specialists: one choice per specialist, in the
  // list's order, each naming its model (and its own `scd` object); `usage` sums them. The
  // request's `model` must be listed. One failed specialist fails the request.
  void HandleFanout(bool chat, GenerationRequest g, const std::vector<std::string>& models,
                    bool stream, bool include_usage, ApiKeyLease lease, http::HttpResponse& res);
  // A non-streamed fan-out's body: runs it, one choice per specialist; the first failure.
  absl::StatusOr<std::string> FanoutBody(bool chat, const http::ResponseInfo& info,
                                         const std::vector<std::string>& models,
                                         const std::vector<PreparedRequest>& prepared);
  // Counts a streaming worker in (Enter) and out (Leave), for WaitForWorkers.
  void Enter();
  void Leave();

  GenerationPipeline* const pipeline_;
  ApiKeyRing* const keys_;
  const std::vector<std::string> model_names_;
  const http::RequestLimits limits_;
  const int64_t created_;
  std::mutex mu_;
  std::condition_variable idle_;
  int workers_ = 0;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_OPENAI_FRONTEND_H_
