// docs/CONFIG.md against the daemons' config readers. Each reader declares every key it reads,
// with its default and range (ConfigReader::keys(), PrefillConfigKeys, DecodeConfigKeys); the
// key tables of CONFIG.md (`| Key | Default | Range | Meaning |`) must list exactly those keys,
// each with the reader's default and range. A key added to a reader without a row, a row whose
// key no reader knows, or a default or range changed in one place and not the other fails here.
//
// A row's key cell may name several keys: "`http.host` / `http.port`", "`grpc.tls.cert` /
// `key` / `ca`" (siblings of the first), "`cuda_kernels.prefill_attention` /
// `.decode_attention`" (likewise). Its default and range cells give one value per key, or one
// for all. Defaults are written as the reader would take them: `required`, `empty` (""),
// numbers, `true`/`false`, strings in backticks, durations with a unit (`30s`), sizes in GiB or
// MiB. Ranges are the reader's range text ("[0, 65535]", ">= 1", "[1, 3600] seconds",
// "one of \"cpu\", \"cuda\""), `-` where a key has none.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "catch2/catch.hpp"
#include "decode_server/decode_config.h"
#include "prefill_server/prefill_config.h"
#include "tests/test_support.h"

namespace scd {
namespace {

using nlohmann::json;

// "`http.port`" -> "http.port".
std::string Unquote(absl::string_view cell) {
  std::string s(absl::StripAsciiWhitespace(cell));
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

// One table row's keys: see the file comment.
std::vector<std::string> RowKeys(absl::string_view cell) {
  std::vector<std::string> keys;
  for (absl::string_view part : absl::StrSplit(cell, " / ")) {
    // "specialists[]" and "specialists[].name" -> "specialists", "specialists.name".
    std::string key = absl::StrReplaceAll(Unquote(part), {{"[]", ""}});
    if (!keys.empty()) {
      const std::string& first = keys.front();
      const size_t dot = first.rfind('.');
      const std::string parent = dot == std::string::npos ? "" : first.substr(0, dot);
      if (key[0] == '.') {
        key = parent + key;
      } else if (key.find('.') == std::string::npos && !parent.empty()) {
        key = parent + "." + key;
      }
    }
    keys.push_back(key);
  }
  return keys;
}

// The documented default as the reader would hold it: "required", or a json value.
struct DocDefault {
  bool required = false;
  json value;
};

DocDefault ParseDefault(absl::string_view cell) {
  DocDefault d;
  const std::string text = Unquote(cell);
  if (text == "required") {
    d.required = true;
    return d;
  }
  if (text == "empty") {
    d.value = "";
    return d;
  }
  if (text == "true" || text == "false") {
    d.value = text == "true";
    return d;
  }
  double number;
  if (absl::SimpleAtod(text, &number)) {
    d.value = number;
    return d;
  }
  static const std::map<std::string, double> kUnits = {
      {"ms", 1e-3}, {"s", 1}, {"m", 60}, {"h", 3600}, {" MiB", 1 << 20}, {" GiB", 1 << 30}};
  for (const auto& [unit, scale] : kUnits) {
    absl::string_view rest = text;
    if (absl::ConsumeSuffix(&rest, unit) && absl::SimpleAtod(rest, &number)) {
      d.value = number * scale;
      return d;
    }
  }
  d.value = text;
  return d;
}

// The documented range as the reader declares it: "" for `-` or an empty cell.
std::string ParseRange(absl::string_view cell) {
  const std::string text = Unquote(cell);
  return text == "-" ? "" : text;
}

// What one table row documents for one key.
struct DocKey {
  DocDefault default_value;
  std::string range;
};

// The `| Key | Default | Range | Meaning |` header that opens every key table.
constexpr absl::string_view kTableHeader = "| Key | Default | Range | Meaning |";

// Key -> documented default and range, from the table under `## <section>`.
std::map<std::string, DocKey> DocumentedKeys(const std::string& doc, const std::string& section) {
  std::map<std::string, DocKey> out;
  std::istringstream lines(doc);
  std::string line;
  bool inside = false;
  bool header_seen = false;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, "## ")) inside = line == "## " + section;
    if (inside && absl::StartsWith(line, "| Key ")) {
      INFO(section << ": the key table's header");
      CHECK(line == kTableHeader);
      header_seen = true;
    }
    if (!inside || !absl::StartsWith(line, "| `")) continue;
    const std::vector<absl::string_view> cells = absl::StrSplit(line, '|');
    INFO(line);
    REQUIRE(cells.size() >= 6);  // "", key, default, range, meaning..., ""
    const std::vector<std::string> keys = RowKeys(cells[1]);
    const std::vector<absl::string_view> defaults = absl::StrSplit(cells[2], " / ");
    const std::vector<absl::string_view> ranges = absl::StrSplit(cells[3], " / ");
    REQUIRE((defaults.size() == keys.size() || defaults.size() == 1));
    REQUIRE((ranges.size() == keys.size() || ranges.size() == 1));
    for (size_t i = 0; i < keys.size(); ++i) {
      CHECK(out.count(keys[i]) == 0);  // one row per key
      out[keys[i]] = DocKey{ParseDefault(defaults[defaults.size() == 1 ? 0 : i]),
                            ParseRange(ranges[ranges.size() == 1 ? 0 : i])};
    }
  }
  INFO(section << ": CONFIG.md has no table headed " << kTableHeader);
  CHECK(header_seen);
  return out;
}

