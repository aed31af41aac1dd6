// ChooseMode: `mode: auto`'s choice of how one request's context travels to its decode daemon.
// Every candidate (oracle, raw, quant8, quant4, recompute, and each rung of the artifact's
// rate ladder; common/scd/rate_ladder.h) gets a predicted time to first token from the costs
// of its stages, and the request takes the fastest of those that keep the quality floor.
//
// The prediction, for a context of C tokens of which the producer's prefix cache holds H,
// followed by S tokens the decode daemon prefills itself:
//   oracle:  transfer(4·C bytes) + decode wait + rebuild_oracle(C) + consumer prefill(S)
//   others:  producer wait + producer prefill(C − H) + encode(C − H) + transfer(b·C bytes)
//            + decode wait + rebuild(C) + consumer prefill(S)
// where b is the candidate's payload bytes per token (calibration's record); the oracle's
// rebuild is the consumer's prefill of the context. Each stage's cost comes from StageCosts:
// fixed rates here (StageRates), or the live fits of mode_cost_model.h; encode and rebuild are
// per mode, whose costs differ most (a recompute rebuild is a prefill of its block, an scd
// rebuild runs the PATCH aligners). The stage costs common to all candidates (the first decode
// step, the response's way back) are left out: they do not change the order.
//
// The floor: a candidate is admissible when its calibrated top-1 agreement with the oracle is
// at least `quality_floor`; the oracle (agreement 1 by definition) always is.
#ifndef SCD_COMMON_SERVING_MODE_CHOOSER_H_
#define SCD_COMMON_SERVING_MODE_CHOOSER_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/scd/rate_ladder.h"
#include "common/scd/wire_format.h"

namespace scd {

struct ModeCandidate {
  CodecMode mode = CodecMode::kOracle;
  int rung = 0;                // scd and scd-reuse: the rate ladder's rung
  double top1 = 1;             // calibrated top-1 agreement with the oracle
  double bytes_per_token = 4;  // payload bytes per context token
};

// The candidates of an artifact's quality record (oracle always first, with its ids' 4 bytes a
// token when the record lacks it), in the record's order.
std::vector<ModeCandidate> CandidatesFromQuality(const std::vector<QualityRecord>& quality);

// Seconds each stage takes at a request's size.
class StageCosts {
 public:
  virtual ~StageCosts() = default;
  virtual double ProducerPrefill(int tokens) const = 0;
  virtual double Encode(CodecMode mode, int tokens) const = 0;
  virtual double Transfer(double bytes) const = 0;
  virtual double Rebuild(CodecMode mode, int tokens) const = 0;
  virtual double ConsumerPrefill(int tokens) const = 0;
};

// Fixed seconds per token of each stage, and the link's bytes per second.
struct StageRates : StageCosts {
  double producer_prefill = 0;          // the base model's prefill
  double consumer_prefill = 0;          // the decode daemon's own prefill
  std::map<CodecMode, double> encode;   // producer codec; a mode without an entry costs 0
  std::map<CodecMode, double> rebuild;  // consumer codec; likewise, but the oracle's is
                                        // consumer_prefill without one
  double link_bytes_per_second = 0;     // to the decode daemon; 0: unmeasured, transfers free

  double ProducerPrefill(int tokens) const override;
  double Encode(CodecMode mode, int tokens) const override;
  double Transfer(double bytes) const override;
  double Rebuild(CodecMode mode, int tokens) const override;
  double ConsumerPrefill(int tokens) const override;
};

struct RequestShape {
  int context_tokens = 0;            // C: what the payload carries
  int cached_tokens = 0;             // H ≤ C: the producer's prefix-cache hit
  int suffix_tokens = 0;             // S: prefilled by the decode daemon after the payload
  double producer_wait_seconds = 0;  // the queue before the base model
  double decode_wait_seconds = 0;    // the queue before a decode slot
  // Later requests expected to reuse this context from the prefix cache (0: none, or no
  // cache). A cold candidate's payload is cached for them: see ChooseMode.
  double future_reuses = 0;
};

// The predicted time to first token of `c` (see above), in seconds.
double PredictTtftSeconds(const ModeCandidate& c, const StageCosts& costs,
                          const RequestShape& shape);

inline constexpr double kTimeToleranceShare = 0.03;
inline constexpr double kTimeToleranceSeconds = 0.0005;

struct ModeChoice {
  ModeCandidate chosen;
  double predicted_seconds = 0;
  // Every candidate's prediction, in the candidates' order; negative for one below the floor.
  std::vector<double> predictions;
};

// The admissible candidate with the lowest prediction, except that quality is not given up for
// nothing: of the admissible candidates within kTimeTolerance of the lowest (below what a
// prediction can tell apart: 3% of the lowest one's own stages, its encode, transfer and
// rebuild, plus half a millisecond; not of its whole prediction, whose waits and prefills the
// candidates share, and which on a long cold context would hide their differences), the one of
// highest agreement, then lowest prediction, then smallest payload. The oracle is added when
// `candidates` lacks it. INVALID_ARGUMENT for a floor outside [0, 1] or a shape with negative or
// inconsistent token counts.
//
// With future_reuses R > 0, a candidate whose payload is not cached yet is weighed by its
// prediction less R × what each reuse saves once it is cached: what a reuse costs without it
// (the fastest of the oracle and the admissible candidates already cached) less the
// candidate's own prediction with the context cached. The first question about a context so
// pays for the payload its next questions reuse, and later ones keep to what is cached. The
// prediction reported (ModeChoice) is this request's own.
absl::StatusOr<ModeChoice> ChooseMode(const std::vector<ModeCandidate>& candidates,
                                      double quality_floor, const StageCosts& costs,
                                      const RequestShape& shape);
// The same where the shape depends on the candidate (its own prefix-cache hit, say).
using ShapeFn = std::function<RequestShape(const ModeCandidate&)>;
absl::StatusOr<ModeChoice> ChooseMode(const std::vector<ModeCandidate>& candidates,
                                      double quality_floor, const StageCosts& costs,
                                      const ShapeFn& shape_of);

// "scd r12/18 k1" for an scd candidate (its rung named by `ladder`), the mode's name otherwise.
std::string CandidateName(const ModeCandidate& c, const std::vector<Rung>& ladder);

}  // namespace scd

#endif  // SCD_COMMON_SERVING_MODE_CHOOSER_H_
