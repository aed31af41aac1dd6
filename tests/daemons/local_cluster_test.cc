// common/tools/cluster/local_cluster: the launcher scd-soak and scd-e2e-bench start their clusters
// with. It must report "ready" only once the prefill daemon counts every decode daemon, and
// fail early, with the daemon's log, when a decode daemon exits instead of registering.
#include "common/tools/cluster/local_cluster.h"

#include <catch2/catch.hpp>

#include "tests/daemons/daemon_harness.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

using std::chrono::seconds;

TEST_CASE("The local-cluster launcher waits for registration and fails early on a dead daemon",
          "[daemons]") {
  const std::string dir = TempDir();
  absl::StatusOr<int> port = cluster::PickFreePort();
  REQUIRE(port.ok());
  const std::string grpc_address = "127.0.0.1:" + std::to_string(*port);
  nlohmann::json pc = PrefillConfig();
  pc["grpc"]["listen"] = grpc_address;
  absl::StatusOr<cluster::StartedPrefill> prefill = cluster::StartPrefillDaemon(
      std::string(SCD_BIN_DIR), pc, dir, "prefill", std::chrono::seconds(60));
  INFO(prefill.status().ToString());
  REQUIRE(prefill.ok());
  REQUIRE(prefill->http_port > 0);
  CHECK(cluster::LiveDecodeInstances(prefill->http_port, "stories260K-babi-qa").value_or(-1) == 0);

  cluster::DecodeDaemonSpec spec;
  spec.model_name = "stories260K-babi-qa";
  spec.model_path = ModelDir("stories260K-babi-qa");
  spec.artifact = ArtifactPath();
  spec.control_plane = grpc_address;
  spec.cluster_token = "test-token";
  const nlohmann::json dc = cluster::DecodeDaemonJson(spec, 0);
  CHECK(dc["instance_id"] == "decode-0");
  CHECK(dc["control_plane"]["address"] == grpc_address);

  std::vector<std::unique_ptr<DaemonProcess>> decodes;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d =
        cluster::StartWithConfig(BinaryPath("scd-decode"), cluster::DecodeDaemonJson(spec, i), dir,
                                 "decode-" + std::to_string(i));
    REQUIRE(d.ok());
    decodes.push_back(*std::move(d));
  }
  const absl::Status ready = cluster::WaitForDecodeInstances(
      prefill->http_port, spec.model_name, *prefill->process, decodes, seconds(60));
  INFO(ready.ToString());
  REQUIRE(ready.ok());
  CHECK(cluster::LiveDecodeInstances(prefill->http_port, spec.model_name).value_or(-1) == 2);

  // A third decode daemon that cannot start (its artifact does not fit the model): the wait
  // fails as soon as it exits, not at the deadline, and carries its log.
  cluster::DecodeDaemonSpec wrong = spec;
  wrong.model_path = ModelDir("stories260K-wiki");
  absl::StatusOr<std::unique_ptr<DaemonProcess>> bad = cluster::StartWithConfig(
      BinaryPath("scd-decode"), cluster::DecodeDaemonJson(wrong, 2), dir, "decode-bad");
  REQUIRE(bad.ok());
  decodes.push_back(*std::move(bad));
  const auto start = std::chrono::steady_clock::now();
  const absl::Status failed = cluster::WaitForDecodeInstances(
      prefill->http_port, spec.model_name, *prefill->process, decodes, seconds(120));
  CHECK(absl::IsFailedPrecondition(failed));
  CHECK(failed.message().find("decode daemon 2 exited") != std::string::npos);
  CHECK(failed.message().find("does not fit") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < seconds(60));

  for (auto& d : decodes) d->Stop(seconds(20));
  CHECK(prefill->process->Stop(seconds(20)) == std::optional<int>(0));
}

}  // namespace
}  // namespace scd::testing
