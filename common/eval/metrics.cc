// Metric implementations (definitions in metrics.h). Normalisation mirrors SQuAD's
// evaluate-v2.0.py step for step: lower(), remove string.punctuation, remove \b(a|an|the)\b,
// then split/join on whitespace.
#include "common/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace scd::eval {
namespace {

bool IsArticle(absl::string_view word) { return word == "a" || word == "an" || word == "the"; }

int32_t ArgMax(absl::Span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

std::vector<std::string> AnswerTokens(std::string_view text) {
  std::string cleaned;
  cleaned.reserve(text.size());
  for (char c : text) {
    if (absl::ascii_ispunct(static_cast<unsigned char>(c))) continue;
    cleaned += absl::ascii_tolower(static_cast<unsigned char>(c));
  }
  std::vector<std::string> tokens;
  for (absl::string_view word :
       absl::StrSplit(cleaned, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty())) {
    if (!IsArticle(word)) tokens.emplace_back(word);
  }
  return tokens;
}

std::string NormalizeAnswer(std::string_view text) {
  return absl::StrJoin(AnswerTokens(text), " ");
}

double ExactMatch(std::string_view prediction, std::string_view reference) {
  return NormalizeAnswer(prediction) == NormalizeAnswer(reference) ? 1.0 : 0.0;
}

double TokenF1(std::string_view prediction, std::string_view reference) {
  const std::vector<std::string> pred = AnswerTokens(prediction);
  const std::vector<std::string> ref = AnswerTokens(reference);
  if (pred.empty() || ref.empty()) return pred.empty() && ref.empty() ? 1.0 : 0.0;
  std::map<std::string, int> ref_counts;
  for (const std::string& t : ref) ++ref_counts[t];
  int common = 0;
  for (const std::string& t : pred) {
    auto it = ref_counts.find(t);
    if (it != ref_counts.end() && it->second > 0) {
      --it->second;
      ++common;
    }
  }
  if (common == 0) return 0.0;
  const double precision = static_cast<double>(common) / pred.size();
  const double recall = static_cast<double>(common) / ref.size();
  return 2 * precision * recall / (precision + recall);
}

QaScore ScoreAnswer(std::string_view prediction, std::string_view reference) {
  return QaScore{ExactMatch(prediction, reference), TokenF1(prediction, reference)};
}

std::vector<double> LogSoftmax(absl::Span<const float> logits) {
  std::vector<double> out(logits.size());
  if (logits.empty()) return out;
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  const double log_z = max + std::log(sum);
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - log_z;
  return out;
}

absl::StatusOr<double> TokenNll(absl::Span<const float> logits, int32_t target) {
  if (target < 0 || static_cast<size_t>(target) >= logits.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("target ", target, " outside a vocabulary of ", logits.size()));
  }
  const double max = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
  return -(logits[target] - max - std::log(sum));
}

absl::StatusOr<double> SumNll(absl::Span<const float> logits, int vocab,
                              absl::Span<const int32_t> targets) {
  if (vocab <= 0 || logits.size() != targets.size() * static_cast<size_t>(vocab)) {
    return absl::InvalidArgumentError(absl::StrCat("SumNll: ", logits.size(), " logits for ",
                                                   targets.size(), " targets x vocab ", vocab));
  }
  double total = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    absl::StatusOr<double> nll = TokenNll(logits.subspan(i * vocab, vocab), targets[i]);
    if (!nll.ok()) return nll.status();
    total += *nll;
  }
  return total;
}

absl::StatusOr<double> PerplexityFromNll(double total_nll, int64_t num_tokens) {
  if (num_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("perplexity over ", num_tokens, " tokens"));
  }
  return std::exp(total_nll / static_cast<double>(num_tokens));
}

absl::StatusOr<double> NextTokenKl(absl::Span<const float> reference,
                                   absl::Span<const float> candidate) {
  if (reference.empty() || reference.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrCat("KL between logit vectors of size ",
                                                   reference.size(), " and ", candidate.size()));
  }
  const std::vector<double> log_p = LogSoftmax(reference);
  const std::vector<double> log_q = LogSoftmax(candidate);
  double kl = 0;
  for (size_t i = 0; i < log_p.size(); ++i) {
    const double p = std::exp(log_p[i]);
    if (p > 0) kl += p * (log_p[i] - log_q[i]);
  }
  return std::max(kl, 0.0);  // rounding can leave -1e-17 for identical inputs
}

absl::StatusOr<bool> Top1Agrees(absl::Span<const float> reference,
                                absl::Span<const float> candidate) {
  if (reference.empty() || reference.size() != candidate.size()) {
    return absl::InvalidArgumentError(absl::StrCat("top-1 between logit vectors of size ",
                                                   reference.size(), " and ", candidate.size()));
  }
  return ArgMax(reference) == ArgMax(candidate);
}

absl::StatusOr<LogitAgreement> CompareLogitRows(absl::Span<const float> reference,
                                                absl::Span<const float> candidate, int vocab) {
  if (vocab <= 0 || reference.size() != candidate.size() || reference.size() % vocab != 0) {
    return absl::InvalidArgumentError(absl::StrCat("CompareLogitRows: ", reference.size(), " and ",
                                                   candidate.size(), " logits with vocab ", vocab));
  }
  LogitAgreement out;
  out.rows = static_cast<int64_t>(reference.size() / vocab);
  if (out.rows == 0) return out;
  double kl_sum = 0;
  int64_t agree = 0;
  for (int64_t r = 0; r < out.rows; ++r) {
    auto ref = reference.subspan(r * vocab, vocab);
    auto cand = candidate.subspan(r * vocab, vocab);
    absl::StatusOr<double> kl = NextTokenKl(ref, cand);
    if (!kl.ok()) return kl.status();
    kl_sum += *kl;
    agree += ArgMax(ref) == ArgMax(cand);
  }
  out.mean_kl = kl_sum / out.rows;
  out.top1_agreement = static_cast<double>(agree) / out.rows;
  return out;
}

}  // namespace scd::eval
