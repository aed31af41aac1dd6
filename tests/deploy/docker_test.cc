// deploy/docker. No Docker engine runs here, so the Dockerfiles are checked for
// what makes them right by construction: bookworm stages, the build dependencies of
// scripts/setup.sh, every source folder CMake needs, a runtime stage that installs the
// packages owning the binaries' shared libraries (ldd + dpkg-query when present), a non-root
// user, an ENTRYPOINT the daemon accepts with the config it names, and ports and a health
// probe that match that config.
#include <catch2/catch.hpp>
#include <filesystem>
#include <regex>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "tests/deploy/deploy_model.h"
#include "tests/test_support.h"

namespace scd::testing {
namespace {

namespace fs = std::filesystem;

const char* const kImages[] = {"Dockerfile.prefill", "Dockerfile.decode"};

DockerImage ImageOrFail(const std::string& file) {
  absl::StatusOr<DockerImage> image = ReadDockerImage(DeployPath("docker/" + file));
  if (!image.ok()) FAIL(image.status().ToString());
  return *std::move(image);
}

// The image's ENTRYPOINT read by the daemon, its --config resolved to the file the image copies
// there from the repository.
Launch EntrypointLaunchOrFail(const DockerImage& image) {
  absl::StatusOr<Launch> launch =
      ReadLaunch(image.entrypoint, [&](const std::string& path) -> absl::StatusOr<std::string> {
        auto it = image.final_copies.find(path);
        if (it == image.final_copies.end()) {
          return absl::NotFoundError("the image copies no config to " + path);
        }
        return SourcePath(it->second);
      });
  if (!launch.ok()) FAIL(image.file << ": " << launch.status().ToString());
  return *std::move(launch);
}

std::set<std::string> AsSet(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

TEST_CASE("Dockerfiles are multi-stage bookworm builds of the setup.sh toolchain", "[cpu]") {
  const std::vector<std::string> setup = SetupPackages();
  REQUIRE(setup.size() > 10);
  // The folders CMake adds: the build stage must copy each of them.
  std::set<std::string> cmake_dirs;
  const std::string top = ReadFileOrFail(SourcePath("CMakeLists.txt"));
  const std::regex add_subdirectory(R"(\nadd_subdirectory\((\w+)\))");
  for (std::sregex_iterator it(top.begin(), top.end(), add_subdirectory), end; it != end; ++it) {
    cmake_dirs.insert((*it)[1]);
  }
  REQUIRE(cmake_dirs.count("common") == 1);

  std::string first_build_stage;
  for (const char* file : kImages) {
    INFO(file);
    const DockerImage image = ImageOrFail(file);
    REQUIRE(image.stages.size() >= 2);
    for (const DockerStage& stage : image.stages) {
      CHECK(absl::StartsWith(stage.image, "debian:bookworm"));
    }
    const DockerStage& build = image.stages.front();
    CHECK(build.image == "debian:bookworm");
    CHECK(!build.name.empty());
    CHECK(image.stages.back().image == "debian:bookworm-slim");
    // Exactly what scripts/setup.sh installs, so the image builds as CI does.
    CHECK(AptPackages(build) == setup);
    // Identical build stages: BuildKit builds them once for both images.
    if (first_build_stage.empty()) first_build_stage = build.text;
    CHECK(build.text == first_build_stage);

    std::set<std::string> copied;
    std::string cmake_commands;
    for (const DockerInstruction& in : build.instructions) {
      if (in.keyword == "COPY") {
        const std::vector<std::string> words = absl::StrSplit(in.args, ' ', absl::SkipEmpty());
        REQUIRE(words.size() == 2);
        CHECK(fs::exists(SourcePath(words[0])));
        copied.insert(std::string(absl::StripSuffix(words[0], "/")));
      }
      if (in.keyword == "RUN" && absl::StrContains(in.args, "cmake ")) cmake_commands += in.args;
    }
    CHECK(copied.count("CMakeLists.txt") == 1);
    for (const std::string& dir : cmake_dirs) {
      INFO("add_subdirectory(" << dir << ")");
      CHECK(copied.count(dir) == 1);
    }
    CHECK_THAT(cmake_commands, Catch::Contains("-G Ninja") &&
                                   Catch::Contains("-DCMAKE_BUILD_TYPE=Release") &&
                                   Catch::Contains("-DSCD_CUDA=OFF"));
    // Every binary the final stage takes from the build stage is one the build stage builds
    // and one our CMake makes.
    REQUIRE(!image.from_build.empty());
    for (const auto& [destination, source] : image.from_build) {
      const std::string binary = fs::path(source).filename();
      INFO(source);
      CHECK(PathUnder(source, "/src/build/bin"));
      CHECK(absl::StrContains(cmake_commands, "--target"));
      CHECK(absl::StrContains(cmake_commands, " " + binary));
      CHECK(fs::exists(BinPath(binary)));
      CHECK(fs::path(destination).filename() == binary);
    }
    CHECK(fs::exists(DeployPath("docker/" + std::string(file) + ".dockerignore")));
  }
}

TEST_CASE("Dockerfiles run the daemon as a non-root user with its config, ports and probe",
          "[cpu]") {
  absl::StatusOr<std::vector<UnitLaunch>> units = ReadUnitLaunches();
  if (!units.ok()) FAIL(units.status().ToString());
  for (const char* file : kImages) {
    INFO(file);
    const DockerImage image = ImageOrFail(file);
    CHECK(!image.user.empty());
    const std::string user = image.user.substr(0, image.user.find(':'));
    CHECK(user != "root");
    CHECK(user != "0");
    REQUIRE(!image.entrypoint.empty());
    // The ENTRYPOINT binary is the one copied from the build stage, at the path the systemd
    // unit uses too.
    CHECK(image.from_build.count(image.entrypoint[0]) == 1);
    const Launch launch = EntrypointLaunchOrFail(image);
    for (const UnitLaunch& u : *units) {
      if (u.launch.binary == launch.binary) CHECK(u.launch.argv[0] == image.entrypoint[0]);
    }
    // Every other file copied in exists in the repository.
    for (const auto& [destination, source] : image.final_copies) {
      INFO(source);
      CHECK(fs::exists(SourcePath(source)));
    }
    CHECK(image.exposed == launch.ports());
    // HEALTHCHECK runs the probe the image copies, on the config's HTTP port.
    REQUIRE(image.healthcheck.size() == 3);
    CHECK(image.final_copies.count(image.healthcheck[0]) == 1);
    CHECK(image.final_copies.at(image.healthcheck[0]) == "deploy/docker/scd-healthcheck");
    CHECK(image.healthcheck[1] == std::to_string(launch.http_port()));
    CHECK((image.healthcheck[2] == "/health" || image.healthcheck[2] == "/ready"));
    CHECK(image.stop_signal == "SIGTERM");
  }
}

// The shared libraries `binary` loads (ldd lists them transitively), each with the paths dpkg
// may know it by: usrmerge moved /lib under /usr, and ldd prints the soname link.
std::map<std::string, std::vector<std::string>> LinkedLibraries(const std::string& binary) {
  const CommandResult ldd = RunCommand("ldd " + ShellQuote(binary));
  INFO(ldd.output);
  REQUIRE(ldd.exit_code == 0);
  std::map<std::string, std::vector<std::string>> out;
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(ldd.output, '\n', absl::SkipEmpty()))) {
    // "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"
    const size_t arrow = line.find("=> /");
    if (arrow == std::string::npos) continue;
    const std::string path = line.substr(arrow + 3, line.find(' ', arrow + 3) - arrow - 3);
    std::vector<std::string>& candidates = out[path];
    candidates = {path, "/usr" + path};
    std::error_code ec;
    const std::string real = fs::canonical(path, ec).string();
    if (!ec) {
      candidates.insert(candidates.end(), {real, std::string(absl::StripPrefix(real, "/usr"))});
    }
  }
  REQUIRE(!out.empty());
  return out;
}

// The runtime stage installs exactly the Debian packages that own the shared libraries the
// binaries load. Sanitizer and CUDA runtimes, which the image's CPU Release build does not
// use, are left out; so is a library no package owns.
TEST_CASE("Dockerfile runtime stages install the packages of the linked libraries", "[cpu]") {
  if (!CommandExists("ldd") || !CommandExists("dpkg-query")) {
    WARN("ldd or dpkg-query not found: runtime packages not checked");
    return;
  }
#ifdef SCD_SANITIZED_BUILD
  // The images are built from the Release build. This build's binaries are instrumented: they
  // load the sanitizer runtimes and keep libraries the Release link drops (the ASan daemons
  // need libpng16, the Release ones do not). Their library list says nothing about the
  // images; the Release suite checks it.
  WARN("sanitizer build (" SCD_SANITIZED_BUILD
       "): these binaries are not the ones the images "
       "ship; runtime packages are checked by the Release build's test_deploy");
  return;
#endif
  struct Binary {
    std::string path;
    std::set<std::string> installed;  // by its image's runtime stage
    std::map<std::string, std::vector<std::string>> libraries;
  };
  std::vector<Binary> binaries;
  std::string all_paths;
  for (const char* file : kImages) {
    const DockerImage image = ImageOrFail(file);
    for (const auto& [destination, source] : image.from_build) {
      Binary b{BinPath(fs::path(source).filename()), AsSet(AptPackages(image.stages.back())), {}};
      b.libraries = LinkedLibraries(b.path);
      for (const auto& [lib, paths] : b.libraries) {
        for (const std::string& p : paths) all_paths += " " + ShellQuote(p);
      }
      binaries.push_back(std::move(b));
    }
  }
  // One dpkg-query for all: "libfoo1:amd64: /usr/lib/x86_64-linux-gnu/libfoo.so.1"; paths no
  // package owns are reported on stderr and left out.
  const CommandResult owners = RunCommand("dpkg-query -S" + all_paths);
  std::map<std::string, std::string> owner_of;
  for (const std::string& line :
       std::vector<std::string>(absl::StrSplit(owners.output, '\n', absl::SkipEmpty()))) {
    const size_t sep = line.find(": /");
    if (sep == std::string::npos) continue;
    const std::string package = line.substr(0, sep);
    owner_of[line.substr(sep + 2)] = package.substr(0, package.find(':'));  // drop ":amd64"
  }
  const std::regex sanitizer("lib(asan|ubsan|tsan|lsan)[0-9]*");
  for (const Binary& b : binaries) {
    std::set<std::string> needed;
    bool complete = true;
    for (const auto& [lib, paths] : b.libraries) {
      std::string package;
      for (const std::string& p : paths) {
        if (owner_of.count(p) != 0) package = owner_of.at(p);
      }
      if (package.empty() || absl::StrContains(lib, "cuda") || absl::StrContains(lib, "nvidia")) {
        WARN(b.path << ": " << lib << " is not from a Debian package; not checked");
        complete = false;
        continue;
      }
      if (std::regex_match(package, sanitizer)) {
        complete = false;
        continue;
      }
      INFO(b.path << " loads " << lib << " from package " << package);
      CHECK(b.installed.count(package) == 1);
      needed.insert(package);
    }
    // Nothing extra either, when every library was accounted for.
    INFO(b.path);
    if (complete) CHECK(b.installed == needed);
  }
}

}  // namespace
}  // namespace scd::testing
