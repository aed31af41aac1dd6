// Quality metrics for the offline evaluation:
//   - question answering: SQuAD-style answer normalisation (Rajpurkar et al., 2016, the
//     official evaluate-v2.0 script: lowercase, drop ASCII punctuation, drop the articles
//     a/an/the, collapse whitespace), exact match, and token F1 (bag-of-tokens precision and
//     recall against the reference);
//   - language modelling: per-token NLL from logits, summed NLL to perplexity exp(NLL / n);
//   - state-transfer fidelity: next-token KL(P_ref || P_cand) between the softmaxes of two
//     logit vectors, KL = sum_i p_i (log p_i - log q_i), and top-1 (argmax) agreement.
// Softmaxes are computed in double with the max subtracted, so large logits do not overflow.
#ifndef SCD_COMMON_EVAL_METRICS_H_
#define SCD_COMMON_EVAL_METRICS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace scd::eval {

// ---- Answers ---------------------------------------------------------------------------

std::string NormalizeAnswer(std::string_view text);
// Whitespace tokens of the normalised answer.
std::vector<std::string> AnswerTokens(std::string_view text);

// 1 when the normalised strings are equal, else 0.
double ExactMatch(std::string_view prediction, std::string_view reference);
// Token F1 after normalisation. When either side has no tokens, 1 if both are empty, else 0.
double TokenF1(std::string_view prediction, std::string_view reference);

struct QaScore {
  double em = 0;
  double f1 = 0;
};
QaScore ScoreAnswer(std::string_view prediction, std::string_view reference);

// ---- Aggregation -----------------------------------------------------------------------

// Running mean (count, sum); mean() of nothing is 0.
class MeanAccumulator {
 public:
  void Add(double value) {
    sum_ += value;
    ++count_;
  }
  int64_t count() const { return count_; }
  double sum() const { return sum_; }
  double mean() const { return count_ == 0 ? 0.0 : sum_ / count_; }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

struct QaAggregate {
  MeanAccumulator em, f1;
  void Add(const QaScore& score) {
    em.Add(score.em);
    f1.Add(score.f1);
  }
};

// ---- Language modelling ----------------------------------------------------------------

// log softmax(logits), in double.
std::vector<double> LogSoftmax(absl::Span<const float> logits);

// -log softmax(logits)[target]. InvalidArgument when target is outside the vocabulary.
absl::StatusOr<double> TokenNll(absl::Span<const float> logits, int32_t target);

// Sum of TokenNll over rows: `logits` is [targets.size(), vocab] row-major and row i
// predicts targets[i].
absl::StatusOr<double> SumNll(absl::Span<const float> logits, int vocab,
                              absl::Span<const int32_t> targets);

// exp(total_nll / num_tokens). InvalidArgument when num_tokens <= 0.
absl::StatusOr<double> PerplexityFromNll(double total_nll, int64_t num_tokens);

// ---- Next-token distribution agreement -------------------------------------------------

// KL(softmax(reference) || softmax(candidate)) in nats, >= 0. InvalidArgument when the
// vectors are empty or differ in length.
absl::StatusOr<double> NextTokenKl(absl::Span<const float> reference,
                                   absl::Span<const float> candidate);

// Whether both vectors have the same argmax (lowest index on ties, as the greedy sampler).
absl::StatusOr<bool> Top1Agrees(absl::Span<const float> reference,
                                absl::Span<const float> candidate);

// Mean KL and top-1 agreement over the rows of two [rows, vocab] logit matrices.
struct LogitAgreement {
  double mean_kl = 0;
  double top1_agreement = 0;  // fraction of rows whose argmax agrees
  int64_t rows = 0;
};
absl::StatusOr<LogitAgreement> CompareLogitRows(absl::Span<const float> reference,
                                                absl::Span<const float> candidate, int vocab);

}  // namespace scd::eval

#endif  // SCD_COMMON_EVAL_METRICS_H_
