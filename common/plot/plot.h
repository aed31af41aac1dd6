// Plot: a small raster chart (scatter, line and bar series on one pair of axes) rendered to a
// Canvas and written as PNG. It draws what the evaluation reports need — quality against
// payload (the codec modes' Pareto front), latency distributions — with a title, axis labels,
// ticks with numeric labels, a light grid and a legend, in the bitmap font.
//
// Layout: margins are sized from the tick labels and titles; the data area maps the axis
// range linearly (or log10 on x) onto its pixels, with ranges padded 4% beyond the data
// unless set explicitly. DataToPixel exposes that mapping so a caller (or a test) can find
// where a point lands. Series are drawn in insertion order, each clipped to the data area.
#ifndef SCD_COMMON_PLOT_PLOT_H_
#define SCD_COMMON_PLOT_PLOT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/plot/axis.h"
#include "common/plot/canvas.h"

namespace scd::plot {

enum class SeriesStyle { kLine, kMarkers, kLineAndMarkers, kBars };
enum class LegendPosition { kAuto, kTopRight, kTopLeft, kBottomRight, kBottomLeft, kNone };

struct SeriesOptions {
  SeriesStyle style = SeriesStyle::kLineAndMarkers;
  std::optional<Color> color;         // default: the next palette colour
  std::optional<MarkerShape> marker;  // default: cycles with the series index
  int line_width = 2;
  int marker_radius = 4;
};

// Counts of `values` in `num_bins` equal bins over [lo, hi] (the last bin includes hi).
// Values outside the range are counted in `outside`, not binned.
struct Histogram {
  std::vector<double> edges;    // num_bins + 1, increasing
  std::vector<int64_t> counts;  // num_bins
  int64_t outside = 0;
};

// Without `range`, bins span [min, max] of the values. With `log_bins`, edges are equal in
// log10 (every value and the range must be positive) — for heavy-tailed latencies.
absl::StatusOr<Histogram> ComputeHistogram(absl::Span<const double> values, int num_bins,
                                           std::optional<std::pair<double, double>> range = {},
                                           bool log_bins = false);

// The default series colours (Tableau 10), cycling.
Color PaletteColor(int index);

class Plot {
 public:
  explicit Plot(int width = 800, int height = 560);

  void SetTitle(std::string title) { title_ = std::move(title); }
  void SetXLabel(std::string label) { x_label_ = std::move(label); }
  void SetYLabel(std::string label) { y_label_ = std::move(label); }
  void SetLogX(bool log_x) { x_scale_ = log_x ? AxisScale::kLog10 : AxisScale::kLinear; }
  // Fixes an axis range instead of fitting the data (InvalidArgument at Render when lo >= hi).
  void SetXRange(double lo, double hi) { x_range_ = std::make_pair(lo, hi); }
  void SetYRange(double lo, double hi) { y_range_ = std::make_pair(lo, hi); }
  void SetLegend(LegendPosition position) { legend_ = position; }
  // Font pixel size for labels and ticks (the title uses one more). Default 2.
  void SetFontScale(int scale) { font_scale_ = scale < 1 ? 1 : scale; }

  // Adds a series of points (xs[i], ys[i]); lines join them in the given order. Fails on a
  // length mismatch or a non-finite value, naming the series and index. An empty name keeps
  // the series out of the legend.
  absl::Status AddSeries(std::string name, std::vector<double> xs, std::vector<double> ys,
                         SeriesOptions options = {});
  // Adds bars spanning [lefts[i], rights[i]] from 0 up to heights[i] (style forced to kBars).
  absl::Status AddBars(std::string name, std::vector<double> lefts, std::vector<double> rights,
                       std::vector<double> heights, SeriesOptions options = {});
  absl::Status AddHistogram(std::string name, const Histogram& histogram,
                            SeriesOptions options = {});

  // The colour series `index` is drawn with.
  Color SeriesColor(int index) const;
  int num_series() const { return static_cast<int>(series_.size()); }

  absl::StatusOr<Canvas> Render() const;
  absl::Status WritePng(const std::string& path) const;

  // Pixel (x, y) where data point (x, y) lands in the rendered image.
  absl::StatusOr<std::pair<int, int>> DataToPixel(double x, double y) const;

 private:
  struct Series {
    std::string name;
    std::vector<double> xs, ys;
    std::vector<double> bar_rights;  // kBars only; xs are the left edges
    SeriesStyle style;
    Color color;
    MarkerShape marker;
    int line_width;
    int marker_radius;
  };
  struct Layout {
    PixelRect area;  // the data area
    double x_lo, x_hi, y_lo, y_hi;
    std::vector<Tick> x_ticks, y_ticks;
    int font;
  };

  // The smallest and largest x (bar right edges included) and y over every series.
  struct DataExtent {
    double x_lo, x_hi, y_lo, y_hi;
    bool has_bars = false;
  };

  absl::StatusOr<Layout> ComputeLayout() const;
  // The extent of the data; refuses an x <= 0 on a log x axis.
  absl::StatusOr<DataExtent> FindDataExtent() const;
  // The x axis range: the set one, else the data's (padded unless bars on a linear axis).
  std::pair<double, double> XAxisRange(const DataExtent& extent) const;
  // The y axis range: the set one, else the data's padded (from 0 when there are bars).
  std::pair<double, double> YAxisRange(const DataExtent& extent) const;
  // Ticks, margins and the data area for `layout`'s axis ranges.
  absl::Status PlaceDataArea(Layout& layout) const;
  absl::Status AddResolvedSeries(Series series, const SeriesOptions& options);
  double MapX(const Layout& layout, double x) const;
  double MapY(const Layout& layout, double y) const;
  void DrawAxes(const Layout& layout, Canvas& canvas) const;
  void DrawSeries(const Layout& layout, const Series& series, Canvas& canvas) const;
  void DrawLegend(const Layout& layout, Canvas& canvas) const;

  int width_;
  int height_;
  std::string title_, x_label_, y_label_;
  AxisScale x_scale_ = AxisScale::kLinear;
  std::optional<std::pair<double, double>> x_range_, y_range_;
  LegendPosition legend_ = LegendPosition::kAuto;
  int font_scale_ = 2;
  std::vector<Series> series_;
};

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_PLOT_H_
