// See deploy_files.h.
#include "tests/deploy/deploy_files.h"

#include <sys/wait.h>

#include <cctype>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/status_macros.h"

namespace scd::testing {
namespace {

bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::vector<std::string> Lines(const std::string& text) { return absl::StrSplit(text, '\n'); }

// Expands systemd specifiers in one word: %i and %%; any other specifier is an error.
absl::StatusOr<std::string> ExpandSpecifiers(const std::string& word, const std::string& instance) {
  std::string out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '%') {
      out.push_back(word[i]);
      continue;
    }
    if (i + 1 >= word.size()) return absl::InvalidArgumentError("'%' at the end of a word");
    const char s = word[++i];
    if (s == 'i') {
      out += instance;
    } else if (s == '%') {
      out.push_back('%');
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("specifier %", std::string(1, s), " is not understood by this test"));
    }
  }
  return out;
}

// ${NAME} anywhere in the word and $$; `$NAME` words are handled by the caller.
absl::StatusOr<std::string> ExpandBraced(const std::string& word,
                                         const std::map<std::string, std::string>& env) {
  std::string out;
  for (size_t i = 0; i < word.size(); ++i) {
    if (word[i] != '$') {
      out.push_back(word[i]);
      continue;
    }
    if (i + 1 < word.size() && word[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    if (i + 1 < word.size() && word[i + 1] == '{') {
      const size_t close = word.find('}', i + 2);
      if (close == std::string::npos) return absl::InvalidArgumentError("unterminated ${");
      const std::string name = word.substr(i + 2, close - i - 2);
      auto it = env.find(name);
      if (it == env.end()) {
        return absl::NotFoundError(absl::StrCat("variable ${", name, "} is not defined"));
      }
      out += it->second;
      i = close;
      continue;
    }
    out.push_back('$');  // systemd leaves a '$' that starts no variable as it is
  }
  return out;
}

// One word of a command line with its quotes removed; `bare_variable` marks an unquoted word
// that is exactly $NAME.
struct CommandWord {
  std::string text;
  bool bare_variable = false;
};

// The character that `\c` stands for; escapes systemd knows but the units here never use
// are errors.
absl::StatusOr<char> Unescape(char c) {
  switch (c) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case '\\':
    case '"':
    case '\'':
    case ' ':
      return c;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("escape \\", std::string(1, c), " is not understood by this test"));
  }
}

bool IsBareVariable(const std::string& text) {
  if (text.size() < 2 || text[0] != '$' || !IsNameStart(text[1])) return false;
  for (size_t k = 1; k < text.size(); ++k) {
    if (!IsNameChar(text[k])) return false;
  }
  return true;
}

// Reads the word that starts at command[i] (not a space) up to the next unquoted space, and
// leaves `i` there.
absl::StatusOr<CommandWord> ReadCommandWord(const std::string& command, size_t& i) {
  CommandWord word;
  bool quoted = false;
  char quote = 0;
  for (; i < command.size(); ++i) {
    const char c = command[i];
    if (quote == 0 && std::isspace(static_cast<unsigned char>(c))) break;
    if (quote == 0 && (c == '"' || c == '\'')) {
      quote = c;
      quoted = true;
    } else if (quote != 0 && c == quote) {
      quote = 0;
    } else if (c == '\\' && quote != '\'') {
      if (++i >= command.size()) {
        return absl::InvalidArgumentError("trailing backslash in a command line");
      }
      SCD_ASSIGN_OR_RETURN(const char unescaped, Unescape(command[i]));
      word.text.push_back(unescaped);
    } else {
      word.text.push_back(c);
    }
  }
  if (quote != 0) return absl::InvalidArgumentError("unterminated quote in a command line");
  word.bare_variable = !quoted && IsBareVariable(word.text);
  return word;
}

absl::StatusOr<std::vector<CommandWord>> SplitCommandWords(const std::string& command) {
  std::vector<CommandWord> words;
  size_t i = 0;
  while (i < command.size()) {
    if (std::isspace(static_cast<unsigned char>(command[i]))) {
      ++i;
      continue;
    }
    SCD_ASSIGN_OR_RETURN(CommandWord word, ReadCommandWord(command, i));
    words.push_back(std::move(word));
  }
  return words;
}

}  // namespace

