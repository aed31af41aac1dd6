// The load driver: dispatch, closed-loop workers, the monitor thread (see runner.h).
#include "common/tools/loadgen/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/proc_status.h"
#include "common/base/random.h"
#include "common/tools/loadgen/arrivals.h"
#include "common/tools/loadgen/elastic_thread_pool.h"
#include "common/tools/loadgen/stats.h"

namespace scd::loadgen {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::duration;

Clock::time_point At(Clock::time_point origin, double seconds) {
  return origin + std::chrono::duration_cast<Clock::duration>(duration<double>(seconds));
}

double Since(Clock::time_point origin) { return duration<double>(Clock::now() - origin).count(); }

bool Stopped(const std::atomic<bool>* stop) { return stop != nullptr && stop->load(); }

// Sleeps until `when`, waking every 50 ms to look at *stop. False when stopped.
bool SleepUntil(Clock::time_point when, const std::atomic<bool>* stop) {
  while (true) {
    if (Stopped(stop)) return false;
    const Clock::time_point now = Clock::now();
    if (now >= when) return true;
    std::this_thread::sleep_until(std::min(when, now + std::chrono::milliseconds(50)));
  }
}

std::string UtcNow() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// Prompt indices in order, cycling; with shuffle, a fresh seeded permutation every pass.
class PromptSequence {
 public:
  PromptSequence(int size, bool shuffle, uint64_t seed)
      : order_(size), shuffle_(shuffle), rng_(seed ^ 0x73687566666c65ULL) {
    for (int i = 0; i < size; ++i) order_[i] = i;
    Reshuffle();
  }
  int Next() {
    if (pos_ == order_.size()) {
      pos_ = 0;
      Reshuffle();
    }
    return order_[pos_++];
  }

 private:
  void Reshuffle() {
    if (!shuffle_) return;
    for (size_t i = order_.size(); i > 1; --i) {
      std::swap(order_[i - 1], order_[rng_.NextBelow(static_cast<uint32_t>(i))]);
    }
  }
  std::vector<int> order_;
  size_t pos_ = 0;
  bool shuffle_;
  SplitMix64 rng_;
};

// One phase (warm-up or measured): its clock, its records and the live counters.
class Phase {
 public:
  Phase(const LoadOptions& options, const std::vector<Prompt>& prompts,
        const std::vector<std::string>& bodies, bool warmup)
      : options_(options), prompts_(prompts), bodies_(bodies), warmup_(warmup) {}

  void Begin() { origin_ = Clock::now(); }
  Clock::time_point origin() const { return origin_; }

  // Counts one request as issued and returns its index.
  int64_t Issue() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_flight_;
    return issued_++;
  }

  // Sends request `index` (already issued) and records its outcome.
  void Execute(int64_t index, int prompt_index, std::optional<double> scheduled_s) {
    RequestRecord r;
    r.index = index;
    r.warmup = warmup_;
    r.prompt_index = prompt_index;
    r.group = prompts_[prompt_index].group;
    ClientOptions client = options_.client;
    const size_t turn = static_cast<size_t>(index) % (1 + options_.more_targets.size());
    if (turn > 0) client.target = options_.more_targets[turn - 1];
    SendStreamingRequest(client, options_.body.api, bodies_[prompt_index], origin_, r);
    r.scheduled_s = scheduled_s.value_or(r.start_s);
    std::lock_guard<std::mutex> lock(mutex_);
    --in_flight_;
    ++completed_;
    max_lag_s_ = std::max(max_lag_s_, r.lag_s());
    if (r.ok()) {
      ++ok_;
      output_tokens_ += r.output_tokens();
      if (r.has_content()) ttft_.push_back(r.ttft_s());
    } else {
      ++errors_;
    }
    records_.push_back(std::move(r));
  }

