// See event_log.h.
#include "common/daemon/event_log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace scd::daemon {
namespace {

std::mutex config_mutex;
std::string component_name = "scd";
std::atomic<int> min_level{static_cast<int>(LogLevel::kInfo)};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

void ConfigureEventLog(std::string component, LogLevel level) {
  std::lock_guard<std::mutex> lock(config_mutex);
  component_name = std::move(component);
  min_level.store(static_cast<int>(level));
}

void LogEvent(LogLevel level, std::string_view event, nlohmann::json fields) {
  if (static_cast<int>(level) < min_level.load()) return;
  nlohmann::json line = nlohmann::json::object();
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  line["level"] = LevelName(level);
  {
    std::lock_guard<std::mutex> lock(config_mutex);
    line["component"] = component_name;
  }
  line["event"] = std::string(event);
  if (fields.is_object()) {
    for (auto& [k, v] : fields.items()) line[k] = std::move(v);
  } else if (!fields.is_null()) {
    line["detail"] = std::move(fields);
  }
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + off, text.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace scd::daemon
