// RequestRecord helpers and its JSONL form (see request_record.h).
#include "common/tools/loadgen/request_record.h"

#include <algorithm>

namespace scd::loadgen {

const char* OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kHttpError:
      return "http_error";
    case Outcome::kStreamError:
      return "stream_error";
    case Outcome::kTimeout:
      return "timeout";
    case Outcome::kConnectionError:
      return "connection_error";
  }
  return "unknown";
}

double RequestRecord::mean_itl_s() const {
  if (chunk_times_s.size() < 2) return 0;
  return (chunk_times_s.back() - chunk_times_s.front()) /
         static_cast<double>(chunk_times_s.size() - 1);
}

int64_t RequestRecord::output_tokens() const {
  return completion_tokens >= 0 ? completion_tokens : static_cast<int64_t>(chunk_times_s.size());
}

nlohmann::json RecordJson(const RequestRecord& r) {
  auto ms_or_null = [](bool present, double seconds) {
    return present ? nlohmann::json(seconds * 1e3) : nlohmann::json(nullptr);
  };
  auto count_or_null = [](int64_t n) {
    return n >= 0 ? nlohmann::json(n) : nlohmann::json(nullptr);
  };
  double itl_max_s = 0;
  for (size_t i = 1; i < r.chunk_times_s.size(); ++i) {
    itl_max_s = std::max(itl_max_s, r.chunk_times_s[i] - r.chunk_times_s[i - 1]);
  }
  const bool has_itl = r.chunk_times_s.size() >= 2;
  return nlohmann::json{{"index", r.index},
                        {"warmup", r.warmup},
                        {"prompt_index", r.prompt_index},
                        {"group", r.group},
                        {"scheduled_s", r.scheduled_s},
                        {"start_s", r.start_s},
                        {"end_s", r.end_s},
                        {"outcome", OutcomeName(r.outcome)},
                        {"http_status", r.http_status},
                        {"retry_after_s", count_or_null(r.retry_after_s)},
                        {"error", r.error},
                        {"request_id", r.request_id},
                        {"ttft_ms", ms_or_null(r.has_content(), r.has_content() ? r.ttft_s() : 0)},
                        {"e2e_ms", r.e2e_s() * 1e3},
                        {"itl_mean_ms", ms_or_null(has_itl, r.mean_itl_s())},
                        {"itl_max_ms", ms_or_null(has_itl, itl_max_s)},
                        {"chunks", r.chunk_times_s.size()},
                        {"prompt_tokens", count_or_null(r.prompt_tokens)},
                        {"completion_tokens", count_or_null(r.completion_tokens)},
                        {"finish_reason", r.finish_reason}};
}

}  // namespace scd::loadgen
