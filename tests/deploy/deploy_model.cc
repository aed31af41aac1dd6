// See deploy_model.h.
#include "tests/deploy/deploy_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config/daemon_config.h"
#include "decode_server/decode_config.h"
#include "prefill_server/prefill_config.h"

namespace scd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Basename(const std::string& path) { return fs::path(path).filename().string(); }

void AddTls(const rpc::TlsPaths& tls, std::vector<std::string>* out) {
  for (const std::string* p : {&tls.ca_cert, &tls.cert, &tls.key}) {
    if (!p->empty()) out->push_back(*p);
  }
}

}  // namespace

std::string SourcePath(const std::string& relative) {
  return std::string(SCD_SOURCE_DIR) + "/" + relative;
}
std::string DeployPath(const std::string& relative) { return SourcePath("deploy/" + relative); }
std::string BinPath(const std::string& name) { return std::string(SCD_BIN_DIR) + "/" + name; }

std::map<std::string, std::string> SecretPlaceholders() {
  std::map<std::string, std::string> out;
  absl::StatusOr<std::string> text = ReadText(DeployPath("scd.env.example"));
  if (!text.ok()) return out;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    const std::string name(line.substr(0, eq));
    out[name] = absl::StrCat(31415926, out.size());
  }
  return out;
}

std::vector<std::string> SetupPackages() {
  std::vector<std::string> out;
  absl::StatusOr<std::string> text = ReadText(SourcePath("scripts/setup.sh"));
  if (!text.ok()) return out;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (!inside) {
      inside = line == "PACKAGES=(";
      continue;
    }
    if (line == ")") break;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      if (word[0] == '#') break;
      out.emplace_back(word);
    }
  }
  return out;
}

std::vector<std::string> DecodeInstances() {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(DeployPath("configs"))) {
    const std::string name = e.path().filename().string();
    if (absl::StartsWith(name, "decode-") && absl::EndsWith(name, ".yaml")) {
      out.push_back(name.substr(7, name.size() - 7 - 5));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::Duration Launch::drain_timeout() const {
  return prefill ? prefill->drain_timeout : decode->drain_timeout;
}

std::string Launch::cluster_token() const {
  return prefill ? prefill->cluster_token : decode->control_plane.cluster_token;
}

int Launch::http_port() const { return prefill ? prefill->http_port : decode->http_port; }

std::set<int> Launch::ports() const {
  std::set<int> out;
  auto add = [&](const std::string& address) {
    if (absl::StatusOr<int> port = PortOf(address); port.ok()) out.insert(*port);
  };
  if (prefill) {
    add(prefill->grpc_listen);
  } else {
    add(decode->grpc.address);
    add(decode->data_plane_listen);
  }
  if (http_port() >= 0) out.insert(http_port());
  return out;
}

std::vector<std::string> Launch::read_paths() const {
  std::vector<std::string> out;
  if (prefill) {
    out.push_back(prefill->base_model_path);
    for (const SpecialistConfig& s : prefill->specialists) {
      if (!s.artifact_path.empty()) out.push_back(s.artifact_path);
      if (!s.consumer_path.empty()) out.push_back(s.consumer_path);
    }
    AddTls(prefill->grpc_tls, &out);
    AddTls(prefill->pipeline.decode_channel.tls, &out);
  } else {
    out.push_back(decode->model_path);
    if (!decode->artifact_path.empty()) out.push_back(decode->artifact_path);
    if (!decode->producer_path.empty()) out.push_back(decode->producer_path);
    AddTls(decode->rpc_tls, &out);
    AddTls(decode->control_plane.channel.tls, &out);
  }
  return out;
}

absl::StatusOr<Launch> ReadLaunch(const std::vector<std::string>& argv,
                                  const ConfigLocator& locate) {
  Launch launch;
  launch.argv = argv;
  const std::string shown = absl::StrJoin(argv, " ");
  auto failed = [&](const absl::Status& st) {
    return absl::Status(st.code(), absl::StrCat("`", shown, "`: ", st.message()));
  };
  if (argv.empty()) return absl::InvalidArgumentError("empty command line");
  launch.binary = Basename(argv[0]);
  std::vector<const char*> args;
  for (const std::string& a : argv) args.push_back(a.c_str());
  absl::StatusOr<config::DaemonCommandLine> command_line =
      config::ParseDaemonCommandLine(static_cast<int>(args.size()), args.data());
  if (!command_line.ok()) return failed(command_line.status());
  if (command_line->help_requested) return failed(absl::InvalidArgumentError("--help given"));
  launch.config_path = command_line->config_path;
  absl::StatusOr<std::string> file = locate(launch.config_path);
  if (!file.ok()) return failed(file.status());
  launch.config_file = *file;
  command_line->config_path = *file;
  absl::StatusOr<json> config = config::LoadDaemonConfig(*command_line);
  if (!config.ok()) return failed(config.status());
  // The readers get the path the daemon would see: relative paths resolve against it.
  if (launch.binary == "scd-prefill") {
    absl::StatusOr<PrefillDaemonConfig> c = PrefillConfigFromJson(*config, launch.config_path);
    if (!c.ok()) return failed(c.status());
    launch.prefill = *std::move(c);
  } else if (launch.binary == "scd-decode") {
    absl::StatusOr<DecodeDaemonConfig> c = DecodeConfigFromJson(*config, launch.config_path);
    if (!c.ok()) return failed(c.status());
    launch.decode = *std::move(c);
  } else {
    return failed(absl::InvalidArgumentError(
        absl::StrCat("'", launch.binary, "' is not a daemon (scd-prefill, scd-decode)")));
  }
  return launch;
}

absl::StatusOr<std::vector<UnitLaunch>> ReadUnitLaunches() {
  const std::map<std::string, std::string> env = SecretPlaceholders();
  // /etc/scd/NAME is deploy/configs/NAME (deploy/README.md installs them so).
  const ConfigLocator locate = [](const std::string& path) -> absl::StatusOr<std::string> {
    const std::string prefix = std::string(kEtcDir) + "/";
    if (!absl::StartsWith(path, prefix)) {
      return absl::InvalidArgumentError(absl::StrCat("--config ", path, " is not under ", prefix));
    }
    const std::string local = DeployPath("configs/" + path.substr(prefix.size()));
    if (!fs::exists(local)) {
      return absl::NotFoundError(absl::StrCat("--config ", path, ": ", local, " does not exist"));
    }
    return local;
  };
  std::vector<UnitLaunch> out;
  std::vector<std::pair<std::string, std::string>> wanted = {{"scd-prefill.service", ""}};
  for (const std::string& instance : DecodeInstances()) {
    wanted.emplace_back("scd-decode@.service", instance);
  }
  for (const auto& [file, instance] : wanted) {
    absl::StatusOr<std::string> text = ReadText(DeployPath("systemd/" + file));
    if (!text.ok()) return text.status();
    absl::StatusOr<SystemdUnit> unit = ParseSystemdUnit(*text);
    if (!unit.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(file, ": ", unit.status().message()));
    }
    const std::vector<std::string> exec = unit->All("Service", "ExecStart");
    if (exec.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, ": expected one ExecStart, got ", exec.size()));
    }
    absl::StatusOr<std::vector<std::string>> argv = SplitSystemdCommand(exec[0], instance, env);
    if (!argv.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, " ExecStart: ", argv.status().message()));
    }
    absl::StatusOr<Launch> launch = ReadLaunch(*argv, locate);
    if (!launch.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file, " (", instance, "): ", launch.status().message()));
    }
    out.push_back(UnitLaunch{file, instance, *std::move(unit), *std::move(launch)});
  }
  return out;
}

