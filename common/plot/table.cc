// Markdown and CSV writers for Table. Markdown column widths count UTF-8 code points, so
// tables with non-ASCII labels still line up in a monospace view.
#include "common/plot/table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/base/file_io.h"

namespace scd::plot {
namespace {

size_t DisplayWidth(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;  // skip UTF-8 continuation bytes
  return n;
}

std::string MarkdownCell(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '|') {
      out += "\\|";
    } else if (c == '\r') {
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
      out += "<br>";
    } else if (c == '\n') {
      out += "<br>";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Pad(const std::string& s, size_t width, Align align) {
  const size_t w = DisplayWidth(s);
  if (w >= width) return s;
  const size_t gap = width - w;
  switch (align) {
    case Align::kRight:
      return std::string(gap, ' ') + s;
    case Align::kCenter:
      return std::string(gap / 2, ' ') + s + std::string(gap - gap / 2, ' ');
    case Align::kLeft:
      break;
  }
  return s + std::string(gap, ' ');
}

}  // namespace

std::string CsvField(std::string_view text) {
  const bool needs_quotes = text.find_first_of(",\"\r\n") != std::string_view::npos ||
                            (!text.empty() && (text.front() == ' ' || text.back() == ' '));
  if (!needs_quotes) return std::string(text);
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

std::string FormatFixed(double value, int decimals) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return absl::StrFormat("%.*f", std::max(decimals, 0), value);
}

Table::Table(std::vector<std::string> column_names)
    : names_(std::move(column_names)), align_(names_.size(), Align::kLeft) {}

absl::StatusOr<Table> Table::FromColumns(std::vector<Column> columns) {
  std::vector<std::string> names;
  for (const Column& c : columns) names.push_back(c.name);
  Table table(std::move(names));
  const size_t rows = columns.empty() ? 0 : columns[0].cells.size();
  for (size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].cells.size() != rows) {
      return absl::InvalidArgumentError(absl::StrCat("column '", columns[c].name, "' has ",
                                                     columns[c].cells.size(), " cells, column '",
                                                     columns[0].name, "' has ", rows));
    }
    table.SetAlign(static_cast<int>(c), columns[c].align);
  }
  for (size_t r = 0; r < rows; ++r) {
    std::vector<std::string> row;
    for (Column& c : columns) row.push_back(std::move(c.cells[r]));
    table.rows_.push_back(std::move(row));
  }
  return table;
}

void Table::SetAlign(int column, Align align) {
  if (column >= 0 && column < static_cast<int>(align_.size())) align_[column] = align;
}

absl::Status Table::AddRow(std::vector<std::string> cells) {
  if (cells.size() != names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("row ", rows_.size(), " has ", cells.size(),
                                                   " cells for ", names_.size(), " columns"));
  }
  rows_.push_back(std::move(cells));
  return absl::OkStatus();
}

std::string Table::ToMarkdown() const {
  const size_t n = names_.size();
  if (n == 0) return "";
  std::vector<std::string> header(n);
  std::vector<std::vector<std::string>> body(rows_.size(), std::vector<std::string>(n));
  std::vector<size_t> width(n, 3);  // "---" is the narrowest separator
  for (size_t c = 0; c < n; ++c) {
    header[c] = MarkdownCell(names_[c]);
    width[c] = std::max(width[c], DisplayWidth(header[c]));
    for (size_t r = 0; r < rows_.size(); ++r) {
      body[r][c] = MarkdownCell(rows_[r][c]);
      width[c] = std::max(width[c], DisplayWidth(body[r][c]));
    }
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out = "|";
    for (size_t c = 0; c < n; ++c)
      absl::StrAppend(&out, " ", Pad(cells[c], width[c], align_[c]), " |");
    return out + "\n";
  };
  std::string out = line(header);
  out += "|";
  for (size_t c = 0; c < n; ++c) {
    std::string rule(width[c], '-');
    if (align_[c] == Align::kRight) rule.back() = ':';
    if (align_[c] == Align::kCenter) rule.front() = rule.back() = ':';
    absl::StrAppend(&out, " ", rule, " |");
  }
  out += "\n";
  for (const auto& row : body) out += line(row);
  return out;
}

std::string Table::ToCsv() const {
  auto line = [](const std::vector<std::string>& cells) {
    std::vector<std::string> fields;
    fields.reserve(cells.size());
    for (const std::string& c : cells) fields.push_back(CsvField(c));
    return absl::StrCat(absl::StrJoin(fields, ","), "\n");
  };
  std::string out = line(names_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

absl::Status Table::WriteMarkdown(const std::string& path) const {
  return WriteFileAtomically(path, ToMarkdown());
}

absl::Status Table::WriteCsv(const std::string& path) const {
  return WriteFileAtomically(path, ToCsv());
}

}  // namespace scd::plot
