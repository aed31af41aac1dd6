// StopStringMatcher: OpenAI `stop` semantics over a token stream. Generation ends before the
// first occurrence of any stop string, which is not returned. Because a stop string may span
// several tokens, text that could still be the beginning of a stop string is held back until
// the next piece decides it; everything else is released at once, so streaming latency is
// only added where a match is genuinely pending (as vLLM's detokenizer does).
#ifndef SCD_PREFILL_SERVER_STOP_STRINGS_H_
#define SCD_PREFILL_SERVER_STOP_STRINGS_H_

#include <string>
#include <string_view>
#include <vector>

namespace scd {

class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stops);

  // Feeds the next piece of generated text. Returns the text that is now safe to emit; sets
  // *stopped when a stop string completed (the returned text then ends right before it, and
  // later calls return nothing).
  std::string Push(std::string_view piece, bool* stopped);
  // The held-back text, at the end of generation.
  std::string Flush();

  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace scd

#endif  // SCD_PREFILL_SERVER_STOP_STRINGS_H_
