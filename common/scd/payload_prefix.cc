// See payload_prefix.h.
#include "common/scd/payload_prefix.h"

#include "absl/strings/str_cat.h"

namespace scd {

absl::StatusOr<Payload> PayloadPrefix(const Payload& payload, int num_tokens) {
  const int total = static_cast<int>(payload.token_ids.size());
  if (num_tokens < 1 || num_tokens > total) {
    return absl::InvalidArgumentError(absl::StrCat("payload prefix of ", num_tokens,
                                                   " tokens requested from a payload of ", total));
  }
  Payload out;
  out.mode = payload.mode;
  out.num_layers = payload.num_layers;
  out.start_position = payload.start_position;
  out.rung = payload.rung;
  out.pair_digest = payload.pair_digest;
  out.on_basis = payload.on_basis;
  out.token_ids.assign(payload.token_ids.begin(), payload.token_ids.begin() + num_tokens);
  if (num_tokens == total) {
    out.blocks = payload.blocks;
    return out;
  }
  out.blocks.reserve(payload.blocks.size());
  for (const PayloadBlock& b : payload.blocks) {
    if (static_cast<int>(b.rows) != total) {
      return absl::InvalidArgumentError(absl::StrCat("payload block at layer ", b.layer, " has ",
                                                     b.rows, " rows for ", total, " tokens"));
    }
    absl::StatusOr<std::vector<float>> x = b.ToFloats();
    if (!x.ok()) return x.status();
    out.blocks.push_back(MakeBlock(b.kind, b.encoding, b.layer, x->data(), num_tokens,
                                   static_cast<int>(b.cols), b.group));
  }
  return out;
}

}  // namespace scd
