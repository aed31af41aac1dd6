// deploy/systemd: each unit starts a binary the build makes, with flags and config
// keys the daemons accept (read by their own parser and readers, secrets replaced by
// placeholders), hardened, stopped after a drain and restarted on failure. systemd-analyze
// checks the syntax when it is installed.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/deploy/deploy_model.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

namespace fs = std::filesystem;

std::vector<UnitLaunch> UnitsOrFail() {
  absl::StatusOr<std::vector<UnitLaunch>> units = ReadUnitLaunches();
  if (!units.ok()) FAIL(units.status().ToString());
  return *std::move(units);
}

std::vector<std::string> Words(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipEmpty());
}

// Every whitespace-separated word of every value of `key`.
std::set<std::string> WordSet(const SystemdUnit& unit, const std::string& section,
                              const std::string& key) {
  std::set<std::string> out;
  for (const std::string& value : unit.All(section, key)) {
    for (const std::string& word : Words(value)) out.insert(word);
  }
  return out;
}

TEST_CASE("systemd units start built binaries with real flags and config keys", "[cpu]") {
  const std::vector<UnitLaunch> units = UnitsOrFail();
  const std::map<std::string, std::string> secrets = SecretPlaceholders();
  REQUIRE(secrets.count("SCD_CLUSTER_TOKEN") == 1);
  std::set<std::string> binaries;
  for (const UnitLaunch& u : units) {
    INFO(u.file << " " << u.instance << ": " << u.unit.Last("Service", "ExecStart").value());
    const Launch& l = u.launch;
    binaries.insert(l.binary);
    CHECK(u.file == (l.binary == "scd-prefill" ? "scd-prefill.service" : "scd-decode@.service"));
    // The installed layout of deploy/README.md; the same binary the build makes.
    CHECK(fs::path(l.argv[0]).parent_path() == "/opt/scd/bin");
    CHECK(fs::exists(BinPath(l.binary)));
    // The token reaches the daemon as the string it is (the placeholder is all digits).
    CHECK(l.cluster_token() == secrets.at("SCD_CLUSTER_TOKEN"));
    if (l.prefill) CHECK(l.prefill->api_key == secrets.at("SCD_API_KEY"));
    // Instance NAME reads decode-NAME.yaml.
    if (!u.instance.empty()) {
      CHECK(fs::path(l.config_file).filename() == "decode-" + u.instance + ".yaml");
    }
  }
  CHECK(binaries == std::set<std::string>{"scd-prefill", "scd-decode"});
}

TEST_CASE("systemd units are hardened and stop after the drain", "[cpu]") {
  // The user the units run as is created by the sysusers.d snippet.
  const std::string sysusers = ReadFileOrFail(DeployPath("systemd/scd.sysusers.conf"));
  for (const UnitLaunch& u : UnitsOrFail()) {
    INFO(u.file << " " << u.instance);
    const SystemdUnit& unit = u.unit;
    auto last = [&](const std::string& key) { return unit.Last("Service", key).value_or(""); };
    CHECK(last("Type") == "exec");
    const std::string user = last("User");
    CHECK(!user.empty());
    CHECK(user != "root");
    CHECK(user != "0");
    CHECK(absl::StrContains(sysusers, "u " + user + " "));
    CHECK(last("EnvironmentFile") == std::string(kEtcDir) + "/scd.env");
    CHECK(last("NoNewPrivileges") == "yes");
    CHECK(last("ProtectSystem") == "strict");
    CHECK(last("ProtectHome") == "yes");
    CHECK(last("PrivateTmp") == "yes");
    CHECK(last("ProtectProc") == "invisible");  // hides the secrets on the command line
    CHECK(unit.Last("Service", "CapabilityBoundingSet").value_or("x").empty());
    CHECK(last("Restart") == "on-failure");
    CHECK(last("RestartPreventExitStatus") == "2");  // a bad config does not loop
    CHECK(last("KillSignal") == "SIGTERM");
    CHECK(!last("LimitNOFILE").empty());
    // Models, artifacts and TLS files are on read-only paths; so are the config and binary.
    const std::set<std::string> read_only = WordSet(unit, "Service", "ReadOnlyPaths");
    std::vector<std::string> paths = u.launch.read_paths();
    paths.push_back(u.launch.config_path);
    paths.push_back(u.launch.argv[0]);
    for (const std::string& path : paths) {
      INFO(path);
      bool covered = false;
      for (const std::string& dir : read_only) covered = covered || PathUnder(path, dir);
      CHECK(covered);
    }
    // SIGTERM drains for drain_timeout; systemd must wait longer before SIGKILL.
    absl::StatusOr<absl::Duration> stop = ParseDurationText(last("TimeoutStopSec"));
    REQUIRE(stop.ok());
    CHECK(*stop > u.launch.drain_timeout());
    // Network first; decode daemons never pull in a prefill daemon (other hosts have none).
    CHECK(WordSet(unit, "Unit", "After").count("network-online.target") == 1);
    CHECK(WordSet(unit, "Unit", "Wants").count("network-online.target") == 1);
    if (u.launch.decode) {
      for (const char* key : {"Wants", "Requires", "Requisite", "BindsTo", "PartOf"}) {
        INFO(key);
        CHECK(WordSet(unit, "Unit", key).count("scd-prefill.service") == 0);
      }
      // Ordered against it on a shared host (Before=: stopped after it, see the unit).
      CHECK(WordSet(unit, "Unit", "Before").count("scd-prefill.service") == 1);
    }
    CHECK(unit.Last("Install", "WantedBy").value_or("") == "multi-user.target");
  }
}

// systemd-analyze reports syntax problems as "<file>:<line>: ..."; it also says the binaries
// under /opt/scd are missing, which is expected on a build machine.
TEST_CASE("systemd-analyze verify accepts the units", "[cpu]") {
  if (!CommandExists("systemd-analyze")) {
    WARN("systemd-analyze not found: unit syntax not verified");
    return;
  }
  const std::string dir = TempDir();
  for (const char* file : {"scd-prefill.service", "scd-decode@.service"}) {
    fs::copy_file(DeployPath(std::string("systemd/") + file), dir + "/" + file,
                  fs::copy_options::overwrite_existing);
  }
  std::string command =
      "systemd-analyze verify --man=no --generators=no " + ShellQuote(dir + "/scd-prefill.service");
  for (const std::string& instance : DecodeInstances()) {
    command += " " + ShellQuote(dir + "/scd-decode@" + instance + ".service");
  }
  const CommandResult result = RunCommand(command);
  INFO(command << "\n" << result.output);
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(result.output, '\n', absl::SkipEmpty()))) {
    if (absl::StrContains(line, "is not executable: No such file or directory")) continue;
    INFO(line);
    CHECK(!absl::StrContains(line, ".service:"));  // "<file>:<line>: <problem>"
    CHECK(!absl::StrContains(line, "Unknown"));
    CHECK(!absl::StrContains(line, "Failed to parse"));
    CHECK(!absl::StrContains(line, "Invalid"));
  }
}

}  // namespace
}  // namespace scd::testing
