// See daemon_harness.h.
#include "tests/daemons/daemon_harness.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/test_support.h"

namespace scd::testing {

std::string BinaryPath(const std::string& name) { return std::string(SCD_BIN_DIR) + "/" + name; }
std::string ModelDir(const std::string& name) { return SharedPath("models/" + name); }
std::string ArtifactPath() {
  return std::string(SCD_SOURCE_DIR) + "/configs/calibration/stories260K-babi-qa.scd.safetensors";
}

std::unique_ptr<DaemonProcess> Spawn(const std::string& binary, std::vector<std::string> args,
                                     const std::string& log_path, const std::string& netns) {
  absl::StatusOr<std::unique_ptr<DaemonProcess>> p =
      DaemonProcess::Start(binary, std::move(args), log_path, netns);
  INFO(p.status().ToString());
  REQUIRE(p.ok());
  return *std::move(p);
}

std::optional<int> RunToExit(const std::string& binary, const std::string& dir,
                             const nlohmann::json& config, const std::string& tag, std::string* log,
                             const std::string& netns) {
  const std::string path = dir + "/" + tag + ".json";
  WriteJson(path, config);
  std::unique_ptr<DaemonProcess> p =
      Spawn(BinaryPath(binary), {"--config", path}, dir + "/" + tag + ".log", netns);
  const std::optional<int> rc = p->Wait(std::chrono::seconds(60));
  *log = p->LogText();
  return rc;
}

void WriteJson(const std::string& path, const nlohmann::json& config) {
  std::ofstream(path) << config.dump(2);
}

nlohmann::json PrefillConfig(const std::string& mode) {
  nlohmann::json c;
  c["base_model"] = ModelDir("stories260K");
  c["http"] = {{"host", "127.0.0.1"}, {"port", 0}, {"threads", 16}};
  c["grpc"] = {{"listen", "127.0.0.1:0"}};
  // A fixed token is no secret: the daemons start with it only as a development cluster.
  c["control_plane"] = {{"cluster_token", "test-token"},
                        {"dev_insecure", true},
                        {"heartbeat_interval", "200ms"},
                        {"lease", "1s"}};
  c["limits"] = {{"max_tokens", 512}, {"default_max_tokens", 16}, {"request_timeout", "30s"}};
  c["drain_timeout"] = "10s";
  c["specialists"] = nlohmann::json::array({{{"name", "stories260K-babi-qa"},
                                             {"artifact", ArtifactPath()},
                                             {"mode", mode},
                                             {"chat_template", "plain"},
                                             {"max_retries", 1}}});
  return c;
}

nlohmann::json DecodeConfig(const std::string& control_plane) {
  nlohmann::json c;
  c["model"] = {{"name", "stories260K-babi-qa"},
                {"path", ModelDir("stories260K-babi-qa")},
                {"artifact", ArtifactPath()}};
  c["grpc"] = {{"listen", "127.0.0.1:0"}};
  c["data_plane"] = {{"transport", "tcp"}, {"listen", "127.0.0.1:0"}};
  c["http"] = {{"port", 0}};
  c["control_plane"] = {{"address", control_plane},
                        {"cluster_token", "test-token"},
                        {"dev_insecure", true},
                        {"register_wait", "10s"}};
  c["engine"] = {{"max_batch", 8}, {"max_queue", 32}};
  c["drain_timeout"] = "10s";
  return c;
}

namespace {

// Both daemons' start events say which backend serves and on what: the configured backend
// ("cpu" unless set) and its device, never empty.
void CheckBackendLogged(const nlohmann::json& started, const nlohmann::json& config) {
  INFO(started.dump());
  CHECK(started.value("backend", "") == config.value("backend", "cpu"));
  const std::string device = started.value("device", "");
  CHECK_FALSE(device.empty());
  if (config.value("backend", "cpu") == "cpu") CHECK(device.rfind("host CPU (", 0) == 0);
}

}  // namespace

PrefillHandle StartPrefill(const std::string& dir, const nlohmann::json& config,
                           const std::string& tag, const std::string& netns) {
  const std::string path = dir + "/" + tag + ".json";
  WriteJson(path, config);
  PrefillHandle h;
  h.process = Spawn(BinaryPath("scd-prefill"), {"--config", path}, dir + "/" + tag + ".log", netns);
  auto started = h.process->WaitForEvent("prefill_started", std::chrono::seconds(60));
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  h.http_port = (*started)["http_port"].get<int>();
  h.grpc_address = (*started)["grpc_address"].get<std::string>();
  CheckBackendLogged(*started, config);
  return h;
}

DecodeHandle StartDecode(const std::string& dir, const nlohmann::json& config,
                         const std::string& tag, const std::string& netns) {
  const std::string path = dir + "/" + tag + ".json";
  WriteJson(path, config);
  DecodeHandle h;
  h.process = Spawn(BinaryPath("scd-decode"), {"--config", path}, dir + "/" + tag + ".log", netns);
  auto started = h.process->WaitForEvent("decode_started", std::chrono::seconds(60));
  INFO(started.status().ToString());
  REQUIRE(started.ok());
  h.http_port = (*started)["http_port"].get<int>();
  h.instance_id = (*started)["instance_id"].get<std::string>();
  CheckBackendLogged(*started, config);
  return h;
}

namespace {

HttpResult Convert(const httplib::Result& r) {
  HttpResult out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  for (const auto& [k, v] : r->headers) {
    std::string key = k;
    for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out.headers[key] = v;
  }
  return out;
}

}  // namespace

HttpResult HttpGet(int port, const std::string& path, std::chrono::seconds timeout) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(timeout);
  client.set_connection_timeout(std::chrono::seconds(5));
  return Convert(client.Get(path));
}