  int64_t issued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_;
  }
  int64_t in_flight() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return in_flight_;
  }

  Progress Snapshot() const {
    Progress p;
    std::vector<double> ttft;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      p.issued = issued_;
      p.completed = completed_;
      p.ok = ok_;
      p.errors = errors_;
      p.in_flight = in_flight_;
      p.output_tokens = output_tokens_;
      p.max_lag_s = max_lag_s_;
      ttft = ttft_;
    }
    p.warmup = warmup_;
    p.elapsed_s = Since(origin_);
    const Distribution d = Summarize(std::move(ttft));
    p.ttft_count = d.count;
    p.ttft_p50_s = d.p50;
    p.ttft_p99_s = d.p99;
    return p;
  }

  // The records in issue order, after checking that every issued index appears exactly once.
  absl::StatusOr<std::vector<RequestRecord>> TakeRecords() {
    std::lock_guard<std::mutex> lock(mutex_);
    std::sort(records_.begin(), records_.end(),
              [](const RequestRecord& a, const RequestRecord& b) { return a.index < b.index; });
    if (static_cast<int64_t>(records_.size()) != issued_) {
      return absl::InternalError(absl::StrCat("issued ", issued_, " requests but recorded ",
                                              records_.size(), " outcomes"));
    }
    for (size_t i = 0; i < records_.size(); ++i) {
      if (records_[i].index != static_cast<int64_t>(i)) {
        return absl::InternalError(absl::StrCat("request ", i, " was not recorded exactly once"));
      }
    }
    return std::move(records_);
  }

 private:
  const LoadOptions& options_;
  const std::vector<Prompt>& prompts_;
  const std::vector<std::string>& bodies_;
  const bool warmup_;
  Clock::time_point origin_ = Clock::now();

  mutable std::mutex mutex_;
  int64_t issued_ = 0, completed_ = 0, ok_ = 0, errors_ = 0, in_flight_ = 0;
  int64_t output_tokens_ = 0;
  double max_lag_s_ = 0;
  std::vector<double> ttft_;
  std::vector<RequestRecord> records_;
};

// Closed loop: `workers` threads, each claiming the next request until `may_issue` says no.
void RunClosedLoop(Phase& phase, int workers, PromptSequence& sequence, std::mutex& sequence_mutex,
                   const std::function<bool(int64_t issued)>& may_issue) {
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      while (true) {
        int64_t index = 0;
        int prompt = 0;
        {
          std::lock_guard<std::mutex> lock(sequence_mutex);
          if (!may_issue(phase.issued())) return;
          index = phase.Issue();
          prompt = sequence.Next();
        }
        phase.Execute(index, prompt, std::nullopt);
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// Reports progress and samples RSS for one phase at a time, until Finish().
class Monitor {
 public:
  Monitor(const LoadOptions& options, const std::function<void(const Progress&)>& on_progress)
      : options_(options), on_progress_(on_progress) {}
  ~Monitor() { Finish(); }

  // `target_requests` / `target_duration_s` (0: none) are shown on the progress line.
  void Watch(const Phase* phase, int64_t target_requests, double target_duration_s,
             bool sample_rss) {
    Finish();
    finished_ = false;
    thread_ = std::thread([=] { Loop(phase, target_requests, target_duration_s, sample_rss); });
  }
  void Finish() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      finished_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::vector<RssSample> TakeRss() { return std::move(rss_); }

 private:
  void Loop(const Phase* phase, int64_t target_requests, double target_duration_s,
            bool sample_rss) {
    auto report = [&] {
      Progress p = phase->Snapshot();
      p.target_requests = target_requests;
      p.target_duration_s = target_duration_s;
      on_progress_(p);
    };
    constexpr double kNever = 1e300;
    double next_progress = on_progress_ ? options_.progress_period_s : kNever;
    double next_rss = sample_rss ? 0 : kNever;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!finished_) {
      const double now = Since(phase->origin());
      if (now >= next_rss) {
        lock.unlock();
        Sample(now);
        lock.lock();
        next_rss += options_.interval_s;
        continue;
      }
      if (now >= next_progress) {
        lock.unlock();
        report();
        lock.lock();
        next_progress = now + options_.progress_period_s;
        continue;
      }
      const double next = std::min({next_rss, next_progress, now + 0.5});
      wake_.wait_until(lock, At(phase->origin(), next), [this] { return finished_; });
    }
    lock.unlock();
    if (sample_rss) Sample(Since(phase->origin()));  // the state at the end
    if (on_progress_) report();
  }
  void Sample(double t_s) {
    RssSample s;
    s.t_s = t_s;
    for (int pid : options_.rss_pids) s.kib.push_back(ReadRssKib(pid));
    s.client_kib = ReadRssKib(0);
    rss_.push_back(std::move(s));
  }

  const LoadOptions& options_;
  const std::function<void(const Progress&)>& on_progress_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool finished_ = true;
  std::thread thread_;
  std::vector<RssSample> rss_;
};

}  // namespace