absl::StatusOr<DockerImage> ReadDockerImage(const std::string& path) {
  DockerImage image;
  image.file = Basename(path);
  absl::StatusOr<std::string> text = ReadText(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<DockerStage>> stages = ParseDockerfile(*text);
  if (!stages.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", stages.status().message()));
  }
  image.stages = *std::move(stages);
  if (image.stages.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no FROM"));
  auto exec_form = [&](const std::string& args,
                       const char* what) -> absl::StatusOr<std::vector<std::string>> {
    json parsed = json::parse(args, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(image.file, ": ", what, " is not in exec form"));
    }
    std::vector<std::string> out;
    for (const json& word : parsed) {
      if (!word.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(image.file, ": ", what));
      }
      out.push_back(word.get<std::string>());
    }
    return out;
  };
  for (const DockerInstruction& in : image.stages.back().instructions) {
    if (in.keyword == "COPY") {
      std::vector<std::string> words = absl::StrSplit(in.args, ' ', absl::SkipEmpty());
      bool from_build = false;
      while (!words.empty() && absl::StartsWith(words[0], "--")) {
        from_build = from_build || absl::StartsWith(words[0], "--from=");
        words.erase(words.begin());
      }
      if (words.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat(image.file, ": COPY ", in.args, " is not SRC DEST"));
      }
      (from_build ? image.from_build : image.final_copies)[words[1]] = words[0];
    } else if (in.keyword == "USER") {
      image.user = in.args;
    } else if (in.keyword == "EXPOSE") {
      for (absl::string_view word : absl::StrSplit(in.args, ' ', absl::SkipEmpty())) {
        int port = 0;
        if (!absl::SimpleAtoi(absl::StripSuffix(word, "/tcp"), &port)) {
          return absl::InvalidArgumentError(absl::StrCat(image.file, ": EXPOSE ", in.args));
        }
        image.exposed.insert(port);
      }
    } else if (in.keyword == "ENTRYPOINT") {
      absl::StatusOr<std::vector<std::string>> words = exec_form(in.args, "ENTRYPOINT");
      if (!words.ok()) return words.status();
      image.entrypoint = *std::move(words);
    } else if (in.keyword == "HEALTHCHECK") {
      const size_t cmd = in.args.find(" CMD ");
      if (cmd == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(image.file, ": HEALTHCHECK without CMD"));
      }
      absl::StatusOr<std::vector<std::string>> words =
          exec_form(in.args.substr(cmd + 5), "HEALTHCHECK CMD");
      if (!words.ok()) return words.status();
      image.healthcheck = *std::move(words);
    } else if (in.keyword == "STOPSIGNAL") {
      image.stop_signal = in.args;
    }
  }
  return image;
}

std::vector<std::string> AptPackages(const DockerStage& stage) {
  std::vector<std::string> out;
  for (const DockerInstruction& in : stage.instructions) {
    if (in.keyword != "RUN") continue;
    bool installing = false;
    for (absl::string_view word : absl::StrSplit(in.args, ' ', absl::SkipEmpty())) {
      if (word == "&&" || word == ";") installing = false;
      if (installing && word[0] != '-') out.emplace_back(word);
      if (word == "install") installing = true;
    }
  }
  return out;
}

bool PathUnder(const std::string& path, const std::string& dir) {
  const std::string d(absl::StripSuffix(dir, "/"));
  return path == d || absl::StartsWith(path, d + "/");
}

}  // namespace scd::testing
