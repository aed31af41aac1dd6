// RequestRecord: what scd-loadgen measured for one request, and the one outcome it ended with.
// Every issued request yields exactly one record, so the outcome counts of a run always add
// up to the number of requests issued (the soak run checks "zero lost, zero
// duplicated" against that invariant and against the server's own request ids).
//
// Outcomes, decided in this order:
//   timeout           the per-request deadline (--timeout) passed first;
//   connection_error  no HTTP response arrived (refused, reset, TLS, connect timeout, ...);
//   http_error        a response with a status other than 200 (counted per status code;
//                     a 429 is a refusal for load, "shed", reported apart as well);
//   stream_error      a 200 stream that did not end properly: an OpenAI error event, an
//                     unparsable chunk, or the connection ending before `data: [DONE]`;
//   ok                a 200 stream that ended with `data: [DONE]`.
// Times are seconds on a steady clock, measured from the start of the record's phase (the
// measured phase, or the warm-up for warm-up records).
#ifndef SCD_COMMON_TOOLS_LOADGEN_REQUEST_RECORD_H_
#define SCD_COMMON_TOOLS_LOADGEN_REQUEST_RECORD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace scd::loadgen {

enum class Outcome { kOk, kHttpError, kStreamError, kTimeout, kConnectionError };
inline constexpr int kNumOutcomes = 5;

// "ok", "http_error", "stream_error", "timeout", "connection_error".
const char* OutcomeName(Outcome outcome);

struct RequestRecord {
  int64_t index = 0;     // issue order within its phase, from 0
  bool warmup = false;   // warm-up requests are reported apart and never enter the statistics
  int prompt_index = 0;  // into the workload's prompt list
  int group = -1;        // the prompt's shared-prefix group (-1: none)

  double scheduled_s = 0;  // when the schedule wanted it sent (concurrency mode: = start_s)
  double start_s = 0;      // just before the request was written
  double end_s = 0;        // when the outcome was known

  Outcome outcome = Outcome::kConnectionError;
  int http_status = 0;     // 0 when no response arrived
  int retry_after_s = -1;  // a non-200 response's Retry-After in whole seconds; -1 when absent
  std::string error;       // one-line detail; empty when ok
  std::string request_id;  // the X-Request-Id response header ("" when absent)

  // Content timing: chunk_times_s[i] is when the i-th chunk carrying non-empty content was
  // received (chunks read in one socket read share a time). TTFT is chunk_times_s[0] - start_s.
  std::vector<double> chunk_times_s;
  int64_t prompt_tokens = -1;      // from the usage chunk; -1 when the server sent none
  int64_t completion_tokens = -1;  // idem
  std::string finish_reason;

  bool ok() const { return outcome == Outcome::kOk; }
  bool has_content() const { return !chunk_times_s.empty(); }
  double ttft_s() const { return chunk_times_s.front() - start_s; }
  double e2e_s() const { return end_s - start_s; }
  // Lateness against the schedule (0 in concurrency mode).
  double lag_s() const { return start_s - scheduled_s; }
  // Mean gap between consecutive content chunks; 0 with fewer than two chunks.
  double mean_itl_s() const;
  // Completion tokens from usage, or the content chunk count when the server sent no usage.
  int64_t output_tokens() const;
};

// One JSON object per record (the --records JSONL line): index, warmup, prompt_index, group,
// scheduled_s, start_s, end_s, outcome, http_status, retry_after_s (null when absent), error,
// request_id, ttft_ms (null without content), e2e_ms, itl_mean_ms, itl_max_ms, chunks,
// prompt_tokens, completion_tokens (null when not reported), finish_reason.
nlohmann::json RecordJson(const RequestRecord& record);

}  // namespace scd::loadgen

#endif  // SCD_COMMON_TOOLS_LOADGEN_REQUEST_RECORD_H_
