// See cold_start_bench.h.
#include "common/tools/bench/cold_start_bench.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/base/proc_status.h"
#include "common/base/status_macros.h"
#include "common/model/weights.h"
#include "common/runtime/cpu_backend.h"
#include "nlohmann/json.hpp"

namespace scd::bench {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A memory line of this process's /proc/self/status, in bytes; 0 where there is none.
size_t ProcStatusBytes(std::string_view field) {
  const int64_t kib = ProcStatusKib(0, field);
  return kib > 0 ? static_cast<size_t>(kib) * 1024 : 0;
}

int32_t Argmax(const std::vector<float>& logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

absl::StatusOr<ColdStartReport> RunColdStart(const ColdStartOptions& options) {
  if (options.prompt_tokens < 1 || options.decode_tokens < 1) {
    return absl::InvalidArgumentError("cold start needs at least one prompt and one decode token");
  }
  ColdStartReport r;
  r.dtype = options.dtype;
  r.start_rss_bytes = ProcStatusBytes("VmRSS");
  const auto start = std::chrono::steady_clock::now();
  SCD_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, LoadModel(options.model_dir));
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, CreateCpuBackend(model, options.dtype));
  r.load_seconds = SecondsSince(start);
  r.weight_bytes = CpuBackendWeightBytes(*backend);
  const ModelConfig& c = model->config;
  const int capacity = options.prompt_tokens + options.decode_tokens + 1;
  if (capacity > c.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("prompt + decode tokens (", capacity,
                                                   ") exceed the model's ",
                                                   c.max_position_embeddings, " positions"));
  }
  std::mt19937_64 rng(options.seed);
  std::vector<int32_t> prompt(options.prompt_tokens);
  for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % c.vocab_size);
  SCD_ASSIGN_OR_RETURN(std::unique_ptr<Sequence> seq, backend->NewSequence(capacity));
  PrefillResult prefill;
  SCD_RETURN_IF_ERROR(backend->Prefill(*seq, prompt, PrefillOptions{}, &prefill));
  r.tokens.push_back(Argmax(prefill.logits));
  r.ttft_seconds = SecondsSince(start);

  const auto decode_start = std::chrono::steady_clock::now();
  std::vector<float> logits;
  Sequence* seqs[] = {seq.get()};
  for (int i = 0; i < options.decode_tokens; ++i) {
    SCD_RETURN_IF_ERROR(backend->Decode(seqs, absl::MakeConstSpan(&r.tokens.back(), 1), &logits));
    r.tokens.push_back(Argmax(logits));
  }
  r.decode_tokens = options.decode_tokens;
  r.decode_tokens_per_s = options.decode_tokens / SecondsSince(decode_start);
  r.peak_rss_bytes = ProcStatusBytes("VmHWM");
  return r;
}

std::string ColdStartJson(const ColdStartReport& r) {
  nlohmann::json j;
  j["dtype"] = std::string(WeightDtypeName(r.dtype));
  j["load_seconds"] = r.load_seconds;
  j["ttft_seconds"] = r.ttft_seconds;
  j["decode_tokens_per_s"] = r.decode_tokens_per_s;
  j["decode_tokens"] = r.decode_tokens;
  j["start_rss_bytes"] = r.start_rss_bytes;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["weight_bytes"] = r.weight_bytes;
  j["tokens"] = r.tokens;
  return j.dump();
}

absl::StatusOr<ColdStartReport> ParseColdStartJson(const std::string& line) {
  try {
    const nlohmann::json j = nlohmann::json::parse(line);
    ColdStartReport r;
    SCD_ASSIGN_OR_RETURN(r.dtype, ParseWeightDtype(j.at("dtype").get<std::string>()));
    r.load_seconds = j.at("load_seconds").get<double>();
    r.ttft_seconds = j.at("ttft_seconds").get<double>();
    r.decode_tokens_per_s = j.at("decode_tokens_per_s").get<double>();
    r.decode_tokens = j.at("decode_tokens").get<int>();
    r.start_rss_bytes = j.at("start_rss_bytes").get<size_t>();
    r.peak_rss_bytes = j.at("peak_rss_bytes").get<size_t>();
    r.weight_bytes = j.at("weight_bytes").get<size_t>();
    r.tokens = j.at("tokens").get<std::vector<int32_t>>();
    return r;
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("cold-start child printed no report: ", e.what(),
                                            " in \"", line.substr(0, 200), "\""));
  }
}

namespace {

// Runs `argv` with stdout into a pipe; returns its last line, or an error naming the exit.
absl::StatusOr<std::string> RunChild(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::ResourceExhaustedError("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv;
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n > 0)
      out.append(buf, static_cast<size_t>(n));
    else if (errno != EINTR)
      break;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(args[0], " cold-start exited with status ", status,
                                            " (its errors are on stderr above)"));
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const size_t nl = out.rfind('\n');
  return nl == std::string::npos ? out : out.substr(nl + 1);
}

}  // namespace

absl::StatusOr<std::vector<ColdStartReport>> RunColdStartChildren(
    const std::string& exe, const ColdStartOptions& o, const std::vector<WeightDtype>& dtypes,
    const std::function<void(const std::string&)>& progress) {
  std::vector<ColdStartReport> reports;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const std::string dtype(WeightDtypeName(dtypes[i]));
    if (progress) {
      progress(absl::StrCat("cold start ", i + 1, "/", dtypes.size(), ": ", dtype, ", ",
                            o.decode_tokens, " tokens, new process"));
    }
    SCD_ASSIGN_OR_RETURN(
        std::string line,
        RunChild({exe, "cold-start", "--json", "--model", o.model_dir, "--weights-dtype", dtype,
                  "--prompt-tokens", absl::StrCat(o.prompt_tokens), "--decode-tokens",
                  absl::StrCat(o.decode_tokens), "--seed", absl::StrCat(o.seed)}));
    SCD_ASSIGN_OR_RETURN(ColdStartReport r, ParseColdStartJson(line));
    reports.push_back(std::move(r));
  }
  return reports;
}

}  // namespace scd::bench
