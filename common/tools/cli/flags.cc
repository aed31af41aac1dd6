// FlagParser implementation. Values are parsed strictly (absl::SimpleAtoi/SimpleAtof on the
// whole string or list item, finite floats only), so "12x", "" and "nan" are errors rather than
// 12, 0, NaN, and "1,,2" is an error rather than [1, 2].
#include "common/tools/cli/flags.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace scd::cli {

FlagParser::FlagParser(std::string program, std::string synopsis)
    : program_(std::move(program)), synopsis_(std::move(synopsis)) {}

void FlagParser::Add(std::string name, Type type, void* out, std::string help,
                     std::string default_text, bool required) {
  flags_.push_back(
      Flag{std::move(name), type, out, std::move(help), std::move(default_text), required, false});
}

void FlagParser::AddString(std::string name, std::string* out, std::string help, bool required) {
  Add(std::move(name), Type::kString, out, std::move(help),
      out->empty() ? "" : absl::StrCat("\"", *out, "\""), required);
}

void FlagParser::AddInt(std::string name, int* out, std::string help, bool required) {
  Add(std::move(name), Type::kInt, out, std::move(help), absl::StrCat(*out), required);
}

void FlagParser::AddUint64(std::string name, uint64_t* out, std::string help) {
  Add(std::move(name), Type::kUint64, out, std::move(help), absl::StrCat(*out), false);
}

void FlagParser::AddFloat(std::string name, float* out, std::string help) {
  Add(std::move(name), Type::kFloat, out, std::move(help), absl::StrCat(*out), false);
}

void FlagParser::AddBool(std::string name, bool* out, std::string help) {
  Add(std::move(name), Type::kBool, out, std::move(help), *out ? "true" : "false", false);
}

void FlagParser::AddIntList(std::string name, std::vector<int>* out, std::string help) {
  Add(std::move(name), Type::kIntList, out, std::move(help), absl::StrJoin(*out, ","), false);
}

void FlagParser::AddStringList(std::string name, std::vector<std::string>* out, std::string help,
                               bool required) {
  Add(std::move(name), Type::kStringList, out, std::move(help), absl::StrJoin(*out, ","), required);
}

FlagParser::Flag* FlagParser::Find(std::string_view name) {
  for (Flag& flag : flags_) {
    if (flag.name == name) return &flag;
  }
  return nullptr;
}

bool FlagParser::Seen(std::string_view name) const {
  for (const Flag& flag : flags_) {
    if (flag.name == name) return flag.seen;
  }
  return false;
}

absl::Status FlagParser::Assign(Flag& flag, std::string_view value) {
  auto bad = [&](std::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: \"%s\" is not %s", flag.name, value, what));
  };
  // Debian's Abseil has its own absl::string_view, distinct from std::string_view.
  const absl::string_view text(value.data(), value.size());
  switch (flag.type) {
    case Type::kString:
      *static_cast<std::string*>(flag.out) = std::string(value);
      return absl::OkStatus();
    case Type::kInt: {
      int v = 0;
      if (!absl::SimpleAtoi(text, &v)) return bad("an integer");
      *static_cast<int*>(flag.out) = v;
      return absl::OkStatus();
    }
    case Type::kUint64: {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(text, &v)) return bad("a non-negative integer");
      *static_cast<uint64_t*>(flag.out) = v;
      return absl::OkStatus();
    }
    case Type::kFloat: {
      float v = 0;
      if (!absl::SimpleAtof(text, &v) || !std::isfinite(v)) return bad("a finite number");
      *static_cast<float*>(flag.out) = v;
      return absl::OkStatus();
    }
    case Type::kBool: {
      bool v = false;
      if (!absl::SimpleAtob(text, &v)) return bad("true or false");
      *static_cast<bool*>(flag.out) = v;
      return absl::OkStatus();
    }
    case Type::kIntList: {
      std::vector<int> v;
      if (!text.empty()) {
        for (absl::string_view item : absl::StrSplit(text, ',')) {
          int x = 0;
          if (!absl::SimpleAtoi(item, &x)) return bad("a comma-separated list of integers");
          v.push_back(x);
        }
      }
      *static_cast<std::vector<int>*>(flag.out) = std::move(v);
      return absl::OkStatus();
    }
    case Type::kStringList: {
      auto* v = static_cast<std::vector<std::string>*>(flag.out);
      if (!flag.seen) v->clear();
      const size_t before = v->size();
      for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
        v->push_back(std::string(absl::StripAsciiWhitespace(item)));
      }
      if (v->size() == before) return bad("a comma-separated list");
      return absl::OkStatus();
    }
  }
  return absl::InternalError("unknown flag type");
}

