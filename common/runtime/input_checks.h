// Input checks every Backend applies before touching a sequence, so that all backends refuse
// bad input with the same wording. Header-only: kernels/cuda links against it without a
// dependency cycle on scd_runtime.
#ifndef SCD_COMMON_RUNTIME_INPUT_CHECKS_H_
#define SCD_COMMON_RUNTIME_INPUT_CHECKS_H_

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/runtime/backend.h"

namespace scd {

// INVALID_ARGUMENT for ids outside [0, vocab_size).
inline absl::Status CheckTokenIds(const ModelConfig& config, absl::Span<const int32_t> tokens) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= config.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("token ", tokens[i], " at index ", i,
                                                     " is outside the vocabulary [0, ",
                                                     config.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless a decode batch (Decode, DecodeSample) has sequences, one token each.
inline absl::Status CheckDecodeBatch(absl::Span<Sequence* const> seqs,
                                     absl::Span<const int32_t> tokens) {
  if (seqs.empty() || tokens.size() != seqs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode batch has ", seqs.size(),
                                                   " sequences and ", tokens.size(), " tokens"));
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless `kv` holds num_tokens >= 1 rows of kv_dim for every layer.
inline absl::Status CheckExternalKv(const ModelConfig& c, const ExternalKv& kv) {
  const int t = kv.num_tokens;
  if (t <= 0) return absl::InvalidArgumentError("external KV must hold at least one token");
  if (static_cast<int>(kv.k_pre_rope.size()) != c.num_layers ||
      static_cast<int>(kv.v.size()) != c.num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("external KV has ", kv.k_pre_rope.size(), "/",
                                                   kv.v.size(), " layers, model has ",
                                                   c.num_layers));
  }
  const size_t want = static_cast<size_t>(t) * c.kv_dim();
  for (int l = 0; l < c.num_layers; ++l) {
    if (kv.k_pre_rope[l].size() != want || kv.v[l].size() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "external KV layer ", l, " holds ", kv.k_pre_rope[l].size(), "/", kv.v[l].size(),
          " floats, expected ", want, " (", t, " tokens x kv_dim ", c.kv_dim(), ")"));
    }
  }
  return absl::OkStatus();
}

// INVALID_ARGUMENT unless `external` has as many positions and attentions as tokens, every
// token in the vocabulary and no attention null; OUT_OF_RANGE for a position outside
// [0, max_position_embeddings).
inline absl::Status CheckExternalRows(const ModelConfig& c, const ExternalRows& external) {
  const size_t n = external.tokens.size();
  if (external.positions.size() != n || external.attention.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("external decode rows: ", n, " tokens, ",
                                                   external.positions.size(), " positions and ",
                                                   external.attention.size(), " attentions"));
  }
  if (absl::Status st = CheckTokenIds(c, external.tokens); !st.ok()) return st;
  for (size_t i = 0; i < n; ++i) {
    if (external.positions[i] < 0 || external.positions[i] >= c.max_position_embeddings) {
      return absl::OutOfRangeError(absl::StrCat(
          "position ", external.positions[i], " is outside [0, ", c.max_position_embeddings, ")"));
    }
    if (external.attention[i] == nullptr) {
      return absl::InvalidArgumentError("external decode rows: null attention");
    }
  }
  return absl::OkStatus();
}

// A decode step's inputs (DecodeMixed): one token per sequence, every token in the vocabulary,
// and `external` as CheckExternalRows wants it. The sequences themselves are the backend's to
// check.
inline absl::Status CheckDecodeRows(const ModelConfig& c, absl::Span<Sequence* const> seqs,
                                    absl::Span<const int32_t> tokens,
                                    const ExternalRows& external) {
  if (tokens.size() != seqs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("decode batch has ", seqs.size(),
                                                   " sequences and ", tokens.size(), " tokens"));
  }
  if (absl::Status st = CheckTokenIds(c, tokens); !st.ok()) return st;
  return CheckExternalRows(c, external);
}

}  // namespace scd

#endif  // SCD_COMMON_RUNTIME_INPUT_CHECKS_H_
