// Tests for the Markdown/CSV table writers: RFC 4180 quoting and pipe-table layout.
#include "common/plot/table.h"

#include <catch2/catch.hpp>

#include "tests/test_support.h"

namespace scd::plot {
namespace {

TEST_CASE("CSV fields are quoted only when needed", "[cpu]") {
  CHECK(CsvField("plain") == "plain");
  CHECK(CsvField("") == "");
  CHECK(CsvField("a,b") == "\"a,b\"");
  CHECK(CsvField("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(CsvField("two\nlines") == "\"two\nlines\"");
  CHECK(CsvField("cr\r") == "\"cr\r\"");
  CHECK(CsvField(" padded") == "\" padded\"");
  CHECK(CsvField("in side") == "in side");
}

TEST_CASE("table writes CSV and Markdown", "[cpu]") {
  Table table({"mode", "em", "note"});
  table.SetAlign(1, Align::kRight);
  REQUIRE(table.AddRow({"oracle", FormatFixed(0.4873, 3), ""}).ok());
  REQUIRE(table.AddRow({"scd", FormatFixed(0.5, 3), "r=16,32 \"fp16\""}).ok());
  CHECK(table.AddRow({"short"}).code() == absl::StatusCode::kInvalidArgument);

  CHECK(table.ToCsv() ==
        "mode,em,note\n"
        "oracle,0.487,\n"
        "scd,0.500,\"r=16,32 \"\"fp16\"\"\"\n");
  CHECK(table.ToMarkdown() ==
        "| mode   |    em | note           |\n"
        "| ------ | ----: | -------------- |\n"
        "| oracle | 0.487 |                |\n"
        "| scd    | 0.500 | r=16,32 \"fp16\" |\n");

  const std::string dir = testing::TempDir();
  REQUIRE(table.WriteCsv(dir + "/t.csv").ok());
  CHECK(testing::ReadFileOrFail(dir + "/t.csv") == table.ToCsv());
  REQUIRE(table.WriteMarkdown(dir + "/t.md").ok());
  CHECK(testing::ReadFileOrFail(dir + "/t.md") == table.ToMarkdown());
}

TEST_CASE("table from columns; markdown escapes pipes and newlines", "[cpu]") {
  auto table = Table::FromColumns({{"a|b", {"x\ny", "1"}, Align::kCenter}, {"c", {"z", "2"}}});
  REQUIRE(table.ok());
  CHECK(table->rows().size() == 2);
  CHECK(table->ToMarkdown() ==
        "|  a\\|b  | c   |\n"
        "| :----: | --- |\n"
        "| x<br>y | z   |\n"
        "|   1    | 2   |\n");
  CHECK(!Table::FromColumns({{"a", {"1"}}, {"b", {}}}).ok());
  CHECK(FormatFixed(NAN, 2) == "nan");
  CHECK(FormatFixed(-INFINITY, 2) == "-inf");
  CHECK(FormatFixed(1.005, 0) == "1");
}

}  // namespace
}  // namespace scd::plot