// "specialists[0].name" -> "specialists.name" (the docs write "specialists[].name").
std::string DocPath(std::string path) {
  for (size_t open; (open = path.find('[')) != std::string::npos;) {
    path.erase(open, path.find(']', open) - open + 1);
  }
  return path;
}

// The documented default of `key` against the reader's.
void CheckDefault(const config::ConfigKey& key, const DocDefault& d) {
  if (key.type == "mapping list") {
    CHECK((d.required || d.value == ""));  // a list is documented by its elements
    return;
  }
  CHECK(d.required == key.required);
  if (key.required) return;
  if (key.default_value.is_number() && d.value.is_number()) {
    CHECK(d.value.get<double>() == Approx(key.default_value.get<double>()).margin(1e-12));
  } else {
    CHECK(d.value == key.default_value);
  }
}

// The documented range of `key` against the reader's, naming the key and both texts.
void CheckRange(const std::string& section, const std::string& path, const config::ConfigKey& key,
                const std::string& documented) {
  if (documented == key.range) return;
  FAIL_CHECK(section << ": config key '" << path << "': CONFIG.md gives the range \""
                     << (documented.empty() ? "-" : documented) << "\", the reader \""
                     << (key.range.empty() ? "-" : key.range) << "\"");
}

void CheckAgainstDocs(const std::vector<config::ConfigKey>& keys, const std::string& section) {
  const std::string doc = testing::ReadFileOrFail(testing::SourceFile("docs/CONFIG.md"));
  const std::map<std::string, DocKey> by_doc_path = DocumentedKeys(doc, section);
  std::set<std::string> read;
  for (const config::ConfigKey& key : keys) {
    if (key.type == "mapping") continue;
    const std::string path = DocPath(key.path);
    read.insert(path);
    INFO(section << ": config key '" << path << "' (" << key.type << ", default "
                 << key.default_value.dump() << (key.required ? ", required" : "") << ", range \""
                 << key.range << "\")");
    const auto it = by_doc_path.find(path);
    CHECK(it != by_doc_path.end());  // a key the reader knows and CONFIG.md does not list
    if (it == by_doc_path.end()) continue;
    CheckDefault(key, it->second.default_value);
    CheckRange(section, path, key, it->second.range);
  }
  for (const auto& [path, d] : by_doc_path) {
    (void)d;
    INFO(section << ": CONFIG.md lists '" << path << "', which the reader does not read");
    CHECK(read.count(path) == 1);
  }
}

TEST_CASE("docs/CONFIG.md lists every scd-prefill key, its default and range", "[cpu]") {
  CheckAgainstDocs(PrefillConfigKeys(), "scd-prefill");
}

TEST_CASE("docs/CONFIG.md lists every scd-decode key, its default and range", "[cpu]") {
  CheckAgainstDocs(DecodeConfigKeys(), "scd-decode");
}

TEST_CASE("The readers declare each key once with its type and range", "[cpu]") {
  const std::vector<config::ConfigKey> keys = DecodeConfigKeys();
  std::set<std::string> paths;
  for (const config::ConfigKey& key : keys) CHECK(paths.insert(key.path).second);
  auto find = [&](const std::string& path) -> const config::ConfigKey& {
    for (const config::ConfigKey& key : keys) {
      if (key.path == path) return key;
    }
    FAIL("no key " << path);
    return keys.front();
  };
  CHECK(find("sekv.budget").range == "[0.01, 1]");
  CHECK(find("sekv.budget").default_value == 0.4);
  CHECK(find("http.port").range == "[-1, 65535]");
  CHECK(find("sekv.gpu_tier").range == "one of \"bf16\", \"f32\"");
  CHECK(find("model.path").required);
  CHECK(find("engine.default_deadline").type == "duration");
}

}  // namespace
}  // namespace scd