std::vector<std::string> SystemdUnit::All(const std::string& section,
                                          const std::string& key) const {
  std::vector<std::string> out;
  for (const UnitEntry& e : entries) {
    if (e.section == section && e.key == key) out.push_back(e.value);
  }
  return out;
}

std::optional<std::string> SystemdUnit::Last(const std::string& section,
                                             const std::string& key) const {
  std::vector<std::string> all = All(section, key);
  if (all.empty()) return std::nullopt;
  return all.back();
}

absl::StatusOr<SystemdUnit> ParseSystemdUnit(const std::string& text) {
  SystemdUnit unit;
  std::string section;
  const std::vector<std::string> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const int number = static_cast<int>(i) + 1;
    std::string line(absl::StripAsciiWhitespace(lines[i]));
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']') {
        return absl::InvalidArgumentError(absl::StrCat("line ", number, ": bad section header"));
      }
      section = line.substr(1, line.size() - 2);
      continue;
    }
    // Continuations: a trailing backslash becomes a space; comment lines inside are skipped.
    while (!line.empty() && line.back() == '\\') {
      line.back() = ' ';
      while (++i < lines.size()) {
        const std::string next(absl::StripAsciiWhitespace(lines[i]));
        if (!next.empty() && (next[0] == '#' || next[0] == ';')) continue;
        line += next;
        break;
      }
    }
    const size_t eq = line.find('=');
    if (section.empty() || eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", number, ": expected Key=Value inside a [Section]"));
    }
    unit.entries.push_back(
        UnitEntry{section, std::string(absl::StripAsciiWhitespace(line.substr(0, eq))),
                  std::string(absl::StripAsciiWhitespace(line.substr(eq + 1))), number});
  }
  return unit;
}

absl::StatusOr<std::vector<std::string>> SplitSystemdCommand(
    const std::string& command, const std::string& instance,
    const std::map<std::string, std::string>& env) {
  SCD_ASSIGN_OR_RETURN(std::vector<CommandWord> words, SplitCommandWords(command));
  std::vector<std::string> out;
  for (const CommandWord& word : words) {
    SCD_ASSIGN_OR_RETURN(std::string text, ExpandSpecifiers(word.text, instance));
    if (word.bare_variable) {
      auto it = env.find(text.substr(1));
      if (it == env.end()) {
        return absl::NotFoundError(absl::StrCat("variable ", text, " is not defined"));
      }
      for (absl::string_view part : absl::StrSplit(it->second, ' ', absl::SkipEmpty())) {
        out.emplace_back(part);
      }
      continue;
    }
    SCD_ASSIGN_OR_RETURN(std::string expanded, ExpandBraced(text, env));
    out.push_back(std::move(expanded));
  }
  return out;
}

absl::StatusOr<std::vector<DockerStage>> ParseDockerfile(const std::string& text) {
  std::vector<DockerStage> stages;
  const std::vector<std::string> lines = Lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string line(absl::StripAsciiWhitespace(lines[i]));
    if (line.empty() || line[0] == '#') continue;
    while (!line.empty() && line.back() == '\\') {
      line.pop_back();
      while (++i < lines.size()) {
        const std::string next(absl::StripAsciiWhitespace(lines[i]));
        if (next.empty() || next[0] == '#') continue;
        line += " " + next;
        break;
      }
    }
    const size_t space = line.find_first_of(" \t");
    if (space == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("instruction without arguments: ", line));
    }
    DockerInstruction instruction{absl::AsciiStrToUpper(line.substr(0, space)),
                                  std::string(absl::StripAsciiWhitespace(line.substr(space)))};
    if (instruction.keyword == "FROM") {
      std::vector<std::string> parts =
          absl::StrSplit(instruction.args, absl::ByAnyChar(" \t"), absl::SkipEmpty());
      DockerStage stage;
      if (parts.size() == 1) {
        stage.image = parts[0];
      } else if (parts.size() == 3 && absl::AsciiStrToUpper(parts[1]) == "AS") {
        stage.image = parts[0];
        stage.name = parts[2];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("FROM not understood: ", line));
      }
      stages.push_back(std::move(stage));
    } else if (stages.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("instruction before FROM: ", line));
    }
    absl::StrAppend(&stages.back().text, instruction.keyword, " ", instruction.args, "\n");
    stages.back().instructions.push_back(std::move(instruction));
  }
  return stages;
}