absl::Status FlagParser::Parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      help_requested_ = true;
      continue;
    }
    if (arg.size() < 3 || arg.substr(0, 2) != "--") {  // "x", "-", "--", "-x" are no flags
      const bool dashed = arg.size() >= 2 && arg[0] == '-' && arg[1] != '-';
      return absl::InvalidArgumentError(
          absl::StrFormat("%s \"%s\" (flags are spelled --name)",
                          dashed ? "unknown option" : "unexpected argument", arg));
    }
    std::string_view body = arg.substr(2);
    std::string_view name = body;
    std::string_view value;
    bool has_value = false;
    if (size_t eq = body.find('='); eq != std::string_view::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    Flag* flag = Find(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown flag --%s", name));
    }
    if (!has_value) {
      if (flag->type == Type::kBool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrFormat("--%s needs a value", name));
      }
    }
    if (absl::Status s = Assign(*flag, value); !s.ok()) return s;
    flag->seen = true;
  }
  if (help_requested_) return absl::OkStatus();
  std::vector<std::string> missing;
  for (const Flag& flag : flags_) {
    if (flag.required && !flag.seen) missing.push_back(absl::StrCat("--", flag.name));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "missing required flag", missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", ")));
  }
  return absl::OkStatus();
}

std::optional<int> FlagParser::ParseOrExit(int argc, const char* const* argv, std::ostream& out,
                                           std::ostream& err) {
  if (absl::Status s = Parse(argc, argv); !s.ok()) return UsageError(s, err);
  if (help_requested_) {
    out << Usage();
    return 0;
  }
  return std::nullopt;
}

int FlagParser::UsageError(std::string_view message, std::ostream& err) const {
  err << program_ << ": " << message << "\n\n" << Usage();
  return kExitUsage;
}

int FlagParser::UsageError(const absl::Status& status, std::ostream& err) const {
  return UsageError(std::string_view(status.message().data(), status.message().size()), err);
}

int FlagParser::Fail(std::string_view message, std::ostream& err) const {
  err << program_ << ": " << message << "\n";
  return kExitFailure;
}

int FlagParser::Fail(const absl::Status& status, std::ostream& err) const {
  return Fail(std::string_view(status.message().data(), status.message().size()), err);
}

std::string FlagParser::Usage() const {
  std::string text = absl::StrCat("usage: ", program_, " ", synopsis_, "\n");
  size_t width = 0;
  for (const Flag& flag : flags_) width = std::max(width, flag.name.size());
  for (const Flag& flag : flags_) {
    std::string note;
    if (flag.required) {
      note = " (required)";
    } else if (!flag.default_text.empty()) {
      note = absl::StrCat(" (default ", flag.default_text, ")");
    }
    absl::StrAppendFormat(&text, "  --%-*s  %s%s\n", static_cast<int>(width), flag.name, flag.help,
                          note);
  }
  return text;
}

std::string QuotedCommandLine(int argc, const char* const* argv) {
  std::vector<std::string> parts;
  for (int i = 0; i < argc; ++i) {
    std::string_view arg = argv[i];
    bool plain = !arg.empty();
    for (char c : arg) {
      bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.' || c == '/' || c == '=' || c == ':' ||
                  c == ',' || c == '+';
      if (!safe) plain = false;
    }
    if (plain) {
      parts.emplace_back(arg);
      continue;
    }
    std::string quoted = "'";
    for (char c : arg) {
      if (c == '\'') {
        quoted += "'\\''";
      } else {
        quoted += c;
      }
    }
    quoted += "'";
    parts.push_back(std::move(quoted));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace scd::cli
