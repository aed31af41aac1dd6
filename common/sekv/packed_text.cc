// See packed_text.h.
#include "common/sekv/packed_text.h"

namespace scd::sekv {

std::vector<std::vector<int32_t>> PackPassages(const Tokenizer& tokenizer,
                                               const std::vector<std::string>& passages,
                                               int context, int max_sequences) {
  std::vector<std::vector<int32_t>> out;
  std::string text;
  for (const std::string& p : passages) {
    if (max_sequences > 0 && static_cast<int>(out.size()) >= max_sequences) break;
    text += text.empty() ? p : "\n" + p;
    // Cheap bound first: a token covers at most a few dozen bytes, so short texts are skipped
    // without tokenizing.
    if (static_cast<int>(text.size()) < context) continue;
    std::vector<int32_t> ids = tokenizer.Encode(text);
    if (static_cast<int>(ids.size()) >= context) {
      ids.resize(context);
      out.push_back(std::move(ids));
      text.clear();
    }
  }
  return out;
}

}  // namespace scd::sekv
