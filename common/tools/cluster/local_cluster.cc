// See local_cluster.h.
#include "common/tools/cluster/local_cluster.h"

#include <httplib.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace scd::cluster {

nlohmann::json DecodeDaemonJson(const DecodeDaemonSpec& spec, int index) {
  nlohmann::json c;
  c["model"] = {{"name", spec.model_name}, {"path", spec.model_path}, {"artifact", spec.artifact}};
  c["instance_id"] = absl::StrCat("decode-", index);
  c["grpc"] = {{"listen", "127.0.0.1:0"}};
  c["data_plane"] = {{"transport", spec.transport}, {"listen", "127.0.0.1:0"}};
  c["control_plane"] = {{"address", spec.control_plane},
                        {"cluster_token", spec.cluster_token},
                        {"register_wait", "120s"}};
  c["drain_timeout"] = spec.drain_timeout;
  c.merge_patch(spec.extra);
  return c;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> StartWithConfig(const std::string& binary,
                                                               const nlohmann::json& config,
                                                               const std::string& dir,
                                                               const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name, ".json");
  nlohmann::json local = config;
  local["control_plane"]["dev_insecure"] = true;  // see the header
  if (absl::Status s = WriteJsonFile(path, local); !s.ok()) return s;
  return DaemonProcess::Start(binary, {"--config", path}, absl::StrCat(dir, "/", name, ".log"));
}

absl::StatusOr<StartedPrefill> StartPrefillDaemon(const std::string& bin_dir,
                                                  const nlohmann::json& config,
                                                  const std::string& dir, const std::string& name,
                                                  std::chrono::milliseconds timeout) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> process =
      StartWithConfig(bin_dir + "/scd-prefill", config, dir, name);
  if (!process.ok()) return process.status();
  StartedPrefill started;
  started.process = *std::move(process);
  absl::StatusOr<nlohmann::json> event = started.process->WaitForEvent("prefill_started", timeout);
  if (!event.ok()) return event.status();
  if (!event->contains("http_port") || !(*event)["http_port"].is_number_integer()) {
    return absl::InternalError(absl::StrCat("'prefill_started' has no http_port: ", event->dump()));
  }
  started.http_port = (*event)["http_port"].get<int>();
  return started;
}

absl::StatusOr<std::string> ScrapeMetrics(int http_port) {
  httplib::Client client("127.0.0.1", http_port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(5));
  httplib::Result r = client.Get("/metrics");
  if (!r) {
    return absl::UnavailableError(
        absl::StrCat("GET /metrics failed: ", httplib::to_string(r.error())));
  }
  if (r->status != 200) {
    return absl::UnavailableError(absl::StrCat("GET /metrics answered ", r->status));
  }
  return std::move(r->body);
}

double SumMetric(const std::string& exposition, const std::string& name,
                 const std::vector<std::string>& labels) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(exposition, '\n')) {
    if (line.empty() || line[0] == '#' || !absl::StartsWith(line, name)) continue;
    if (line.find_first_of("{ ") != name.size()) continue;  // a longer name
    bool match = true;
    for (const std::string& l : labels) match = match && absl::StrContains(line, l);
    double v = 0;
    const size_t space = line.rfind(' ');
    if (match && space != absl::string_view::npos && absl::SimpleAtod(line.substr(space + 1), &v)) {
      sum += v;
    }
  }
  return sum;
}

absl::StatusOr<int> LiveDecodeInstances(int http_port, const std::string& model) {
  absl::StatusOr<std::string> body = ScrapeMetrics(http_port);
  if (!body.ok()) return body.status();
  const std::string series = absl::StrCat("scd_decode_instances{model=\"", model, "\"} ");
  const size_t at = body->find(series);
  if (at == std::string::npos) {
    return absl::NotFoundError(absl::StrCat("no scd_decode_instances series for ", model));
  }
  return std::atoi(body->c_str() + at + series.size());
}

absl::Status WaitForDecodeInstances(int http_port, const std::string& model, DaemonProcess& prefill,
                                    const std::vector<std::unique_ptr<DaemonProcess>>& decodes,
                                    std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  std::string last_seen = "no answer yet";
  while (std::chrono::steady_clock::now() < until) {
    absl::StatusOr<int> live = LiveDecodeInstances(http_port, model);
    if (live.ok() && *live >= static_cast<int>(decodes.size())) return absl::OkStatus();
    last_seen = live.ok() ? absl::StrCat("scd_decode_instances = ", *live)
                          : std::string(live.status().message());
    if (!prefill.running()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the prefill daemon exited while the decode daemons registered; log tail:\n",
                       prefill.LogTail()));
    }
    for (size_t i = 0; i < decodes.size(); ++i) {
      if (!decodes[i]->running()) {
        return absl::FailedPreconditionError(
            absl::StrCat("decode daemon ", i, " exited before it registered; log tail:\n",
                         decodes[i]->LogTail()));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string ready = "GET /ready failed";
  httplib::Client client("127.0.0.1", http_port);
  client.set_read_timeout(std::chrono::seconds(5));
  if (httplib::Result r = client.Get("/ready")) ready = absl::StrCat(r->status, " ", r->body);
  return absl::DeadlineExceededError(absl::StrCat(
      "the decode daemons did not all register with the prefill daemon within ",
      std::chrono::duration_cast<std::chrono::seconds>(timeout).count(), " s (last: ", last_seen,
      "; /ready: ", ready, "); prefill log tail:\n", prefill.LogTail()));
}

absl::StatusOr<LocalPair> StartLocalPair(const std::string& bin_dir, nlohmann::json prefill_config,
                                         DecodeDaemonSpec spec, int decodes,
                                         const std::string& dir) {
  absl::StatusOr<int> grpc_port = PickFreePort();
  if (!grpc_port.ok()) return grpc_port.status();
  const std::string grpc_address = absl::StrCat("127.0.0.1:", *grpc_port);
  prefill_config["grpc"]["listen"] = grpc_address;
  absl::StatusOr<StartedPrefill> prefill =
      StartPrefillDaemon(bin_dir, prefill_config, dir, "prefill", std::chrono::seconds(120));
  if (!prefill.ok()) return prefill.status();
  LocalPair pair;
  pair.prefill = std::move(prefill->process);
  pair.http_port = prefill->http_port;
  pair.grpc_address = grpc_address;
  spec.control_plane = grpc_address;
  for (int i = 0; i < decodes; ++i) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> decode = StartWithConfig(
        bin_dir + "/scd-decode", DecodeDaemonJson(spec, i), dir, absl::StrCat("decode-", i));
    if (!decode.ok()) return decode.status();
    pair.decodes.push_back(*std::move(decode));
  }
  absl::Status ready = WaitForDecodeInstances(pair.http_port, spec.model_name, *pair.prefill,
                                              pair.decodes, std::chrono::seconds(120));
  if (!ready.ok()) return ready;
  return pair;
}

}  // namespace scd::cluster
