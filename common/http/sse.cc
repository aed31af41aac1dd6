// SSE framing and parsing (see sse.h).
#include "common/http/sse.h"

namespace scd::http {

std::string SseEvent(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  size_t start = 0;
  while (true) {
    const size_t end = payload.find('\n', start);
    out += "data: ";
    out.append(payload.substr(start, end == std::string_view::npos ? end : end - start));
    out += '\n';
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  out += '\n';
  return out;
}

std::string SseComment(std::string_view text) {
  std::string out = ": ";
  for (char c : text) out += (c == '\n' || c == '\r') ? ' ' : c;
  out += "\n\n";
  return out;
}

std::vector<std::string> SseParser::Feed(std::string_view bytes) {
  std::vector<std::string> events;
  for (char c : bytes) {
    if (c != '\n') {
      line_ += c;
      continue;
    }
    if (!line_.empty() && line_.back() == '\r') line_.pop_back();
    if (line_.empty()) {  // blank line: dispatch
      if (has_data_) events.push_back(std::move(data_));
      data_.clear();
      has_data_ = false;
    } else if (line_[0] != ':') {
      const size_t colon = line_.find(':');
      const std::string_view field = std::string_view(line_).substr(0, colon);
      if (field == "data") {
        std::string_view value;
        if (colon != std::string::npos) {
          value = std::string_view(line_).substr(colon + 1);
          if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
        }
        if (has_data_) data_ += '\n';
        data_.append(value);
        has_data_ = true;
      }
    }
    line_.clear();
  }
  return events;
}

}  // namespace scd::http