std::string FormatProgress(const Progress& p) {
  std::string line;
  if (p.target_duration_s > 0) {
    line = absl::StrFormat("[%7.1fs/%.0fs]", p.elapsed_s, p.target_duration_s);
  } else {
    line = absl::StrFormat("[%7.1fs]", p.elapsed_s);
  }
  if (p.warmup) line += " warm-up";
  absl::StrAppend(&line, " issued ", p.issued);
  if (p.target_requests > 0) absl::StrAppend(&line, "/", p.target_requests);
  absl::StrAppend(&line, " done ", p.completed, " (ok ", p.ok, ", err ", p.errors, ") in-flight ",
                  p.in_flight);
  if (p.elapsed_s > 0) {
    absl::StrAppendFormat(&line, " | %.1f req/s %.0f tok/s", p.ok / p.elapsed_s,
                          p.output_tokens / p.elapsed_s);
  }
  if (p.ttft_count > 0) {
    absl::StrAppendFormat(&line, " | TTFT p50 %.0f ms p99 %.0f ms", p.ttft_p50_s * 1e3,
                          p.ttft_p99_s * 1e3);
  }
  if (p.max_lag_s > 0.01) absl::StrAppendFormat(&line, " | lag %.0f ms", p.max_lag_s * 1e3);
  return line;
}

int64_t ReadRssKib(int pid) { return ProcStatusKib(pid, "VmRSS"); }

LoadOptions GreedyCompletionLoad(int http_port, const std::string& model, int max_tokens) {
  LoadOptions load;
  load.client.target.base = absl::StrCat("http://127.0.0.1:", http_port);
  load.client.timeout_s = 120;
  load.body.api = Api::kCompletions;
  load.body.model = model;
  load.body.max_tokens = max_tokens;
  load.body.extra_body = {{"temperature", 0}};
  load.progress_period_s = 10;
  load.seed = 1;
  return load;
}

