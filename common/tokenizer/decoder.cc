// Incremental HF decoder chain (see decoder.h for the stages). The HF reference for each step
// is tokenizers/src/decoders/*.rs; the streaming forms below produce, over a whole sequence,
// exactly the concatenation HF's decode_chain + join("") would.
#include "common/tokenizer/decoder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace scd::tokenizer_internal {
namespace {

// The byte of an HF byte-fallback token "<0xNN>" (hex digits in either case), or -1.
int ByteTokenValue(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

std::string ReplaceAll(std::string_view text, std::string_view pattern, std::string_view content) {
  std::string out;
  size_t pos = 0;
  for (size_t m = text.find(pattern); m != std::string_view::npos; m = text.find(pattern, pos)) {
    absl::StrAppend(&out, Sv(text.substr(pos, m - pos)), Sv(content));
    pos = m + pattern.size();
  }
  out.append(text.substr(pos));
  return out;
}

// Calls f(code point, utf8 bytes) for each character of valid UTF-8 `text`.
template <typename F>
void ForEachChar(std::string_view text, F f) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Char c = DecodeUtf8(text, pos);
    f(c.cp, text.substr(pos, c.len));
    pos += c.len;
  }
}

// HF's Strip on one whole token: up to `start` leading and `stop` trailing `content` chars.
std::string StripToken(std::string_view token, char32_t content, int start, int stop) {
  std::vector<std::pair<char32_t, std::string_view>> chars;
  ForEachChar(token, [&](char32_t cp, std::string_view bytes) { chars.emplace_back(cp, bytes); });
  size_t begin = 0;
  while (begin < chars.size() && static_cast<int>(begin) < start && chars[begin].first == content) {
    ++begin;
  }
  size_t end = chars.size();
  while (end > begin && static_cast<int>(chars.size() - end) < stop &&
         chars[end - 1].first == content) {
    --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) out.append(chars[i].second);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderPipeline>> DecoderPipeline::FromJson(const Json* json,
                                                                           std::string_view path) {
  auto pipeline = std::unique_ptr<DecoderPipeline>(new DecoderPipeline);
  if (json == nullptr) {
    pipeline->join_ = Join::kSpaces;
    return pipeline;
  }
  SCD_RETURN_IF_ERROR(pipeline->Add(*json, path));
  return pipeline;
}

absl::Status DecoderPipeline::Add(const Json& json, std::string_view path) {
  SCD_ASSIGN_OR_RETURN(const std::string type, GetType(json, path));
  if (type == "Sequence") {
    return ForEachInSequence(
        json, "decoders", path,
        [this](const Json& item, std::string_view item_path) { return Add(item, item_path); });
  }
  const bool joined = join_ != Join::kNone;
  Step step;
  if (type == "Replace") {
    step.kind = Kind::kReplace;
    bool is_regex = false;
    SCD_ASSIGN_OR_RETURN(step.pattern, GetPattern(json, "pattern", path, &is_regex));
    if (is_regex) {
      return JsonError(JoinPath(path, "pattern"),
                       absl::StrCat("unsupported Replace regex: ", step.pattern));
    }
    if (step.pattern.empty()) return JsonError(JoinPath(path, "pattern"), "empty pattern");
    SCD_ASSIGN_OR_RETURN(step.content, GetString(json, "content", path));
  } else if (type == "ByteFallback") {
    if (joined) return JsonError(path, "ByteFallback after Fuse/ByteLevel is unsupported");
    step.kind = Kind::kByteFallback;
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    SCD_ASSIGN_OR_RETURN(step.character, GetCharOr(json, "replacement", U'\u2581', path));
    // Legacy files say add_prefix_space; newer ones prepend_scheme (see pre_tokenizer.cc).
    const Json* scheme = FindField(json, "prepend_scheme");
    if (scheme != nullptr) {
      if (!scheme->is_string()) return JsonError(JoinPath(path, "prepend_scheme"), "not a string");
      step.drop_first = scheme->get<std::string>() != "never";
    } else {
      SCD_ASSIGN_OR_RETURN(step.drop_first, GetBoolOr(json, "add_prefix_space", true, path));
    }
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    SCD_ASSIGN_OR_RETURN(step.character, GetCharOr(json, "content", U' ', path));
    SCD_ASSIGN_OR_RETURN(const int64_t start, GetIntOr(json, "start", 0, path));
    SCD_ASSIGN_OR_RETURN(const int64_t stop, GetIntOr(json, "stop", 0, path));
    if (start < 0 || stop < 0 || start > 1024 || stop > 1024) {
      return JsonError(path, "Strip start/stop must be in [0, 1024]");
    }
    step.start = static_cast<int>(start);
    step.stop = static_cast<int>(stop);
  } else if (type == "Fuse") {
    if (!joined) {
      join_ = Join::kFuse;
      return absl::OkStatus();
    }
    step.kind = Kind::kFuse;  // fusing one string again changes nothing
  } else if (type == "ByteLevel") {
    if (joined) return JsonError(path, "ByteLevel after Fuse/ByteLevel is unsupported");
    join_ = Join::kByteLevel;
    return absl::OkStatus();
  } else {
    return JsonError(JoinPath(path, "type"), absl::StrCat("unsupported decoder type: ", type));
  }
  (joined ? string_steps_ : token_steps_).push_back(std::move(step));
  return absl::OkStatus();
}

DecoderPipeline::State DecoderPipeline::NewState() const { return State(this); }

DecoderPipeline::State::State(const DecoderPipeline* pipeline)
    : pipeline_(pipeline),
      token_states_(pipeline->token_steps_.size()),
      string_states_(pipeline->string_steps_.size()) {
  for (size_t i = 0; i < string_states_.size(); ++i) {
    string_states_[i].lead_left = pipeline->string_steps_[i].start;
  }
}

void DecoderPipeline::State::PushToken(std::string_view token, std::string* out) {
  RunTokenSteps(0, std::string(token), out);
}

void DecoderPipeline::State::Flush(std::string* out) {
  for (size_t i = 0; i < token_states_.size(); ++i) FlushByteRun(i, out);
  if (pipeline_->join_ == Join::kByteLevel) {
    std::string tail;
    byte_level_.Flush(&tail);
    RunStringSteps(0, std::move(tail), out);
  }
  for (size_t i = 0; i < string_states_.size(); ++i) {
    RunStringSteps(i + 1, FlushStringStep(i), out);
  }
}

void DecoderPipeline::State::RunTokenSteps(size_t first, std::string token, std::string* out) {
  for (size_t i = first; i < token_states_.size(); ++i) {
    const Step& step = pipeline_->token_steps_[i];
    TokenStepState& state = token_states_[i];
    switch (step.kind) {
      case Kind::kReplace:
        if (token.find(step.pattern) != std::string::npos) {
          token = ReplaceAll(token, step.pattern, step.content);
        }
        break;
      case Kind::kByteFallback: {
        const int byte = ByteTokenValue(token);
        if (byte >= 0) {
          state.run_bytes.push_back(static_cast<char>(byte));
          return;
        }
        FlushByteRun(i, out);  // the run ends before this token
        break;
      }
      case Kind::kMetaspace: {
        const bool first_token = state.count++ == 0;
        std::string text;
        ForEachChar(token, [&](char32_t cp, std::string_view bytes) {
          if (cp != step.character) {
            text.append(bytes);
          } else if (!(first_token && step.drop_first)) {
            text.push_back(' ');
          }
        });
        token = std::move(text);
        break;
      }
      case Kind::kStrip:
        token = StripToken(token, step.character, step.start, step.stop);
        break;
      case Kind::kFuse:
      case Kind::kByteLevel:
        break;  // never token steps
    }
  }
  Join(token, out);
}

void DecoderPipeline::State::FlushByteRun(size_t i, std::string* out) {
  TokenStepState& state = token_states_[i];
  if (state.run_bytes.empty()) return;
  std::string run = std::move(state.run_bytes);
  state.run_bytes.clear();
  if (IsValidUtf8(run)) {
    RunTokenSteps(i + 1, std::move(run), out);
  } else {
    for (size_t k = 0; k < run.size(); ++k) {
      RunTokenSteps(i + 1, std::string(kReplacementUtf8), out);
    }
  }
}

void DecoderPipeline::State::Join(std::string_view token, std::string* out) {
  switch (pipeline_->join_) {
    case Join::kNone:
    case Join::kFuse:
      RunStringSteps(0, std::string(token), out);
      return;
    case Join::kSpaces:
      if (!first_token_) out->push_back(' ');
      first_token_ = false;
      out->append(token);
      return;
    case Join::kByteLevel: {
      // HF maps a token back to bytes only if every character is in bytes_to_unicode's
      // image; otherwise (an added token such as "<|im_end|>" with a space, say) its own
      // UTF-8 bytes are used.
      std::string bytes;
      bool mapped = true;
      ForEachChar(token, [&](char32_t cp, std::string_view) {
        const int b = UnicodeToByte(cp);
        if (b < 0) mapped = false;
        if (mapped) bytes.push_back(static_cast<char>(b));
      });
      std::string text;
      byte_level_.Push(mapped ? std::string_view(bytes) : token, &text);
      RunStringSteps(0, std::move(text), out);
      return;
    }
  }
}

void DecoderPipeline::State::RunStringSteps(size_t first, std::string text, std::string* out) {
  for (size_t i = first; i < string_states_.size() && !text.empty(); ++i) {
    const Step& step = pipeline_->string_steps_[i];
    const bool passthrough =
        step.kind == Kind::kFuse ||
        (step.kind == Kind::kStrip && step.stop == 0 && string_states_[i].lead_left == 0);
    if (!passthrough) text = ApplyStringStep(i, text);
  }
  out->append(text);
}

std::string DecoderPipeline::State::ApplyStringStep(size_t i, std::string_view text) {
  const Step& step = pipeline_->string_steps_[i];
  StringStepState& state = string_states_[i];
  std::string out;
  switch (step.kind) {
    case Kind::kStrip:
      ForEachChar(text, [&](char32_t cp, std::string_view bytes) {
        if (state.lead_left > 0) {
          if (cp == step.character) {
            --state.lead_left;
            return;
          }
          state.lead_left = 0;
        }
        if (step.stop == 0) {
          out.append(bytes);
        } else if (cp != step.character) {
          out.append(state.held);
          state.held.clear();
          state.held_count = 0;
          out.append(bytes);
        } else if (state.held_count < step.stop) {
          state.held.append(bytes);
          ++state.held_count;
        } else {
          out.append(bytes);  // the run is longer than `stop`: its first char is kept
        }
      });
      return out;
    case Kind::kReplace: {
      const std::string buffer = state.held + std::string(text);
      state.held.clear();
      size_t pos = 0;
      for (size_t m = buffer.find(step.pattern); m != std::string::npos;
           m = buffer.find(step.pattern, pos)) {
        absl::StrAppend(&out, Sv(std::string_view(buffer).substr(pos, m - pos)), step.content);
        pos = m + step.pattern.size();
      }
      // Hold the longest tail that could still grow into a match.
      const std::string_view tail = std::string_view(buffer).substr(pos);
      size_t hold = std::min(tail.size(), step.pattern.size() - 1);
      while (hold > 0 && tail.substr(tail.size() - hold) != step.pattern.substr(0, hold)) --hold;
      out.append(tail.substr(0, tail.size() - hold));
      state.held.assign(tail.substr(tail.size() - hold));
      return out;
    }
    case Kind::kMetaspace:
      // After a join the whole text is HF's token 0.
      ForEachChar(text, [&](char32_t cp, std::string_view bytes) {
        if (cp != step.character) {
          out.append(bytes);
        } else if (!step.drop_first) {
          out.push_back(' ');
        }
      });
      return out;
    case Kind::kFuse:
    case Kind::kByteFallback:
    case Kind::kByteLevel:
      break;
  }
  return std::string(text);
}

std::string DecoderPipeline::State::FlushStringStep(size_t i) {
  StringStepState& state = string_states_[i];
  // Strip: held characters are trailing content characters and are dropped. Replace: a
  // held partial match can no longer complete and is kept.
  std::string held = pipeline_->string_steps_[i].kind == Kind::kReplace ? state.held : "";
  state.held.clear();
  state.held_count = 0;
  return held;
}

}  // namespace scd::tokenizer_internal
