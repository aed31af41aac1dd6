// Readers for the files under deploy/ that no library of ours parses: systemd unit files
// (INI with systemd's command-line quoting and ${VAR} expansion), Dockerfiles (instructions and
// stages), docker compose's ${VAR} interpolation, and duration strings. They implement only
// what deploy/ uses and fail loudly (absl::Status) on anything else, so that a construct the
// test does not understand is a failure, not a silent pass. Plus a command runner for the
// host tools the test consults (systemd-analyze, ldd, dpkg-query, bash).
#ifndef SCD_TESTS_DEPLOY_DEPLOY_FILES_H_
#define SCD_TESTS_DEPLOY_DEPLOY_FILES_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/test_support.h"  // RunCommand, CommandExists, ShellQuote

namespace scd::testing {

// One `Key=Value` of a unit file; `section` without brackets. Continuation lines (a trailing
// backslash) are joined with a space, as systemd does.
struct UnitEntry {
  std::string section;
  std::string key;
  std::string value;
  int line = 0;
};

struct SystemdUnit {
  std::vector<UnitEntry> entries;
  // Every value of `key` in `section`, in file order.
  std::vector<std::string> All(const std::string& section, const std::string& key) const;
  // The last value (systemd's rule for single-valued keys), or nullopt when absent.
  std::optional<std::string> Last(const std::string& section, const std::string& key) const;
};

absl::StatusOr<SystemdUnit> ParseSystemdUnit(const std::string& text);

// Splits a systemd command line into words the way systemd.service(5) "Command lines" does:
// whitespace separates words, "..." and '...' quote (C escapes inside double quotes), then
// specifiers (%i -> `instance`, %% -> %) and environment variables (${NAME} inside a word,
// $NAME alone as a word is split on whitespace, $$ -> $) are expanded from `env`. A variable
// missing from `env` is an error (systemd would expand it to nothing).
absl::StatusOr<std::vector<std::string>> SplitSystemdCommand(
    const std::string& command, const std::string& instance,
    const std::map<std::string, std::string>& env);

// A Dockerfile: its stages in order, each with its FROM line and instructions (keyword in
// upper case, arguments with continuation lines joined and comment lines dropped).
struct DockerInstruction {
  std::string keyword;
  std::string args;
};
struct DockerStage {
  std::string image;  // FROM's image
  std::string name;   // after AS, or empty
  std::string text;   // the stage's instructions as written (without comments), for equality
  std::vector<DockerInstruction> instructions;
};
absl::StatusOr<std::vector<DockerStage>> ParseDockerfile(const std::string& text);

// docker compose interpolation: $$ -> $, and ${NAME}, ${NAME:-x}, ${NAME-x}, ${NAME:?x},
// ${NAME?x}, ${NAME:+x}, ${NAME+x} with NAME looked up in `env`. A name missing from `env`
// takes its `-` default when it has one and is an error otherwise. `used` collects the names.
absl::StatusOr<std::string> InterpolateCompose(const std::string& text,
                                               const std::map<std::string, std::string>& env,
                                               std::vector<std::string>* used = nullptr);

// "45s", "45", "1min", "2m", "500ms", "1h" (systemd and compose spellings) as a duration.
absl::StatusOr<absl::Duration> ParseDurationText(const std::string& text);

// The port of "host:port" (or of a bare "port"); error when it is not a number in [0, 65535].
absl::StatusOr<int> PortOf(const std::string& address);
// The host of "host:port".
std::string HostOf(const std::string& address);

}  // namespace scd::testing

#endif  // SCD_TESTS_DEPLOY_DEPLOY_FILES_H_
