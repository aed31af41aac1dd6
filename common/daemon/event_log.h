// Structured logs: one JSON object per line on stderr, one line per event, so that logs can be
// grepped by request id and parsed by machines ({"ts": ..., "level": ..., "event": ...,
// fields...}). A line is written with one write(2) call, so lines from concurrent threads
// never interleave. Secrets never go through here: callers redact config before logging it.
#ifndef SCD_COMMON_DAEMON_EVENT_LOG_H_
#define SCD_COMMON_DAEMON_EVENT_LOG_H_

#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace scd::daemon {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Sets the process-wide component name added to every line ("prefill", "decode") and the
// lowest level written.
void ConfigureEventLog(std::string component, LogLevel min_level = LogLevel::kInfo);

// Writes {"ts", "level", "component", "event", ...fields}. `fields` must be a JSON object
// (other values are stored under "detail").
void LogEvent(LogLevel level, std::string_view event,
              nlohmann::json fields = nlohmann::json::object());

inline void LogInfo(std::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  LogEvent(LogLevel::kInfo, event, std::move(fields));
}
inline void LogWarning(std::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  LogEvent(LogLevel::kWarning, event, std::move(fields));
}
inline void LogError(std::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  LogEvent(LogLevel::kError, event, std::move(fields));
}

}  // namespace scd::daemon

#endif  // SCD_COMMON_DAEMON_EVENT_LOG_H_
