// Table: results as rows of text cells under named columns, written as a Markdown table (for
// docs/RESULTS.md) or as CSV (RFC 4180: fields holding a comma, quote, CR or LF, or leading or
// trailing spaces, are quoted, with quotes doubled). Numbers are formatted by the caller, so
// the two outputs always show the same figures.
#ifndef SCD_COMMON_PLOT_TABLE_H_
#define SCD_COMMON_PLOT_TABLE_H_

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace scd::plot {

enum class Align { kLeft, kRight, kCenter };

// A column given whole: its header and its cells, top to bottom.
struct Column {
  std::string name;
  std::vector<std::string> cells;
  Align align = Align::kLeft;
};

class Table {
 public:
  explicit Table(std::vector<std::string> column_names);
  // All columns must have the same number of cells.
  static absl::StatusOr<Table> FromColumns(std::vector<Column> columns);

  // Markdown alignment of a column; out-of-range indices are ignored.
  void SetAlign(int column, Align align);
  // InvalidArgument when the cell count differs from the column count.
  absl::Status AddRow(std::vector<std::string> cells);

  const std::vector<std::string>& column_names() const { return names_; }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }

  // A pipe table with cells padded to column width; '|' in a cell is escaped as "\|" and
  // line breaks become "<br>".
  std::string ToMarkdown() const;
  // Header line plus one line per row, each ended by '\n'.
  std::string ToCsv() const;

  absl::Status WriteMarkdown(const std::string& path) const;
  absl::Status WriteCsv(const std::string& path) const;

 private:
  std::vector<std::string> names_;
  std::vector<Align> align_;
  std::vector<std::vector<std::string>> rows_;
};

// One CSV field, quoted only when it must be.
std::string CsvField(std::string_view text);

// `value` with `decimals` fixed decimals; "nan", "inf" and "-inf" for non-finite values.
std::string FormatFixed(double value, int decimals);

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_TABLE_H_
