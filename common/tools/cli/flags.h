// FlagParser: the small command-line parser the tools and benchmarks share. Abseil's flags
// library cannot spell the interface's dashed names (`--max-tokens`: flag names are C++
// identifiers), so this one is hand-rolled and deliberately tiny:
//   --name value | --name=value, bare --name for booleans, comma-separated lists of integers.
// No tool takes positional arguments, so any other argument is an error (a stray word is
// usually a value whose flag was mistyped or dropped). Unknown flags, unparsable or
// out-of-range numbers, missing required flags and stray arguments are InvalidArgument errors
// that name the argument.
//
// Every tool handles its command line the same way (ParseOrExit): --help prints the usage to
// stdout and exits 0; a bad command line prints "<program>: <message>" and the usage to
// stderr and exits kExitUsage (2); a failure after parsing prints "<program>: <message>" and
// exits kExitFailure (1) (Fail).
#ifndef SCD_COMMON_TOOLS_CLI_FLAGS_H_
#define SCD_COMMON_TOOLS_CLI_FLAGS_H_

#include <cstdint>
#include <iostream>
#include <optional>
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
  // "1,2,3": no empty items, spaces around a number allowed as for every integer flag; "" is
  // the empty list. A later occurrence replaces an earlier one, as for every other flag.
  void AddIntList(std::string name, std::vector<int>* out, std::string help);
  // Strings that accumulate: every occurrence appends its comma-separated items ("--url A
  // --url B" and "--url A,B" give the same list); the first occurrence replaces the default.
  void AddStringList(std::string name, std::vector<std::string>* out, std::string help,
                     bool required = false);

  // Parses argv[1..argc). On error nothing is guaranteed about the outputs.
  absl::Status Parse(int argc, const char* const* argv);

  // Parse, then what every tool does with the outcome: on --help prints the usage to `out` and
  // returns 0; on an error prints "<program>: <message>", a blank line and the usage to `err`
  // and returns kExitUsage; otherwise returns nullopt and the tool goes on.
  std::optional<int> ParseOrExit(int argc, const char* const* argv, std::ostream& out = std::cout,
                                 std::ostream& err = std::cerr);
  // For checks the tool makes after parsing (flags that exclude each other, ranges): the same
  // output as a parse error; returns kExitUsage.
  int UsageError(std::string_view message, std::ostream& err = std::cerr) const;
  int UsageError(const absl::Status& status, std::ostream& err = std::cerr) const;
  // A failure after parsing (a missing model, an unwritable output): "<program>: <message>"
  // to `err`; returns kExitFailure.
  int Fail(std::string_view message, std::ostream& err = std::cerr) const;
  int Fail(const absl::Status& status, std::ostream& err = std::cerr) const;

  // True when --help or -h was given (Parse then skips the required-flag check).
  bool help_requested() const { return help_requested_; }
  // Whether the flag appeared on the command line.
  bool Seen(std::string_view name) const;

  std::string Usage() const;

 private:
  enum class Type { kString, kInt, kUint64, kFloat, kBool, kIntList, kStringList };
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
  bool help_requested_ = false;
};

// The command line as a shell would need it typed again (arguments quoted where needed), so
// that benchmark reports can print exactly what produced them.
std::string QuotedCommandLine(int argc, const char* const* argv);

}  // namespace scd::cli

#endif  // SCD_COMMON_TOOLS_CLI_FLAGS_H_
