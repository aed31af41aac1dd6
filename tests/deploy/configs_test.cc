// deploy/configs and the container health probe. The configs are read by the
// daemons' own readers, which only read strings: the /srv/scd paths they name need not exist
// here. The probe (deploy/docker/scd-healthcheck) runs against a real HTTP server.
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>

#include "common/config/config_file.h"
#include "common/http/http_server.h"
#include "decode_server/decode_config.h"
#include "prefill_server/prefill_config.h"
#include "tests/deploy/deploy_model.h"

namespace scd::testing {
namespace {

namespace fs = std::filesystem;

Launch ReadConfigOrFail(const std::string& binary, const std::string& name) {
  const std::string file = DeployPath("configs/" + name);
  absl::StatusOr<Launch> launch =
      ReadLaunch({"/opt/scd/bin/" + binary, "--config", std::string(kEtcDir) + "/" + name},
                 [&](const std::string&) -> absl::StatusOr<std::string> { return file; });
  if (!launch.ok()) FAIL(launch.status().ToString());
  return *std::move(launch);
}

TEST_CASE("deploy configs load with the daemons' readers and fit together", "[cpu]") {
  const Launch prefill = ReadConfigOrFail("scd-prefill", "prefill.yaml");
  const std::vector<std::string> instances = DecodeInstances();
  REQUIRE(instances.size() >= 2);  // two replicas of the bundled specialist

  // Secrets are never in the files: the units and compose pass them from the environment.
  CHECK(prefill.prefill->cluster_token.empty());
  CHECK(prefill.prefill->api_key.empty());
  // Reachable from other hosts and containers.
  CHECK(prefill.prefill->http_host == "0.0.0.0");
  CHECK(HostOf(prefill.prefill->grpc_listen) == "0.0.0.0");
  for (const std::string& path : prefill.read_paths()) {
    INFO(path);
    CHECK(PathUnder(path, "/srv/scd"));  // the read-only mounts of the units and compose
  }
  std::set<std::string> specialists;
  for (const SpecialistConfig& s : prefill.prefill->specialists) specialists.insert(s.name);

  std::set<int> all_ports = prefill.ports();
  std::set<std::string> ids, rpc_advertised, data_advertised;
  std::map<std::string, int> replicas;
  for (const std::string& instance : instances) {
    INFO("decode-" << instance << ".yaml");
    const Launch decode = ReadConfigOrFail("scd-decode", "decode-" + instance + ".yaml");
    const DecodeDaemonConfig& d = *decode.decode;
    CHECK(d.control_plane.cluster_token.empty());
    CHECK(specialists.count(d.model_name) == 1);
    ++replicas[d.model_name];
    for (const SpecialistConfig& s : prefill.prefill->specialists) {
      if (s.name == d.model_name) CHECK(s.artifact_path == d.artifact_path);  // the same pair
    }
    for (const std::string& path : decode.read_paths()) {
      INFO(path);
      CHECK(PathUnder(path, "/srv/scd"));
    }
    // Listening on every interface, so each address the prefill daemon dials is advertised,
    // on the port that listens (0.0.0.0 itself cannot be dialled).
    CHECK(HostOf(d.grpc.address) == "0.0.0.0");
    CHECK(HostOf(d.data_plane_listen) == "0.0.0.0");
    CHECK(d.http_host == "0.0.0.0");
    CHECK(d.http_port > 0);
    REQUIRE(!d.rpc_advertise.empty());
    REQUIRE(!d.data_plane_advertise.empty());
    CHECK(PortOf(d.rpc_advertise).value() == PortOf(d.grpc.address).value());
    CHECK(PortOf(d.data_plane_advertise).value() == PortOf(d.data_plane_listen).value());
    CHECK(HostOf(d.rpc_advertise) == HostOf(d.data_plane_advertise));
    CHECK(HostOf(d.rpc_advertise) != "0.0.0.0");
    CHECK(rpc_advertised.insert(d.rpc_advertise).second);
    CHECK(data_advertised.insert(d.data_plane_advertise).second);
    CHECK(!d.instance_id.empty());
    CHECK(ids.insert(d.instance_id).second);
    // The control plane is the prefill daemon's gRPC port.
    CHECK(PortOf(d.control_plane.target).value() == PortOf(prefill.prefill->grpc_listen).value());
    CHECK(d.data_plane_transport == prefill.prefill->data_plane_transport);
    // Distinct ports everywhere: every daemon fits on one host too.
    for (const int port : decode.ports()) {
      INFO("port " << port);
      CHECK(all_ports.insert(port).second);
    }
  }
  for (const std::string& name : specialists) {
    INFO(name);
    CHECK(replicas[name] >= 2);
  }
}

TEST_CASE("deploy configs: data_plane.advertise takes host:port, not a URL", "[cpu]") {
  const std::string file = DeployPath("configs/decode-" + DecodeInstances().at(0) + ".yaml");
  absl::StatusOr<Launch> launch =
      ReadLaunch({"scd-decode", "--config", file, "--data_plane.advertise=tcp://decode:7201"},
                 [](const std::string& path) -> absl::StatusOr<std::string> { return path; });
  REQUIRE(!launch.ok());
  CHECK_THAT(std::string(launch.status().message()),
             Catch::Contains("data_plane.advertise") && Catch::Contains("host:port"));
}

TEST_CASE("deploy health probe answers 0 only for a 200", "[cpu]") {
  const std::string probe = DeployPath("docker/scd-healthcheck");
  REQUIRE(fs::exists(probe));
  // The image runs it directly (HEALTHCHECK CMD exec form): it must be executable.
  CHECK((fs::status(probe).permissions() & fs::perms::owner_exec) != fs::perms::none);
  if (!CommandExists("bash")) {
    WARN("bash not found: the probe is not run");
    return;
  }
  http::HttpServerOptions options;
  options.num_threads = 4;
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server = http::HttpServer::Create(options);
  REQUIRE(server.ok());
  (*server)->AddHealthRoute();
  (*server)->AddReadyRoute([] { return absl::UnavailableError("not registered"); });
  REQUIRE((*server)->Start().ok());
  const std::string port = std::to_string((*server)->port());
  auto run = [&](const std::string& args) {
    return RunCommand("bash " + ShellQuote(probe) + " " + args).exit_code;
  };
  CHECK(run(port + " /health") == 0);
  CHECK(run(port) == 0);                // /health by default
  CHECK(run(port + " /ready") != 0);    // 503
  CHECK(run(port + " /missing") != 0);  // 404
  (*server)->Stop();
  CHECK(run(port + " /health") != 0);  // nothing listens
}

// The keys a decode config cannot do without.
nlohmann::json MinimalDecodeConfig() {
  return {{"model", {{"name", "m"}, {"path", "/srv/scd/m"}, {"producer_path", "/srv/scd/p"}}},
          {"control_plane", {{"address", "127.0.0.1:7000"}}}};
}

}  // namespace

TEST_CASE("decode config: gpu_rebuild and sekv.gpu are on by default and read as bools", "[cpu]") {
  nlohmann::json json = MinimalDecodeConfig();
  json["backend"] = "cuda";
  absl::StatusOr<DecodeDaemonConfig> on = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  INFO(on.status());
  REQUIRE(on.ok());
  CHECK(on->codec.gpu_rebuild);
  CHECK(on->engine.sekv.gpu);
  CHECK(on->engine.sekv.gpu_tier == sekv::GpuTier::kBf16);
  CHECK(on->engine.sekv.gpu_zoom == sekv::GpuZoom::kDevice);
  json["gpu_rebuild"] = false;
  json["sekv"] = {{"gpu", false}, {"gpu_tier", "f32"}, {"gpu_zoom", "host"}};
  absl::StatusOr<DecodeDaemonConfig> off = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(off.ok());
  CHECK(!off->codec.gpu_rebuild);
  CHECK(!off->engine.sekv.gpu);
  CHECK(off->engine.sekv.gpu_tier == sekv::GpuTier::kF32);
  CHECK(off->engine.sekv.gpu_zoom == sekv::GpuZoom::kHost);
  json["sekv"] = {{"gpu_tier", "fp8"}};
  absl::StatusOr<DecodeDaemonConfig> fp8 = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!fp8.ok());
  CHECK(fp8.status().message().find("gpu_tier") != std::string_view::npos);
  json["sekv"] = {{"gpu_zoom", "cpu"}};
  absl::StatusOr<DecodeDaemonConfig> cpu_zoom = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!cpu_zoom.ok());
  CHECK(cpu_zoom.status().message().find("gpu_zoom") != std::string_view::npos);
  json["gpu_rebuild"] = "sometimes";
  absl::StatusOr<DecodeDaemonConfig> bad = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!bad.ok());
  CHECK(bad.status().message().find("gpu_rebuild") != std::string_view::npos);
}