HttpResult HttpPost(int port, const std::string& path, const std::string& body,
                    const std::map<std::string, std::string>& headers,
                    std::chrono::seconds timeout) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(timeout);
  client.set_connection_timeout(std::chrono::seconds(5));
  httplib::Headers h;
  for (const auto& [k, v] : headers) h.emplace(k, v);
  return Convert(client.Post(path, h, body, "application/json"));
}

std::string SseResult::Text() const {
  std::string text;
  for (const std::string& e : events) {
    if (e == "[DONE]") continue;
    nlohmann::json j = nlohmann::json::parse(e, nullptr, false);
    if (j.is_discarded() || !j.contains("choices")) continue;
    for (const auto& c : j["choices"]) {
      if (c.contains("delta") && c["delta"].contains("content") &&
          c["delta"]["content"].is_string()) {
        text += c["delta"]["content"].get<std::string>();
      }
      if (c.contains("text") && c["text"].is_string()) text += c["text"].get<std::string>();
    }
  }
  return text;
}

SseResult HttpStream(int port, const std::string& path, const std::string& body,
                     const std::function<bool(const std::string&)>& on_event,
                     std::chrono::seconds timeout) {
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(timeout);
  client.set_connection_timeout(std::chrono::seconds(5));
  SseResult out;
  std::string buffer;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.response_handler = [&](const httplib::Response& res) {
    out.status = res.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (out.status != 200) {
      out.body.append(data, n);
      return true;
    }
    buffer.append(data, n);
    size_t end;
    while ((end = buffer.find("\n\n")) != std::string::npos) {
      std::string block = buffer.substr(0, end);
      buffer.erase(0, end + 2);
      std::istringstream lines(block);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.rfind("data: ", 0) != 0) continue;  // comments (keep-alives) and others
        out.events.push_back(line.substr(6));
        if (on_event && !on_event(out.events.back())) return false;
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  if (out.status == 0 && error == httplib::Error::Success) out.status = res.status;
  return out;
}

bool WaitForReady(int port, int status, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (HttpGet(port, "/ready", std::chrono::seconds(2)).status == status) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

std::optional<double> MetricValue(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    if (line.compare(0, space, series) == 0 && space == series.size()) {
      return std::stod(line.substr(space + 1));
    }
  }
  return std::nullopt;
}

std::optional<double> ScrapeMetric(int http_port, const std::string& series) {
  return MetricValue(HttpGet(http_port, "/metrics").body, series);
}

nlohmann::json ErrorOf(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  return j.is_object() && j.contains("error") ? j["error"] : nlohmann::json();
}

int RunCommand(const std::string& command, std::string* output) {
  const testing::CommandResult result = testing::RunCommand(command);
  output->append(result.output);
  return result.exit_code;
}

GrpcOutcome GrpcGenerate(const std::string& address, const scd::v1::GenerateRequest& request) {
  auto stub = scd::v1::Generation::NewStub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto reader = stub->Generate(&ctx, request);
  GrpcOutcome out;
  scd::v1::GenerateEvent e;
  while (reader->Read(&e)) {
    if (e.has_delta()) out.text += e.delta().text();
    out.events.push_back(e);
  }
  out.status = reader->Finish();
  auto it = ctx.GetServerInitialMetadata().find("x-request-id");
  if (it != ctx.GetServerInitialMetadata().end()) {
    out.request_id = std::string(it->second.data(), it->second.size());
  }
  return out;
}

grpc::Status CallDecode(const std::string& address, const rpc::ChannelOptions& channel,
                        const scd::v1::DecodeRequest& request) {
  auto ch = rpc::MakeChannel(address, channel);
  REQUIRE(ch.ok());
  auto stub = scd::v1::Decode::NewStub(*ch);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  auto reader = stub->Generate(&context, request);
  scd::v1::DecodeEvent event;
  while (reader->Read(&event)) {
  }
  return reader->Finish();
}

}  // namespace scd::testing
