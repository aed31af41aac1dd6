// The YAML subset: what it accepts (nested mappings, sequences of mappings, comments, quoting,
// core-schema typing, flow collections) and that everything outside it is an InvalidArgument
// error naming the file and line rather than a misparse.
#include "common/config/yaml_subset.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "catch2/catch.hpp"

namespace scd::config {
namespace {

using Catch::Matchers::Contains;
using nlohmann::json;

json ParseOrFail(const std::string& text) {
  absl::StatusOr<json> parsed = ParseYaml(text, "cfg.yaml");
  INFO(text);
  if (!parsed.ok()) FAIL(std::string(parsed.status().message()));
  return *parsed;
}

// The value of `v: <text>`.
json Scalar(const std::string& text) { return ParseOrFail("v: " + text)["v"]; }

// Parsing fails with InvalidArgument, "cfg.yaml:<line>: " and `fragment` in the message.
void ExpectError(const std::string& text, int line, const std::string& fragment) {
  absl::StatusOr<json> parsed = ParseYaml(text, "cfg.yaml");
  INFO("YAML:\n" << text);
  REQUIRE_FALSE(parsed.ok());
  CHECK(absl::IsInvalidArgument(parsed.status()));
  const std::string message(parsed.status().message());
  CHECK_THAT(message, Contains("cfg.yaml:" + std::to_string(line) + ": "));
  CHECK_THAT(message, Contains(fragment));
}

TEST_CASE("YAML: nested mappings, sequences of mappings, comments and quoting", "[cpu]") {
  const json config = ParseOrFail(R"(# decode daemon
---
name: decode-0          # trailing comment
http:
  host: 0.0.0.0
  port: 8080
  tls:
    enabled: false

models:
  - name: small
    path: /models/small
    weight: 0.5
  - name: "large"
    path: '/models/large # not a comment'
    tags: [a, "b c", 'd']
stop:
- "</s>"
- '<|eot|>'
empty:
limits: {max_tokens: 4096, ratio: 1e-3}
matrix:
  - - 1
    - 2
  - [3, 4]
url: http://host:80/path
hash: a#b
"spaced key": 1
'quoted': two words here
)");
  CHECK(config["name"] == "decode-0");
  CHECK(config["http"]["host"] == "0.0.0.0");
  CHECK(config["http"]["port"] == 8080);
  CHECK(config["http"]["tls"]["enabled"] == false);
  REQUIRE(config["models"].size() == 2);
  CHECK(config["models"][0] == json{{"name", "small"}, {"path", "/models/small"}, {"weight", 0.5}});
  CHECK(config["models"][1]["name"] == "large");
  CHECK(config["models"][1]["path"] == "/models/large # not a comment");
  CHECK(config["models"][1]["tags"] == json{"a", "b c", "d"});
  CHECK(config["stop"] == json{"</s>", "<|eot|>"});
  CHECK(config["empty"].is_null());
  CHECK(config["limits"]["max_tokens"] == 4096);
  CHECK(config["limits"]["ratio"] == Approx(0.001));
  CHECK(config["matrix"] == json::parse("[[1, 2], [3, 4]]"));
  CHECK(config["url"] == "http://host:80/path");
  CHECK(config["hash"] == "a#b");
  CHECK(config["spaced key"] == 1);
  CHECK(config["quoted"] == "two words here");
  CHECK(config.size() == 11);
}

TEST_CASE("YAML: compact and nested block forms", "[cpu]") {
  // A sequence at its key's indentation inside a sequence entry, a value on the next line,
  // a mapping under an empty sequence entry, and a sequence of sequences.
  const json config = ParseOrFail(
      "servers:\n"
      "  - name: a\n"
      "    ports:\n"
      "    - 1\n"
      "    - 2\n"
      "    host: h\n"
      "  -\n"
      "    name: b\n"
      "  - - x\n"
      "    - y\n"
      "  -\n"
      "next_line:\n"
      "  value\n");
  CHECK(config["servers"][0] == json{{"name", "a"}, {"ports", {1, 2}}, {"host", "h"}});
  CHECK(config["servers"][1] == json{{"name", "b"}});
  CHECK(config["servers"][2] == json{"x", "y"});
  CHECK(config["servers"][3].is_null());
  CHECK(config["next_line"] == "value");

  // The whole document may be indented; CRLF line ends and a BOM are accepted.
  CHECK(ParseOrFail("  a: 1\n  b:\n    c: 2\n") == json{{"a", 1}, {"b", {{"c", 2}}}});
  CHECK(ParseOrFail("\xEF\xBB\xBF"
                    "a: 1\r\nb: [x, y]\r\n") == json{{"a", 1}, {"b", {"x", "y"}}});
  // Tabs may separate within a line, just not indent.
  CHECK(ParseOrFail("a:\t1\t# note\n") == json{{"a", 1}});
}

TEST_CASE("YAML: scalars are typed by the 1.2 core schema", "[cpu]") {
  CHECK(Scalar("true") == true);
  CHECK(Scalar("False") == false);
  CHECK(Scalar("TRUE") == true);
  CHECK(Scalar("null").is_null());
  CHECK(Scalar("~").is_null());
  CHECK(Scalar("").is_null());
  CHECK(Scalar("# only a comment").is_null());
  CHECK(Scalar("42") == 42);
  CHECK(Scalar("42").is_number_integer());
  CHECK(Scalar("-7") == -7);
  CHECK(Scalar("+3") == 3);
  CHECK(Scalar("007") == 7);
  CHECK(Scalar("0x1F") == 31);
  CHECK(Scalar("0o17") == 15);
  CHECK(Scalar("9223372036854775807") == std::numeric_limits<int64_t>::max());
  CHECK(Scalar("-9223372036854775808") == std::numeric_limits<int64_t>::min());
  CHECK(Scalar("1.5") == 1.5);
  CHECK(Scalar("1e-3") == Approx(0.001));
  CHECK(Scalar("-2.5E+2") == -250.0);
  CHECK(Scalar(".5") == 0.5);
  CHECK(Scalar("1.") == 1.0);
  CHECK(Scalar("1.").is_number_float());
  CHECK(Scalar(".inf") == std::numeric_limits<double>::infinity());
  CHECK(Scalar("-.Inf") == -std::numeric_limits<double>::infinity());
  CHECK(std::isnan(Scalar(".nan").get<double>()));
  // YAML 1.1 booleans and other near-misses are strings.
  CHECK(Scalar("yes") == "yes");
  CHECK(Scalar("on") == "on");
  CHECK(Scalar("nulls") == "nulls");
  CHECK(Scalar("1.2.3") == "1.2.3");
  CHECK(Scalar("0x") == "0x");
  CHECK(Scalar("12abc") == "12abc");
  CHECK(Scalar("1_000") == "1_000");
}

TEST_CASE("YAML: quoted scalars are strings with escapes", "[cpu]") {
  CHECK(Scalar("'42'") == "42");
  CHECK(Scalar("\"true\"") == "true");
  CHECK(Scalar("''") == "");
  CHECK(Scalar("'it''s'") == "it's");
  CHECK(Scalar("'back\\slash'") == "back\\slash");
  CHECK(Scalar(R"("a\tb\nc\"d\\e\/f")") == "a\tb\nc\"d\\e/f");
  CHECK(Scalar(R"("\u00e9\x41\U0001F600")") ==
        "\xC3\xA9"
        "A\xF0\x9F\x98\x80");
  CHECK(Scalar(R"("\ud83d\ude00")") == "\xF0\x9F\x98\x80");
  CHECK(Scalar(R"("# not a comment" # a comment)") == "# not a comment");
  CHECK(Scalar(R"("a: b")") == "a: b");
}

TEST_CASE("YAML: flow collections", "[cpu]") {
  CHECK(Scalar("[a, b, \"c\"]") == json{"a", "b", "c"});
  CHECK(Scalar("[]") == json::array());
  CHECK(Scalar("{}") == json::object());
  CHECK(Scalar("[ 1 , 2.5 , true , null , '' ]") == json{1, 2.5, true, nullptr, ""});
  CHECK(Scalar("[a, b,]") == json{"a", "b"});
  CHECK(Scalar("{a: 1, b: [x, y], c: {d: e}, f:}") ==
        json{{"a", 1}, {"b", {"x", "y"}}, {"c", {{"d", "e"}}}, {"f", nullptr}});
  CHECK(Scalar("{\"a b\": 1, 'c': 2}") == json{{"a b", 1}, {"c", 2}});
  CHECK(Scalar("[http://x:80/p, a:b]") == json{"http://x:80/p", "a:b"});
  CHECK(Scalar("[a, b]  # comment") == json{"a", "b"});
}

TEST_CASE("YAML: an empty document is an empty mapping; the top level must be a mapping", "[cpu]") {
  CHECK(ParseOrFail("") == json::object());
  CHECK(ParseOrFail("# nothing\n\n   \n---\n") == json::object());
  ExpectError("- a\n- b\n", 1, "top level must be a mapping");
  ExpectError("just text\n", 1, "top level must be a mapping");
  ExpectError("[1, 2]\n", 1, "top level must be a mapping");
}

TEST_CASE("YAML: rejected input names the line", "[cpu]") {
  ExpectError("a:\n\tb: 1\n", 2, "tab character in indentation");
  ExpectError("a: 1\nb: 2\na: 3\n", 3, "duplicate key 'a'");
  ExpectError("x:\n  a: 1\n  b: 2\n  a: 2\n", 4, "duplicate key 'a'");
  ExpectError("x:\n  - k: 1\n    k: 2\n", 3, "duplicate key 'k'");
  ExpectError("x: {a: 1, a: 2}\n", 1, "duplicate key 'a'");
  ExpectError("\"a\": 1\na: 2\n", 2, "duplicate key 'a'");
  ExpectError("a: &anchor 1\n", 1, "unsupported YAML feature: anchor");
  ExpectError("a: 1\nb: *alias\n", 2, "unsupported YAML feature: alias");
  ExpectError("a: !!str 1\n", 1, "unsupported YAML feature: tag");
  ExpectError("a: [!x 1]\n", 1, "unsupported YAML feature: tag");
  ExpectError("a: |\n  text\n", 1, "unsupported YAML feature: block scalar");
  ExpectError("a: >-\n  text\n", 1, "unsupported YAML feature: block scalar");
  ExpectError("a: 1\n---\nb: 2\n", 2, "several documents");
  ExpectError("---\n---\n", 2, "several documents");
  ExpectError("--- a: 1\n", 1, "content on the '---' line");
  ExpectError("a: 1\n...\n", 2, "document end marker");
  ExpectError("%YAML 1.2\na: 1\n", 1, "directive");
  ExpectError("? complex\n: key\n", 1, "complex mapping key");
  ExpectError("a: b: c\n", 1, "mapping values are not allowed here");
  ExpectError("a:\n  b: 1\n   c: 2\n", 3, "bad indentation");
  ExpectError("a:\n    b: 1\n  c: 2\n", 3, "bad indentation");
  ExpectError("a: hello\n  world\n", 2, "bad indentation");
  ExpectError("a:\n  - x\n  y: 1\n", 3, "bad indentation");
  ExpectError("a:\n  - x\n  - y\nb: 1\n - z\n", 5, "bad indentation");
  ExpectError("a: 1\n  - x\n", 2, "bad indentation");
  ExpectError("a: 1\nplain line\n", 2, "expected 'key: value'");
  ExpectError("a: 1\n- x\n", 2, "found a sequence entry");
  ExpectError("a: \"abc\n", 1, "unterminated double-quoted string");
  ExpectError("a: 1\nb: 'abc\n  def'\n", 2, "unterminated single-quoted string");
  ExpectError("\"abc: 1\n", 1, "unterminated double-quoted string");
  ExpectError("a: \"x\" y\n", 1, "unexpected characters after a quoted string");
  ExpectError("a: [1, 2\n", 1, "unterminated flow sequence");
  ExpectError("a: [1,\n  2]\n", 1, "unterminated flow sequence");
  ExpectError("a: {b: 1\n", 1, "unterminated flow mapping");
  ExpectError("a: [1, , 2]\n", 1, "empty entry");
  ExpectError("a: [1 2] 3\n", 1, "unexpected characters after a flow collection");
  ExpectError("a: {b:1}\n", 1, "expected ':' after key 'b:1'");
  ExpectError("a: \"\\q\"\n", 1, "invalid escape");
  ExpectError("a: \"\\ud800\"\n", 1, "unpaired high surrogate");
  ExpectError("a: 99999999999999999999\n", 1, "does not fit in 64 bits");
  ExpectError("a: 1e999\n", 1, "out of the range");
  ExpectError("a: 1\nb: \xFF\n", 2, "invalid UTF-8");
  ExpectError("a: 1\n\nb: x\x01y\n", 3, "control character 0x01");
  ExpectError("a: 1\rb: 2\n", 1, "carriage return");
  ExpectError("a: @x\n", 1, "cannot start with '@'");
  ExpectError(": x\n", 1, "missing key before ':'");
  ExpectError("a: - x\n", 1, "sequence entry ('- ') is not allowed here");
  ExpectError("a:\n  - x\n  -y: 1\n", 3, "bad indentation");
  // Short lines at the left margin (found by fuzzing: the marker check read past "--").
  ExpectError("a: 1\n--\n", 2, "expected 'key: value'");
  ExpectError("a: 1\n.\n", 2, "expected 'key: value'");
  CHECK(ParseOrFail("a: ---\nb: ...x\n") == json{{"a", "---"}, {"b", "...x"}});
}

TEST_CASE("YAML: nesting is capped at kMaxConfigDepth levels", "[cpu]") {
  // 64 nested mappings (the top level included) parse; 65 do not.
  auto nested = [](int levels) {
    std::string text;
    for (int i = 0; i < levels - 1; ++i) text += std::string(2 * i, ' ') + "k:\n";
    return text + std::string(2 * (levels - 1), ' ') + "leaf: 1\n";
  };
  CHECK(ParseYaml(nested(64), "cfg.yaml").ok());
  ExpectError(nested(65), 65, "nesting deeper than 64 levels");

  auto flow = [](int levels) {
    return "a: " + std::string(levels - 1, '[') + std::string(levels - 1, ']') + "\n";
  };
  CHECK(ParseYaml(flow(64), "cfg.yaml").ok());
  ExpectError(flow(65), 1, "nesting deeper than 64 levels");
  ExpectError("a: " + std::string(100000, '[') + "\n", 1, "nesting deeper");

  std::string dashes = "a:\n";
  for (int i = 0; i < 100; ++i) dashes += "- ";
  ExpectError(dashes + "x\n", 2, "nesting deeper");
}

TEST_CASE("YAML: errors without a source name still carry the line", "[cpu]") {
  absl::StatusOr<json> parsed = ParseYaml("a: 1\na: 2\n", "");
  REQUIRE_FALSE(parsed.ok());
  CHECK(std::string(parsed.status().message()) == "line 2: duplicate key 'a'");
}

TEST_CASE("YAML: inline values as given on the command line", "[cpu]") {
  auto value = [](const std::string& text) {
    absl::StatusOr<json> v = ParseYamlInlineValue(text);
    INFO(text);
    if (!v.ok()) FAIL(std::string(v.status().message()));
    return *v;
  };
  CHECK(value("8080") == 8080);
  CHECK(value(" 8080 ") == 8080);
  CHECK(value("'8080'") == "8080");
  CHECK(value("\"a\\tb\"") == "a\tb");
  CHECK(value("true") == true);
  CHECK(value("0.25") == 0.25);
  CHECK(value("null").is_null());
  CHECK(value("") == "");
  CHECK(value("[a, b]") == json{"a", "b"});
  CHECK(value("[]") == json::array());
  CHECK(value("{x: 1, y: [2]}") == json{{"x", 1}, {"y", {2}}});
  // Plain text is taken whole: no comments, ':' and indicators are just characters.
  CHECK(value("a: b #c") == "a: b #c");
  CHECK(value("*not-an-alias") == "*not-an-alias");
  CHECK(value("line1\nline2") == "line1\nline2");

  CHECK_FALSE(ParseYamlInlineValue("[1, 2").ok());
  CHECK_FALSE(ParseYamlInlineValue("'abc' x").ok());
  CHECK_FALSE(ParseYamlInlineValue("[1] # c").ok());
  CHECK_FALSE(ParseYamlInlineValue("\"abc").ok());
  CHECK_FALSE(ParseYamlInlineValue("\xC3").ok());
  CHECK_FALSE(ParseYamlInlineValue("123456789012345678901234567890").ok());
  // Containers count toward the depth limit from the given level.
  CHECK(ParseYamlInlineValue("[[1]]", 63).ok());
  CHECK_FALSE(ParseYamlInlineValue("[[1]]", 64).ok());
}

}  // namespace
}  // namespace scd::config
