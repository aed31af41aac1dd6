// deploy/compose.yaml: one prefill daemon and two replicas of a decode daemon. The
// file is read with the daemons' own YAML loader (it stays within that subset); each
// service's image ENTRYPOINT plus its `command` is read by the daemon's parser and readers
// with the config the service mounts, so flags, keys, ports, advertised addresses, the shared
// cluster token and the mounts that hold the models are all checked against what the daemons
// would do. Default mounts point at the repository's fixtures, which must hold the files the
// configs name.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/config/config_file.h"
#include "tests/deploy/deploy_model.h"

namespace scd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Service {
  std::string name;
  json spec;
  DockerImage image;
  Launch launch;
  std::map<std::string, std::string> mounts;  // container path -> host path
};

std::string StringOrFail(const json& value, const std::string& what) {
  if (!value.is_string()) FAIL(what << " is not a string: " << value.dump());
  return value.get<std::string>();
}

std::vector<std::string> StringsOrFail(const json& value, const std::string& what) {
  std::vector<std::string> out;
  if (!value.is_array()) FAIL(what << " is not a list: " << value.dump());
  for (const json& v : value) out.push_back(StringOrFail(v, what));
  return out;
}

int PortOrFail(const json& value, const std::string& what) {
  absl::StatusOr<int> port = PortOf(StringOrFail(value, what));
  if (!port.ok()) FAIL(what << ": " << port.status().ToString());
  return *port;
}

std::vector<Service> ServicesOrFail(std::vector<std::string>* command_variables) {
  absl::StatusOr<json> compose = config::LoadConfigFile(DeployPath("compose.yaml"));
  if (!compose.ok()) FAIL(compose.status().ToString());
  REQUIRE((*compose).at("services").is_object());
  const std::map<std::string, std::string> secrets = SecretPlaceholders();
  std::vector<Service> out;
  for (const auto& [name, spec] : (*compose).at("services").items()) {
    INFO("service " << name);
    Service s;
    s.name = name;
    s.spec = spec;
    // The image: a Dockerfile of ours, built from the repository root.
    const fs::path context = fs::weakly_canonical(
        DeployPath(StringOrFail(spec.at("build").at("context"), "build.context")));
    CHECK(context == fs::weakly_canonical(SourcePath("")));
    const std::string dockerfile =
        StringOrFail(spec.at("build").at("dockerfile"), "build.dockerfile");
    REQUIRE(fs::exists(context / dockerfile));
    absl::StatusOr<DockerImage> image = ReadDockerImage((context / dockerfile).string());
    if (!image.ok()) FAIL(image.status().ToString());
    s.image = *std::move(image);
    // Mounts, with compose's defaults for unset variables (SCD_MODELS, SCD_ARTIFACTS).
    for (const std::string& volume : StringsOrFail(spec.at("volumes"), "volumes")) {
      absl::StatusOr<std::string> text = InterpolateCompose(volume, {});
      if (!text.ok()) FAIL(volume << ": " << text.status().ToString());
      const std::vector<std::string> parts = absl::StrSplit(*text, ':');
      REQUIRE(parts.size() == 3);
      CHECK(parts[2] == "ro");  // nothing a daemon reads is writable by it
      const fs::path source = fs::path(DeployPath("")) / parts[0];
      s.mounts[parts[1]] = fs::weakly_canonical(source).string();
    }
    // The daemon's command line: ENTRYPOINT, then `command` with the secrets interpolated.
    std::vector<std::string> argv = s.image.entrypoint;
    for (const std::string& word : StringsOrFail(spec.at("command"), "command")) {
      absl::StatusOr<std::string> text = InterpolateCompose(word, secrets, command_variables);
      if (!text.ok()) FAIL(word << ": " << text.status().ToString());
      argv.push_back(*text);
    }
    absl::StatusOr<Launch> launch =
        ReadLaunch(argv, [&](const std::string& path) -> absl::StatusOr<std::string> {
          if (s.mounts.count(path) != 0) return s.mounts.at(path);
          if (s.image.final_copies.count(path) != 0) {
            return SourcePath(s.image.final_copies.at(path));
          }
          return absl::NotFoundError("neither a mount nor the image provides " + path);
        });
    if (!launch.ok()) FAIL(launch.status().ToString());
    s.launch = *std::move(launch);
    out.push_back(std::move(s));
  }
  return out;
}

