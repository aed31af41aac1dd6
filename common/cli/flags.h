// FlagParser: the small command-line parser the tools and benchmarks share. Abseil's flags
// library cannot spell the interface's dashed names (`--max-tokens`: flag names are C++
// identifiers), so this one is hand-rolled and deliberately tiny:
//   --name value | --name=value, bare --name for booleans, `--` ends flags, and every other
//   argument is positional. Unknown flags, unparsable or out-of-range numbers and missing
//   required flags are InvalidArgument errors that name the flag; tools exit with
//   kExitUsage (2) for those and kExitFailure (1) for failures after parsing.
#ifndef SCD_COMMON_CLI_FLAGS_H_
#define SCD_COMMON_CLI_FLAGS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace scd::cli {

inline constexpr int kExitFailure = 1;  // the command ran and failed (missing model, ...)
inline constexpr int kExitUsage = 2;    // the command line itself is wrong

class FlagParser {
 public:
  // `synopsis` is the usage line after the program name, e.g. "--model DIR [options]".
  FlagParser(std::string program, std::string synopsis);

  // Registers a flag writing into `*out`; the value already in `*out` is its default and is
  // shown in the help text. `name` is given without the leading dashes.
  void AddString(std::string name, std::string* out, std::string help, bool required = false);
  void AddInt(std::string name, int* out, std::string help, bool required = false);
  void AddUint64(std::string name, uint64_t* out, std::string help);
  void AddFloat(std::string name, float* out, std::string help);
  void AddBool(std::string name, bool* out, std::string help);

  // Parses argv[1..argc). On error nothing is guaranteed about the outputs.
  absl::Status Parse(int argc, const char* const* argv);

  // True when --help or -h was given (Parse then skips the required-flag check).
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }
  // Whether the flag appeared on the command line.
  bool Seen(std::string_view name) const;

  std::string Usage() const;

 private:
  enum class Type { kString, kInt, kUint64, kFloat, kBool };
  struct Flag {
    std::string name;
    Type type;
    void* out;
    std::string help;
    std::string default_text;
    bool required = false;
    bool seen = false;
  };
  void Add(std::string name, Type type, void* out, std::string help, std::string default_text,
           bool required);
  Flag* Find(std::string_view name);
  static absl::Status Assign(Flag& flag, std::string_view value);

  std::string program_;
  std::string synopsis_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

// The command line as a shell would need it typed again (arguments quoted where needed), so
// that benchmark reports can print exactly what produced them.
std::string QuotedCommandLine(int argc, const char* const* argv);

}  // namespace scd::cli

#endif  // SCD_COMMON_CLI_FLAGS_H_
