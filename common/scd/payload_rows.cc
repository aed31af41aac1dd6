// See payload_rows.h.
#include "common/scd/payload_rows.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/scd/quantize.h"

namespace scd {

size_t PayloadRowGranularity(const Payload& payload) {
  const size_t total = payload.token_ids.size();
  size_t step = 1;
  for (const PayloadBlock& b : payload.blocks) {
    step = std::lcm(
        step, static_cast<size_t>(EncodedRowStep(b.encoding, static_cast<int>(b.cols), b.group)));
    if (step >= total) return std::max<size_t>(total, 1);
  }
  return step;
}

absl::StatusOr<Payload> PayloadRows(const Payload& payload, size_t begin, size_t end) {
  Payload out;
  SCD_RETURN_IF_ERROR(PayloadRowsInto(payload, begin, end, &out));
  return out;
}

absl::Status PayloadRowsInto(const Payload& payload, size_t begin, size_t end, Payload* out_ptr) {
  const size_t total = payload.token_ids.size();
  const size_t step = PayloadRowGranularity(payload);
  if (begin >= end || end > total || begin % step != 0 || (end % step != 0 && end != total)) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", begin, ", ", end, ") of a payload of ",
                                                   total, " tokens do not split at its step of ",
                                                   step, " rows"));
  }
  Payload& out = *out_ptr;
  out.mode = payload.mode;
  out.num_layers = payload.num_layers;
  out.start_position = payload.start_position + static_cast<uint32_t>(begin);
  out.rung = payload.rung;
  out.pair_digest = payload.pair_digest;
  out.on_basis = payload.on_basis;
  out.token_ids.assign(payload.token_ids.begin() + begin, payload.token_ids.begin() + end);
  out.blocks.resize(payload.blocks.size());
  for (size_t i = 0; i < payload.blocks.size(); ++i) {
    const PayloadBlock& b = payload.blocks[i];
    if (b.rows != total) {
      return absl::InvalidArgumentError(absl::StrCat("payload block at layer ", b.layer, " has ",
                                                     b.rows, " rows for ", total, " tokens"));
    }
    PayloadBlock& o = out.blocks[i];
    o.kind = b.kind;
    o.encoding = b.encoding;
    o.layer = b.layer;
    o.rows = static_cast<uint32_t>(end - begin);
    o.cols = b.cols;
    o.group = b.group;
    SCD_RETURN_IF_ERROR(SliceEncodedRows(b.encoding, b.data.data(), b.data.size(),
                                         static_cast<int>(b.rows), static_cast<int>(b.cols),
                                         b.group, static_cast<int>(begin), static_cast<int>(end),
                                         &o.data));
  }
  return absl::OkStatus();
}

}  // namespace scd