TEST_CASE("compose services run real images with real flags, configs and mounts", "[cpu]") {
  std::vector<std::string> variables;
  const std::vector<Service> services = ServicesOrFail(&variables);
  const std::map<std::string, std::string> secrets = SecretPlaceholders();
  // Every secret comes from a variable that scd.env.example documents.
  for (const std::string& v : variables) {
    INFO(v);
    CHECK(secrets.count(v) == 1);
  }
  for (const Service& s : services) {
    INFO("service " << s.name);
    const Launch& l = s.launch;
    // The mounted config is one of deploy/configs.
    CHECK(PathUnder(l.config_file, fs::weakly_canonical(DeployPath("configs")).string()));
    CHECK(l.cluster_token() == secrets.at("SCD_CLUSTER_TOKEN"));
    if (l.prefill) CHECK(l.prefill->api_key == secrets.at("SCD_API_KEY"));
    // Every file the daemon reads is under a mount whose default source holds it.
    for (const std::string& path : l.read_paths()) {
      INFO(path);
      bool found = false;
      for (const auto& [target, source] : s.mounts) {
        if (!PathUnder(path, target) || target == l.config_path) continue;
        found = true;
        CHECK(fs::exists(source + path.substr(target.size())));
      }
      CHECK(found);
    }
    // Ports: the published and exposed container ports are the ones the config listens on.
    std::set<int> ports;
    if (s.spec.contains("ports")) {
      for (const json& p : s.spec.at("ports")) ports.insert(PortOrFail(p, "ports"));
      CHECK(ports.count(l.http_port()) == 1);  // the published one is the HTTP API
    }
    for (const json& p : s.spec.at("expose")) ports.insert(PortOrFail(p, "expose"));
    // (The image's EXPOSE documents its default config; a replica may listen elsewhere.)
    CHECK(ports == l.ports());
    // The probe on the config's HTTP port; a drain that finishes before docker's SIGKILL.
    const std::vector<std::string> test =
        StringsOrFail(s.spec.at("healthcheck").at("test"), "test");
    REQUIRE(test.size() == 4);
    CHECK(test[0] == "CMD");
    CHECK(s.image.final_copies.count(test[1]) == 1);
    CHECK(test[2] == std::to_string(l.http_port()));
    CHECK((test[3] == "/health" || test[3] == "/ready"));
    CHECK(s.spec.at("stop_signal") == "SIGTERM");
    absl::StatusOr<absl::Duration> grace =
        ParseDurationText(StringOrFail(s.spec.at("stop_grace_period"), "stop_grace_period"));
    REQUIRE(grace.ok());
    CHECK(*grace > l.drain_timeout());
    CHECK(s.spec.at("init") == true);  // PID 1 forwards SIGTERM
  }
}

TEST_CASE("compose wires two decode replicas to the prefill daemon", "[cpu]") {
  const std::vector<Service> services = ServicesOrFail(nullptr);
  absl::StatusOr<json> compose = config::LoadConfigFile(DeployPath("compose.yaml"));
  REQUIRE(compose.ok());
  const Service* prefill = nullptr;
  for (const Service& s : services) {
    if (s.launch.prefill) {
      CHECK(prefill == nullptr);  // one prefill daemon
      prefill = &s;
    }
  }
  REQUIRE(prefill != nullptr);
  const PrefillDaemonConfig& p = *prefill->launch.prefill;
  std::map<std::string, int> replicas;
  std::set<std::string> advertised, configs;
  for (const Service& s : services) {
    INFO("service " << s.name);
    for (const json& network : s.spec.at("networks")) {
      CHECK((*compose).at("networks").contains(StringOrFail(network, "network")));
    }
    if (!s.launch.decode) continue;
    const DecodeDaemonConfig& d = *s.launch.decode;
    ++replicas[d.model_name];
    CHECK(configs.insert(s.launch.config_file).second);
    // What the prefill daemon dials is this service, on the ports it listens on.
    CHECK(d.rpc_advertise == s.name + ":" + std::to_string(PortOf(d.grpc.address).value()));
    CHECK(d.data_plane_advertise ==
          s.name + ":" + std::to_string(PortOf(d.data_plane_listen).value()));
    CHECK(advertised.insert(d.rpc_advertise).second);
    CHECK(advertised.insert(d.data_plane_advertise).second);
    // The control plane is the prefill service's gRPC port, with the same token.
    CHECK(d.control_plane.target ==
          prefill->name + ":" + std::to_string(PortOf(p.grpc_listen).value()));
    CHECK(d.control_plane.cluster_token == p.cluster_token);
    CHECK(s.spec.at("depends_on").at(prefill->name).at("condition") == "service_healthy");
  }
  for (const SpecialistConfig& specialist : p.specialists) {
    INFO(specialist.name);
    CHECK(replicas[specialist.name] >= 2);
  }
  // Every decode config of deploy/configs runs in compose (and as a systemd instance).
  CHECK(configs.size() == DecodeInstances().size());
}

}  // namespace
}  // namespace scd::testing