TEST_CASE("decode config: cuda_graphs is on by default, with a batch limit", "[cpu]") {
  nlohmann::json json = MinimalDecodeConfig();
  json["backend"] = "cuda";
  absl::StatusOr<DecodeDaemonConfig> defaults = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->backend_options.cuda_graphs);
  CHECK(defaults->backend_options.cuda_graph_max_batch == 64);
  json["cuda_graphs"] = {{"enabled", false}, {"max_batch", 8}};
  absl::StatusOr<DecodeDaemonConfig> set = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(set.ok());
  CHECK(!set->backend_options.cuda_graphs);
  CHECK(set->backend_options.cuda_graph_max_batch == 8);
  json["cuda_graphs"] = {{"max_batch", 0}};
  absl::StatusOr<DecodeDaemonConfig> zero = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!zero.ok());
  CHECK(zero.status().message().find("max_batch") != std::string_view::npos);
  json["cuda_graphs"] = {{"enable", true}};  // a misspelt key is an error, not a default
  absl::StatusOr<DecodeDaemonConfig> typo = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!typo.ok());
  CHECK(typo.status().message().find("enable") != std::string_view::npos);
}

TEST_CASE("decode and prefill configs: cuda_kernels names the kernels, auto by default", "[cpu]") {
  // The same keys in both daemons' configs, into BackendOptions::cuda_kernels.
  auto read = [](bool decode, const nlohmann::json& kernels) -> absl::StatusOr<CudaKernelOptions> {
    nlohmann::json json =
        decode ? MinimalDecodeConfig()
               : nlohmann::json{{"base_model", "/srv/scd/base"},
                                {"specialists", {{{"name", "m"}, {"artifact", "/srv/scd/m.scd"}}}}};
    json["backend"] = "cuda";
    if (!kernels.is_null()) json["cuda_kernels"] = kernels;
    if (decode) {
      absl::StatusOr<DecodeDaemonConfig> c = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
      if (!c.ok()) return c.status();
      return c->backend_options.cuda_kernels;
    }
    absl::StatusOr<PrefillDaemonConfig> c = PrefillConfigFromJson(json, "/etc/scd/prefill.yaml");
    if (!c.ok()) return c.status();
    return c->cuda_kernels;
  };
  for (const bool decode : {true, false}) {
    INFO((decode ? "decode" : "prefill") << " config");
    absl::StatusOr<CudaKernelOptions> defaults = read(decode, nullptr);
    INFO(defaults.status());
    REQUIRE(defaults.ok());
    CHECK(defaults->prefill_attention == "auto");
    CHECK(defaults->decode_attention == "auto");
    CHECK(defaults->small_batch_max_rows == kCudaSmallBatchRowsLimit);
    absl::StatusOr<CudaKernelOptions> set = read(decode, {{"prefill_attention", "mma"},
                                                          {"decode_attention", "generic"},
                                                          {"small_batch_max_rows", 0}});
    REQUIRE(set.ok());
    CHECK(set->prefill_attention == "mma");
    CHECK(set->decode_attention == "generic");
    CHECK(set->small_batch_max_rows == 0);
    for (const auto& [bad, key] :
         {std::pair<nlohmann::json, std::string>{{{"prefill_attention", "flash"}},
                                                 "prefill_attention"},
          {{{"decode_attention", "paged"}}, "decode_attention"},
          {{{"small_batch_max_rows", 9}}, "small_batch_max_rows"},
          {{{"prefil_attention", "mma"}}, "prefil_attention"}}) {  // misspelt: an error
      absl::StatusOr<CudaKernelOptions> refused = read(decode, bad);
      INFO(bad.dump());
      REQUIRE(!refused.ok());
      CHECK(refused.status().message().find(key) != std::string_view::npos);
    }
  }
}