absl::Status ValidateLoadOptions(const LoadOptions& o) {
  auto bad = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  const bool open = o.rate > 0;
  const bool closed = o.concurrency > 0;
  if (open == closed) return bad("give exactly one of --rate R (> 0) or --concurrency C (> 0)");
  if (o.rate < 0 || !std::isfinite(o.rate)) return bad("--rate must be a positive number");
  if (o.concurrency < 0 || o.concurrency > 100000) {
    return bad("--concurrency must be in [1, 100000]");
  }
  if (o.requests < 0) return bad("--requests must be >= 0");
  if (o.duration_s < 0 || !std::isfinite(o.duration_s)) return bad("--duration must be >= 0");
  if (o.requests == 0 && o.duration_s == 0) {
    return bad("give --requests N and/or --duration SECONDS (the run needs an end)");
  }
  if (o.warmup < 0) return bad("--warmup must be >= 0");
  if (o.max_in_flight < 1) return bad("--max-in-flight must be >= 1");
  if (!(o.interval_s > 0)) return bad("--interval must be > 0");
  if (!(o.progress_period_s > 0)) return bad("progress period must be > 0");
  if (!(o.client.timeout_s > 0)) return bad("--timeout must be > 0");
  if (!(o.client.connect_timeout_s > 0)) return bad("connect timeout must be > 0");
  if (o.body.model.empty()) return bad("--model is empty");
  if (o.body.max_tokens < 1) return bad("--max-tokens must be >= 1");
  if (!o.body.extra_body.is_object()) return bad("--extra-body must be a JSON object");
  for (int pid : o.rss_pids) {
    if (pid <= 0) return bad("--rss-pid values must be positive process ids");
  }
  if (!o.rss_labels.empty() && o.rss_labels.size() != o.rss_pids.size()) {
    return bad("RSS labels must name every RSS pid, one each");
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunLoad(const LoadOptions& options, const std::vector<Prompt>& prompts,
                                  const std::function<void(const Progress&)>& on_progress) {
  if (absl::Status s = ValidateLoadOptions(options); !s.ok()) return s;
  if (prompts.empty()) return absl::InvalidArgumentError("no prompts");
  if (absl::Status s = CheckPromptsForApi(prompts, options.body.api); !s.ok()) return s;
  std::vector<std::string> bodies;
  bodies.reserve(prompts.size());
  for (const Prompt& p : prompts) bodies.push_back(RequestBody(p, options.body));

  RunResult result;
  PromptSequence sequence(static_cast<int>(prompts.size()), options.shuffle, options.seed);
  std::mutex sequence_mutex;
  Monitor monitor(options, on_progress);

  if (options.warmup > 0) {
    Phase warmup(options, prompts, bodies, /*warmup=*/true);
    warmup.Begin();
    monitor.Watch(&warmup, options.warmup, 0, /*sample_rss=*/false);
    const int workers = std::min(options.warmup, options.concurrency > 0 ? options.concurrency : 4);
    RunClosedLoop(warmup, workers, sequence, sequence_mutex, [&](int64_t issued) {
      return issued < options.warmup && !Stopped(options.stop);
    });
    monitor.Finish();
    absl::StatusOr<std::vector<RequestRecord>> records = warmup.TakeRecords();
    if (!records.ok()) return records.status();
    result.warmup = std::move(*records);
  }

  Phase phase(options, prompts, bodies, /*warmup=*/false);
  result.started_at = UtcNow();
  phase.Begin();
  monitor.Watch(&phase, options.requests, options.duration_s, /*sample_rss=*/true);
  const Clock::time_point origin = phase.origin();
  const Clock::time_point end =
      options.duration_s > 0 ? At(origin, options.duration_s) : Clock::time_point::max();
  auto may_issue = [&](int64_t issued) {
    if (options.requests > 0 && issued >= options.requests) return false;
    return Clock::now() < end && !Stopped(options.stop);
  };

  if (options.concurrency > 0) {
    RunClosedLoop(phase, options.concurrency, sequence, sequence_mutex, may_issue);
    result.peak_in_flight = options.concurrency;
  } else {
    ElasticThreadPool pool;
    PoissonArrivals arrivals(options.rate, options.seed);
    while (true) {
      const int64_t issued = phase.issued();
      if (options.requests > 0 && issued >= options.requests) break;
      const double t = arrivals.Next();
      if (options.duration_s > 0 && t >= options.duration_s) break;
      if (!SleepUntil(At(origin, t), options.stop)) break;
      // The safety valve: wait (and let the lag show) rather than start unbounded threads.
      while (phase.in_flight() >= options.max_in_flight && !Stopped(options.stop)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (Stopped(options.stop)) break;
      const int64_t index = phase.Issue();
      const int prompt = sequence.Next();
      pool.Submit([&phase, index, prompt, t] { phase.Execute(index, prompt, t); });
    }
    pool.Join();
    result.peak_in_flight = pool.peak_outstanding();
    result.threads_started = pool.threads_started();
  }
  result.stopped = Stopped(options.stop);
  monitor.Finish();
  result.rss = monitor.TakeRss();
  absl::StatusOr<std::vector<RequestRecord>> records = phase.TakeRecords();
  if (!records.ok()) return records.status();
  result.records = std::move(*records);
  for (const RequestRecord& r : result.records) {
    result.issue_span_s = std::max(result.issue_span_s, r.start_s);
  }
  return result;
}

}  // namespace scd::loadgen
