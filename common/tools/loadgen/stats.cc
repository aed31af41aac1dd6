// Percentiles, run statistics, time series and drift (see stats.h for the definitions).
#include "common/tools/loadgen/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace scd::loadgen {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  q = std::clamp(q, 0.0, 100.0);
  const double h = (static_cast<double>(sorted.size()) - 1) * q / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

Distribution Summarize(std::vector<double> values) {
  Distribution d;
  if (values.empty()) return d;
  std::sort(values.begin(), values.end());
  d.count = static_cast<int64_t>(values.size());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(d.count);
  d.min = values.front();
  d.max = values.back();
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p99 = Percentile(values, 99);
  return d;
}

nlohmann::json DistributionJson(const Distribution& d, double scale) {
  auto value = [&](double v) {
    return d.count > 0 ? nlohmann::json(v * scale) : nlohmann::json(nullptr);
  };
  return nlohmann::json{{"count", d.count},    {"mean", value(d.mean)}, {"min", value(d.min)},
                        {"p50", value(d.p50)}, {"p90", value(d.p90)},   {"p99", value(d.p99)},
                        {"max", value(d.max)}};
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok() || !r.has_content()) return false;
  if (slo.ttft_s > 0 && r.ttft_s() > slo.ttft_s) return false;
  if (slo.itl_s > 0 && r.mean_itl_s() > slo.itl_s) return false;
  return true;
}

RunStats ComputeStats(const std::vector<RequestRecord>& records, const Slo& slo) {
  RunStats s;
  std::vector<double> ttft, itl, tpot, e2e, lag, shed_answer, retry_after;
  double first_start = std::numeric_limits<double>::infinity();
  double last_end = -std::numeric_limits<double>::infinity();
  for (const RequestRecord& r : records) {
    ++s.issued;
    ++s.outcomes[static_cast<int>(r.outcome)];
    if (r.outcome == Outcome::kHttpError) ++s.http_status[r.http_status];
    if (r.outcome == Outcome::kHttpError && r.http_status == 429) {
      ++s.shed;
      shed_answer.push_back(r.e2e_s());
      if (r.retry_after_s >= 0) retry_after.push_back(r.retry_after_s);
    }
    first_start = std::min(first_start, r.start_s);
    last_end = std::max(last_end, r.end_s);
    lag.push_back(std::max(0.0, r.lag_s()));
    if (!r.ok()) continue;
    e2e.push_back(r.e2e_s());
    if (r.has_content()) {
      ttft.push_back(r.ttft_s());
      for (size_t i = 1; i < r.chunk_times_s.size(); ++i) {
        itl.push_back(r.chunk_times_s[i] - r.chunk_times_s[i - 1]);
      }
    }
    const int64_t out = r.output_tokens();
    if (r.has_content() && out > 1) {
      tpot.push_back((r.e2e_s() - r.ttft_s()) / static_cast<double>(out - 1));
    }
    s.completion_tokens += out;
    if (r.prompt_tokens > 0) s.prompt_tokens += r.prompt_tokens;
    if (r.completion_tokens < 0) ++s.usage_missing;
    if (MeetsSlo(r, slo)) ++s.good;
  }
  s.ttft_s = Summarize(std::move(ttft));
  s.itl_s = Summarize(std::move(itl));
  s.tpot_s = Summarize(std::move(tpot));
  s.e2e_s = Summarize(std::move(e2e));
  s.lag_s = Summarize(std::move(lag));
  s.shed_answer_s = Summarize(std::move(shed_answer));
  s.retry_after_s = Summarize(std::move(retry_after));
  if (s.issued > 0) {
    s.duration_s = std::max(0.0, last_end - first_start);
    s.slo_attainment = static_cast<double>(s.good) / static_cast<double>(s.issued);
  }
  if (s.duration_s > 0) {
    s.request_rps = static_cast<double>(s.ok()) / s.duration_s;
    s.output_tokens_per_s = static_cast<double>(s.completion_tokens) / s.duration_s;
    s.total_tokens_per_s =
        static_cast<double>(s.completion_tokens + s.prompt_tokens) / s.duration_s;
    s.goodput_rps = static_cast<double>(s.good) / s.duration_s;
  }
  return s;
}

std::vector<IntervalStats> TimeSeries(const std::vector<RequestRecord>& records,
                                      double interval_s) {
  std::vector<IntervalStats> series;
  if (records.empty() || !(interval_s > 0)) return series;
  double last = 0;
  for (const RequestRecord& r : records) last = std::max({last, r.end_s, r.start_s});
  const size_t n = static_cast<size_t>(std::floor(last / interval_s)) + 1;
  series.resize(n);
  std::vector<std::vector<double>> ttft(n);
  for (size_t i = 0; i < n; ++i) {
    series[i].t_start_s = static_cast<double>(i) * interval_s;
    series[i].t_end_s = static_cast<double>(i + 1) * interval_s;
  }
  auto bucket = [&](double t) {
    return std::min(n - 1, static_cast<size_t>(std::max(0.0, std::floor(t / interval_s))));
  };
  for (const RequestRecord& r : records) {
    ++series[bucket(r.start_s)].issued;
    IntervalStats& done = series[bucket(r.end_s)];
    ++done.completed;
    if (r.ok()) {
      ++done.ok;
      done.output_tokens += r.output_tokens();
      if (r.has_content()) ttft[bucket(r.end_s)].push_back(r.ttft_s());
    } else {
      ++done.errors;
    }
  }
  for (size_t i = 0; i < n; ++i) series[i].ttft_s = Summarize(std::move(ttft[i]));
  return series;
}

std::optional<TtftDrift> ComputeTtftDrift(const std::vector<RequestRecord>& records,
                                          double window_s) {
  if (records.empty() || !(window_s > 0)) return std::nullopt;
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  for (const RequestRecord& r : records) {
    first = std::min(first, r.start_s);
    last = std::max(last, r.start_s);
  }
  TtftDrift drift;
  drift.window_s = std::min(window_s, (last - first) / 2);
  if (!(drift.window_s > 0)) return std::nullopt;
  std::vector<double> head, tail;
  for (const RequestRecord& r : records) {
    if (!r.ok() || !r.has_content()) continue;
    if (r.start_s < first + drift.window_s) head.push_back(r.ttft_s());
    if (r.start_s >= last - drift.window_s) tail.push_back(r.ttft_s());
  }
  if (head.empty() || tail.empty()) return std::nullopt;
  const Distribution h = Summarize(std::move(head));
  const Distribution t = Summarize(std::move(tail));
  drift.first_p99_s = h.p99;
  drift.last_p99_s = t.p99;
  drift.first_count = h.count;
  drift.last_count = t.count;
  drift.relative_change = h.p99 > 0 ? (t.p99 - h.p99) / h.p99 : 0;
  return drift;
}

}  // namespace scd::loadgen