TEST_CASE(
    "decode config: engine.prefill_chunk and rebuild_chunk are 2048 and 8192 by default, 0 "
    "turns chunking off",
    "[cpu]") {
  nlohmann::json json = MinimalDecodeConfig();
  absl::StatusOr<DecodeDaemonConfig> defaults = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->engine.prefill_chunk == 2048);
  CHECK(defaults->engine.rebuild_chunk == 8192);
  for (const std::string key : {"prefill_chunk", "rebuild_chunk"}) {
    INFO(key);
    json["engine"] = {{key, 0}};
    absl::StatusOr<DecodeDaemonConfig> off = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
    REQUIRE(off.ok());
    CHECK((key == "prefill_chunk" ? off->engine.prefill_chunk : off->engine.rebuild_chunk) == 0);
    json["engine"] = {{key, -1}};
    absl::StatusOr<DecodeDaemonConfig> negative =
        DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
    REQUIRE(!negative.ok());
    CHECK(negative.status().message().find(key) != std::string_view::npos);
  }
}

TEST_CASE(
    "decode config: engine.kv_budget_bytes is 0 (derived) and kv_memory_fraction 0.9 by "
    "default, sekv.max_host_bytes 0 and host_memory_fraction 0.5; a fraction outside [0, 1] is "
    "refused",
    "[cpu]") {
  nlohmann::json json = MinimalDecodeConfig();
  absl::StatusOr<DecodeDaemonConfig> defaults = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(defaults.ok());
  CHECK(defaults->engine.kv_budget_bytes == 0);
  CHECK(defaults->engine.kv_memory_fraction == 0.9);
  CHECK(defaults->engine.sekv.max_host_bytes == 0);
  CHECK(defaults->engine.sekv.host_memory_fraction == 0.5);
  json["engine"] = {{"kv_budget_bytes", int64_t{80} << 30}, {"kv_memory_fraction", 0.5}};
  absl::StatusOr<DecodeDaemonConfig> set = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(set.ok());
  CHECK(set->engine.kv_budget_bytes == int64_t{80} << 30);
  CHECK(set->engine.kv_memory_fraction == 0.5);
  json["sekv"] = {{"max_host_bytes", int64_t{64} << 30}};
  CHECK(DecodeConfigFromJson(json, "/etc/scd/decode.yaml")->engine.sekv.max_host_bytes ==
        int64_t{64} << 30);
  json["sekv"] = {{"host_memory_fraction", 0.25}};
  CHECK(DecodeConfigFromJson(json, "/etc/scd/decode.yaml")->engine.sekv.host_memory_fraction ==
        0.25);
  for (double bad : {-0.1, 1.5}) {
    json["sekv"] = {{"host_memory_fraction", bad}};
    absl::StatusOr<DecodeDaemonConfig> refused = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
    REQUIRE(!refused.ok());
    CHECK(refused.status().message().find("host_memory_fraction") != std::string_view::npos);
  }
  json.erase("sekv");
  for (const nlohmann::json& bad :
       {nlohmann::json{{"kv_memory_fraction", 1.5}}, nlohmann::json{{"kv_memory_fraction", -0.1}},
        nlohmann::json{{"kv_budget_bytes", -1}}}) {
    INFO(bad.dump());
    const std::string key = bad.begin().key();
    json["engine"] = bad;
    absl::StatusOr<DecodeDaemonConfig> refused = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
    REQUIRE(!refused.ok());
    CHECK(refused.status().message().find(key) != std::string_view::npos);
  }
}

