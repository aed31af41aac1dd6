// See test_support.h.
#include "tests/test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace scd::testing {
namespace {

struct TempRoot {
  std::string path;
  TempRoot() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "scd-test-XXXXXX").string();
    char* made = mkdtemp(tmpl.data());
    if (made != nullptr) path = made;
  }
  ~TempRoot() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// The environment variable `name` when set and non-empty, else the path compiled in.
std::filesystem::path Root(const char* name, const char* compiled) {
  const char* env = std::getenv(name);
  return std::filesystem::path(env != nullptr && *env != '\0' ? env : compiled);
}

}  // namespace

std::string SharedPath(const std::string& relative) {
  std::filesystem::path p = Root("SCD_SHARED_DIR", SCD_SHARED_DIR) / relative;
  if (!std::filesystem::exists(p)) {
    FAIL("missing fixture " << p.string()
                            << " (the shared fixtures must sit at ../shared beside the repo; "
                               "else set SCD_SHARED_DIR or configure with -DSCD_SHARED_DIR=...)");
  }
  return std::filesystem::weakly_canonical(p).string();
}

std::string SourceFile(const std::string& relative) {
  std::filesystem::path p = Root("SCD_SOURCE_DIR", SCD_SOURCE_DIR) / relative;
  if (!std::filesystem::exists(p)) {
    FAIL("missing source-tree file " << p.string()
                                     << " (set SCD_SOURCE_DIR when the tests run outside the "
                                        "tree they were built from)");
  }
  return std::filesystem::weakly_canonical(p).string();
}

std::string TempDir() {
  static TempRoot root;
  static int counter = 0;
  REQUIRE(!root.path.empty());
  std::filesystem::path p = std::filesystem::path(root.path) / std::to_string(counter++);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string ReadFileOrFail(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) FAIL("cannot read " << path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t got = 0;
  while ((got = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, got);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool CommandExists(const std::string& name) {
  return RunCommand("command -v " + ShellQuote(name) + " >/dev/null").exit_code == 0;
}

std::string ShellQuote(const std::string& word) {
  std::string out = "'";
  for (const char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::vector<float> NormalFloats(size_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace scd::testing
