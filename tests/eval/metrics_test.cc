// Tests for answer normalisation, EM/F1, NLL/perplexity and next-token KL on hand-worked
// examples.
#include "common/eval/metrics.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

namespace scd::eval {
namespace {

TEST_CASE("answer normalisation follows SQuAD", "[cpu]") {
  CHECK(NormalizeAnswer("The Bathroom.") == "bathroom");
  CHECK(NormalizeAnswer("  a   kitchen, an office ") == "kitchen office");
  CHECK(NormalizeAnswer("theatre") == "theatre");  // articles only as whole words
  CHECK(NormalizeAnswer("don't") == "dont");
  CHECK(NormalizeAnswer("") == "");
  CHECK(AnswerTokens("the hall way") == std::vector<std::string>{"hall", "way"});
}

TEST_CASE("exact match and token F1", "[cpu]") {
  CHECK(ExactMatch("the bathroom", "bathroom") == 1.0);
  CHECK(TokenF1("the bathroom", "bathroom") == 1.0);
  CHECK(ExactMatch("Bathroom!", "bathroom") == 1.0);
  CHECK(ExactMatch("kitchen", "bathroom") == 0.0);
  CHECK(TokenF1("kitchen", "bathroom") == 0.0);
  // pred {in, kitchen}, ref {kitchen}: P = 1/2, R = 1, F1 = 2/3.
  CHECK(TokenF1("in the kitchen", "kitchen") == Approx(2.0 / 3.0));
  CHECK(ExactMatch("in the kitchen", "kitchen") == 0.0);
  // pred {red, ball}, ref {red, box, lid}: common 1, P = 1/2, R = 1/3, F1 = 0.4.
  CHECK(TokenF1("red ball", "red box lid") == Approx(0.4));
  // Multiset overlap: pred {a1, a1}, ref {a1}: common 1, P = 1/2, R = 1.
  CHECK(TokenF1("milk milk", "milk") == Approx(2.0 / 3.0));
  // Empty after normalisation.
  CHECK(TokenF1("the", "") == 1.0);
  CHECK(TokenF1("", "bathroom") == 0.0);
  const QaScore score = ScoreAnswer("in the kitchen", "kitchen");
  CHECK(score.em == 0.0);
  CHECK(score.f1 == Approx(2.0 / 3.0));
}

TEST_CASE("aggregation", "[cpu]") {
  MeanAccumulator empty;
  CHECK(empty.count() == 0);
  CHECK(empty.mean() == 0.0);
  QaAggregate agg;
  agg.Add(ScoreAnswer("bathroom", "bathroom"));
  agg.Add(ScoreAnswer("in the kitchen", "kitchen"));
  agg.Add(ScoreAnswer("garden", "office"));
  CHECK(agg.em.count() == 3);
  CHECK(agg.em.mean() == Approx(1.0 / 3.0));
  CHECK(agg.f1.sum() == Approx(1.0 + 2.0 / 3.0));
  CHECK(agg.f1.mean() == Approx((1.0 + 2.0 / 3.0) / 3.0));
}

TEST_CASE("NLL and perplexity", "[cpu]") {
  // Uniform over 4: NLL = log 4 for any target.
  const std::vector<float> uniform = {0, 0, 0, 0};
  CHECK(*TokenNll(uniform, 2) == Approx(std::log(4.0)));
  // logits {log 1, log 3}: p = {1/4, 3/4}.
  const std::vector<float> two = {0.0f, static_cast<float>(std::log(3.0))};
  CHECK(*TokenNll(two, 1) == Approx(-std::log(0.75)).epsilon(1e-6));
  CHECK(*TokenNll(two, 0) == Approx(std::log(4.0)).epsilon(1e-6));
  // Shift invariance and no overflow with huge logits.
  const std::vector<float> huge = {1000.0f, 1000.0f + static_cast<float>(std::log(3.0))};
  CHECK(*TokenNll(huge, 1) == Approx(-std::log(0.75)).epsilon(1e-4));
  CHECK(!TokenNll(two, 2).ok());
  CHECK(!TokenNll(two, -1).ok());

  const std::vector<float> rows = {0, 0, 0, 0, 0.0f, static_cast<float>(std::log(3.0)), 0, 0};
  // Row 0 uniform over 4 -> log 4; row 1 p(target 1) = 3/6.
  auto sum = SumNll(rows, 4, std::vector<int32_t>{3, 1});
  REQUIRE(sum.ok());
  CHECK(*sum == Approx(std::log(4.0) + std::log(2.0)).epsilon(1e-6));
  CHECK(!SumNll(rows, 4, std::vector<int32_t>{1}).ok());

  CHECK(*PerplexityFromNll(2 * std::log(4.0), 2) == Approx(4.0));
  CHECK(*PerplexityFromNll(0.0, 10) == Approx(1.0));
  CHECK(PerplexityFromNll(1.0, 0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("next-token KL and top-1 agreement", "[cpu]") {
  const std::vector<float> a = {1.5f, -0.25f, 3.0f, 0.0f};
  CHECK(*NextTokenKl(a, a) == 0.0);
  std::vector<float> shifted = a;
  for (float& v : shifted) v += 7.0f;  // softmax is shift-invariant
  CHECK(*NextTokenKl(a, shifted) == Approx(0.0).margin(1e-9));
  // P = {1/2, 1/2} (logits 0, 0), Q = {1/4, 3/4} (logits 0, log 3):
  // KL = 1/2 log(2) + 1/2 log(2/3) = 1/2 log(4/3).
  const std::vector<float> p = {0.0f, 0.0f};
  const std::vector<float> q = {0.0f, static_cast<float>(std::log(3.0))};
  CHECK(*NextTokenKl(p, q) == Approx(0.5 * std::log(4.0 / 3.0)).epsilon(1e-6));
  // The reverse direction differs: 1/4 log(1/2) + 3/4 log(3/2).
  CHECK(*NextTokenKl(q, p) == Approx(0.25 * std::log(0.5) + 0.75 * std::log(1.5)).epsilon(1e-6));
  CHECK(!NextTokenKl(p, a).ok());
  CHECK(!NextTokenKl({}, {}).ok());

  CHECK(*Top1Agrees(a, shifted));
  CHECK_FALSE(*Top1Agrees(p, q));
  CHECK(*Top1Agrees(p, p));  // ties pick the lowest index on both sides
  CHECK(!Top1Agrees(p, a).ok());

  std::vector<float> ref = p;
  ref.insert(ref.end(), q.begin(), q.end());
  std::vector<float> cand = q;
  cand.insert(cand.end(), q.begin(), q.end());
  auto agreement = CompareLogitRows(ref, cand, 2);
  REQUIRE(agreement.ok());
  CHECK(agreement->rows == 2);
  CHECK(agreement->mean_kl == Approx(0.25 * std::log(4.0 / 3.0)).epsilon(1e-6));
  CHECK(agreement->top1_agreement == Approx(0.5));
  CHECK(!CompareLogitRows(ref, cand, 3).ok());
}

}  // namespace
}  // namespace scd::eval