TEST_CASE("decode config: sekv.min_prompt_tokens is 0 (every prompt) by default; negative refused",
          "[cpu]") {
  nlohmann::json json = MinimalDecodeConfig();
  CHECK(DecodeConfigFromJson(json, "/etc/scd/decode.yaml")->engine.sekv.min_prompt_tokens == 0);
  json["sekv"] = {{"enabled", true}, {"min_prompt_tokens", 2048}};
  CHECK(DecodeConfigFromJson(json, "/etc/scd/decode.yaml")->engine.sekv.min_prompt_tokens == 2048);
  json["sekv"] = {{"min_prompt_tokens", -1}};
  absl::StatusOr<DecodeDaemonConfig> refused = DecodeConfigFromJson(json, "/etc/scd/decode.yaml");
  REQUIRE(!refused.ok());
  CHECK(refused.status().message().find("sekv.min_prompt_tokens") != std::string_view::npos);
}

}  // namespace scd::testing

namespace scd::testing {
namespace {

// deploy/k8s/configs: the cluster's configs, read by the daemons' own readers.
TEST_CASE("Kubernetes configs load with the daemons' readers and use the etcd registry", "[cpu]") {
  const std::string dir = DeployPath("k8s/configs");
  absl::StatusOr<nlohmann::json> pj = config::LoadConfigFile(dir + "/prefill.yaml");
  REQUIRE(pj.ok());
  absl::StatusOr<PrefillDaemonConfig> prefill = PrefillConfigFromJson(*pj, dir + "/prefill.yaml");
  INFO(prefill.status().ToString());
  REQUIRE(prefill.ok());
  CHECK(prefill->registry.etcd());
  CHECK(prefill->cluster_token.empty());  // from the Secret, as an override
  int decode_configs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("decode-", 0) != 0) continue;
    ++decode_configs;
    INFO(name);
    absl::StatusOr<nlohmann::json> dj = config::LoadConfigFile(entry.path().string());
    REQUIRE(dj.ok());
    absl::StatusOr<DecodeDaemonConfig> decode = DecodeConfigFromJson(*dj, entry.path().string());
    INFO(decode.status().ToString());
    REQUIRE(decode.ok());
    CHECK(decode->registry.etcd());
    CHECK(decode->control_plane.target.empty());
    // One cluster: the same etcd and prefix as the prefill daemons.
    CHECK(decode->registry.etcd_endpoints == prefill->registry.etcd_endpoints);
    CHECK(decode->registry.etcd_prefix == prefill->registry.etcd_prefix);
    CHECK(decode->drain_timeout <= absl::Seconds(40));
  }
  CHECK(decode_configs >= 1);
}

}  // namespace
}  // namespace scd::testing
