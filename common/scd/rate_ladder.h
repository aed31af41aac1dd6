// The rate ladder of one calibration artifact: the payload sizes an `scd` payload can take with
// no recalibration, each a rung (r'_K, r'_V, k'), and calibration's record of what each rung,
// and each baseline mode, keeps of the oracle on held-back passages.
//
// Why it needs no recalibration: REUSE codes are nested (common/scd/reduced_rank.h), so the
// first r' code columns of a layer are its best rank-r' code, and the consumer decodes them
// with the first r' rows of the same decoder; PATCH layers were chosen greedily, so the first
// k' of the selection order are the best k'-layer patch budget, the other layers travelling as
// REUSE codes.
//
// Rung 0 is the artifact's own operating point (its ranks and patch budget): a payload without
// a rung (wire header field 0) carries it. Then every combination of REUSE ranks scaled by 1,
// 3/4, 1/2 and 1/4 (rounded up, at least 1) with patch budgets from the artifact's down to 0,
// largest ranks first and, within a rank, most patches first. `scd-reuse` payloads use a
// rung's ranks and no patches.
#ifndef SCD_COMMON_SCD_RATE_LADDER_H_
#define SCD_COMMON_SCD_RATE_LADDER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace scd {

struct ScdArtifact;

struct Rung {
  int rank_k = 0;        // REUSE code columns of keys, ≤ the artifact's rank_k
  int rank_v = 0;        // of values, ≤ rank_v
  int patch_layers = 0;  // the first patch_layers of the artifact's patch_order

  bool operator==(const Rung& o) const {
    return rank_k == o.rank_k && rank_v == o.rank_v && patch_layers == o.patch_layers;
  }
};

// The ladder of an artifact with these ranks and patch budget, rung 0 first (see above).
std::vector<Rung> RateLadder(int rank_k, int rank_v, int patch_budget);
std::vector<Rung> RateLadder(const ScdArtifact& artifact);

// "r16/24 k3": how logs, metrics and responses name a rung.
std::string RungName(const Rung& rung);

// What calibration measured of one way of sending a context, on its held-back passages: the
// consumer's next-token distributions after a rebuild from the payload against its own
// prefill of the same tokens (the oracle).
struct QualityRecord {
  std::string mode;            // CodecModeName: oracle, raw, quant8, quant4, recompute, scd
  int rung = 0;                // scd: the ladder rung; 0 otherwise
  double kl = 0;               // mean KL(oracle ‖ rebuilt)
  double top1 = 1;             // share of positions whose argmax is the oracle's
  double bytes_per_token = 0;  // serialized payload bytes per context token, all included

  bool operator==(const QualityRecord& o) const {
    return mode == o.mode && rung == o.rung && kl == o.kl && top1 == o.top1 &&
           bytes_per_token == o.bytes_per_token;
  }
};

// The record as a Markdown table, one row per entry: the mode (scd's rung by RungName from
// `ladder`), KL, top-1 agreement, bytes per token and their share of raw's (when raw has a
// record).
std::string QualityTableMarkdown(const std::vector<QualityRecord>& records,
                                 const std::vector<Rung>& ladder);

nlohmann::json QualityRecordsToJson(const std::vector<QualityRecord>& records);
// INVALID_ARGUMENT naming the entry when a field is missing or out of range.
absl::StatusOr<std::vector<QualityRecord>> QualityRecordsFromJson(const nlohmann::json& j);

}  // namespace scd

#endif  // SCD_COMMON_SCD_RATE_LADDER_H_