absl::StatusOr<std::string> InterpolateCompose(const std::string& text,
                                               const std::map<std::string, std::string>& env,
                                               std::vector<std::string>* used) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '$') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 1 < text.size() && text[i + 1] == '$') {
      out.push_back('$');
      ++i;
      continue;
    }
    std::string name, op, rest;
    if (i + 1 < text.size() && text[i + 1] == '{') {
      const size_t close = text.find('}', i + 2);
      if (close == std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("unterminated ${ in '", text, "'"));
      }
      const std::string inner = text.substr(i + 2, close - i - 2);
      size_t k = 0;
      while (k < inner.size() && IsNameChar(inner[k])) ++k;
      name = inner.substr(0, k);
      for (const char* candidate : {":-", ":?", ":+", "-", "?", "+"}) {
        if (absl::StartsWith(absl::string_view(inner).substr(k), candidate)) {
          op = candidate;
          break;
        }
      }
      rest = inner.substr(std::min(inner.size(), k + op.size()));
      if (op.empty() && k != inner.size()) {
        return absl::InvalidArgumentError(absl::StrCat("bad interpolation ${", inner, "}"));
      }
      i = close;
    } else {
      size_t k = i + 1;
      while (k < text.size() && IsNameChar(text[k])) ++k;
      name = text.substr(i + 1, k - i - 1);
      i = k - 1;
    }
    if (name.empty() || !IsNameStart(name[0])) {
      return absl::InvalidArgumentError(absl::StrCat("bad interpolation in '", text, "'"));
    }
    if (used != nullptr) used->push_back(name);
    auto it = env.find(name);
    const bool set = it != env.end();
    const bool empty = !set || it->second.empty();
    if (op == ":-" || op == "-") {
      out += (op == ":-" ? empty : !set) ? rest : it->second;
    } else if (op == ":?" || op == "?") {
      if (op == ":?" ? empty : !set) {
        return absl::FailedPreconditionError(absl::StrCat(name, ": ", rest));
      }
      out += it->second;
    } else if (op == ":+" || op == "+") {
      if (!(op == ":+" ? empty : !set)) out += rest;
    } else {
      if (!set) return absl::NotFoundError(absl::StrCat("variable ", name, " is not defined"));
      out += it->second;
    }
  }
  return out;
}

absl::StatusOr<absl::Duration> ParseDurationText(const std::string& text) {
  absl::Duration total = absl::ZeroDuration();
  size_t i = 0;
  bool any = false;
  while (i < text.size()) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    size_t k = i;
    while (k < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[k])) || text[k] == '.')) {
      ++k;
    }
    double value = 0;
    if (k == i || !absl::SimpleAtod(text.substr(i, k - i), &value)) {
      return absl::InvalidArgumentError(absl::StrCat("bad duration '", text, "'"));
    }
    size_t u = k;
    while (u < text.size() && std::isalpha(static_cast<unsigned char>(text[u]))) ++u;
    const std::string unit = text.substr(k, u - k);
    if (unit.empty() || unit == "s" || unit == "sec") {
      total += absl::Seconds(value);
    } else if (unit == "ms" || unit == "msec") {
      total += absl::Milliseconds(value);
    } else if (unit == "m" || unit == "min") {
      total += absl::Minutes(value);
    } else if (unit == "h") {
      total += absl::Hours(value);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("bad duration unit in '", text, "'"));
    }
    any = true;
    i = u;
  }
  if (!any) return absl::InvalidArgumentError("empty duration");
  return total;
}

absl::StatusOr<int> PortOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  const std::string digits = colon == std::string::npos ? address : address.substr(colon + 1);
  int port = 0;
  if (!absl::SimpleAtoi(digits, &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("no port in '", address, "'"));
  }
  return port;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? "" : address.substr(0, colon);
}

}  // namespace scd::testing
