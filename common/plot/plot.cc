// Plot rendering: range fitting, layout of margins around the data area, then drawing in
// back-to-front order (grid, series, frame and ticks, titles, legend).
#include "common/plot/plot.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/plot/bitmap_font.h"
#include "common/plot/png_io.h"

namespace scd::plot {
namespace {

constexpr int kPad = 10;            // outer padding and gaps between text blocks
constexpr int kTickLength = 5;      // tick marks, outside the frame
constexpr double kRangePad = 0.04;  // fraction of the span added beyond the data
constexpr Color kGridMajor{225, 225, 225};
constexpr Color kGridMinor{242, 242, 242};
constexpr Color kFrame{60, 60, 60};
constexpr Color kText{20, 20, 20};
constexpr Color kLegendBorder{160, 160, 160};

constexpr std::array<MarkerShape, 5> kMarkerCycle = {MarkerShape::kCircle, MarkerShape::kSquare,
                                                     MarkerShape::kDiamond, MarkerShape::kTriangle,
                                                     MarkerShape::kCross};

// Expands [lo, hi] by kRangePad on both sides (in log space for log axes); widens a
// degenerate range so that it has extent.
std::pair<double, double> PadRange(double lo, double hi, AxisScale scale) {
  if (scale == AxisScale::kLog10) {
    double llo = std::log10(lo), lhi = std::log10(hi);
    if (lhi - llo < 1e-12) {
      llo -= 0.5;
      lhi += 0.5;
    }
    const double pad = (lhi - llo) * kRangePad;
    return {std::pow(10.0, llo - pad), std::pow(10.0, lhi + pad)};
  }
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(lo))) {
    const double half = lo == 0 ? 1.0 : std::abs(lo) * 0.1;
    return {lo - half, hi + half};
  }
  const double pad = (hi - lo) * kRangePad;
  return {lo - pad, hi + pad};
}

absl::Status CheckFinite(const std::string& name, const char* what,
                         const std::vector<double>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("series '", name, "': ", what, "[", i, "] is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Color PaletteColor(int index) {
  static constexpr std::array<Color, 10> kPalette = {{{31, 119, 180},
                                                      {255, 127, 14},
                                                      {44, 160, 44},
                                                      {214, 39, 40},
                                                      {148, 103, 189},
                                                      {140, 86, 75},
                                                      {227, 119, 194},
                                                      {127, 127, 127},
                                                      {188, 189, 34},
                                                      {23, 190, 207}}};
  const int n = static_cast<int>(kPalette.size());
  return kPalette[((index % n) + n) % n];
}

absl::StatusOr<Histogram> ComputeHistogram(absl::Span<const double> values, int num_bins,
                                           std::optional<std::pair<double, double>> range,
                                           bool log_bins) {
  if (num_bins < 1) {
    return absl::InvalidArgumentError(absl::StrCat("histogram needs >= 1 bin, got ", num_bins));
  }
  double lo, hi;
  if (range) {
    lo = range->first;
    hi = range->second;
  } else {
    if (values.empty()) return absl::InvalidArgumentError("histogram of no values needs a range");
    lo = std::numeric_limits<double>::infinity();
    hi = -lo;
    for (double v : values) {
      if (!std::isfinite(v)) continue;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    if (!std::isfinite(lo)) return absl::InvalidArgumentError("histogram values are not finite");
    if (hi == lo) {  // one distinct value: a bin of width 1 around it (x2 in log space)
      lo = log_bins ? lo / std::sqrt(2.0) : lo - 0.5;
      hi = log_bins ? hi * std::sqrt(2.0) : hi + 0.5;
    }
  }
  if (!(hi > lo) || !std::isfinite(lo) || !std::isfinite(hi)) {
    return absl::InvalidArgumentError(absl::StrCat("bad histogram range [", lo, ", ", hi, "]"));
  }
  if (log_bins && lo <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("log bins need a positive range, got lo=", lo));
  }
  Histogram h;
  h.edges.resize(num_bins + 1);
  h.counts.assign(num_bins, 0);
  const double a = log_bins ? std::log10(lo) : lo;
  const double b = log_bins ? std::log10(hi) : hi;
  for (int i = 0; i <= num_bins; ++i) {
    const double t = a + (b - a) * i / num_bins;
    h.edges[i] = log_bins ? std::pow(10.0, t) : t;
  }
  h.edges.front() = lo;
  h.edges.back() = hi;
  for (double v : values) {
    if (!std::isfinite(v) || v < lo || v > hi) {
      ++h.outside;
      continue;
    }
    const double t = log_bins ? std::log10(v) : v;
    int bin = static_cast<int>((t - a) / (b - a) * num_bins);
    h.counts[std::clamp(bin, 0, num_bins - 1)]++;
  }
  return h;
}

Plot::Plot(int width, int height) : width_(width), height_(height) {}

Color Plot::SeriesColor(int index) const {
  if (index >= 0 && index < num_series()) return series_[index].color;
  return PaletteColor(index);
}

absl::Status Plot::AddResolvedSeries(Series series, const SeriesOptions& options) {
  const int index = num_series();
  series.color = options.color.value_or(PaletteColor(index));
  series.marker = options.marker.value_or(kMarkerCycle[index % kMarkerCycle.size()]);
  series.line_width = std::max(options.line_width, 1);
  series.marker_radius = std::max(options.marker_radius, 1);
  series_.push_back(std::move(series));
  return absl::OkStatus();
}

absl::Status Plot::AddSeries(std::string name, std::vector<double> xs, std::vector<double> ys,
                             SeriesOptions options) {
  if (xs.size() != ys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("series '", name, "': ", xs.size(), " x values but ", ys.size(), " y values"));
  }
  SCD_RETURN_IF_ERROR(CheckFinite(name, "x", xs));
  SCD_RETURN_IF_ERROR(CheckFinite(name, "y", ys));
  Series s;
  s.name = std::move(name);
  s.xs = std::move(xs);
  s.ys = std::move(ys);
  s.style = options.style == SeriesStyle::kBars ? SeriesStyle::kMarkers : options.style;
  return AddResolvedSeries(std::move(s), options);
}

absl::Status Plot::AddBars(std::string name, std::vector<double> lefts, std::vector<double> rights,
                           std::vector<double> heights, SeriesOptions options) {
  if (lefts.size() != rights.size() || lefts.size() != heights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("bars '", name, "': ", lefts.size(), " lefts, ",
                                                   rights.size(), " rights, ", heights.size(),
                                                   " heights"));
  }
  SCD_RETURN_IF_ERROR(CheckFinite(name, "left", lefts));
  SCD_RETURN_IF_ERROR(CheckFinite(name, "right", rights));
  SCD_RETURN_IF_ERROR(CheckFinite(name, "height", heights));
  for (size_t i = 0; i < lefts.size(); ++i) {
    if (!(rights[i] > lefts[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("bars '", name, "': bar ", i, " has right <= left"));
    }
  }
  Series s;
  s.name = std::move(name);
  s.xs = std::move(lefts);
  s.bar_rights = std::move(rights);
  s.ys = std::move(heights);
  s.style = SeriesStyle::kBars;
  return AddResolvedSeries(std::move(s), options);
}

absl::Status Plot::AddHistogram(std::string name, const Histogram& histogram,
                                SeriesOptions options) {
  if (histogram.edges.size() != histogram.counts.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat("histogram '", name,
                                                   "': ", histogram.edges.size(), " edges for ",
                                                   histogram.counts.size(), " bins"));
  }
  std::vector<double> lefts(histogram.edges.begin(), histogram.edges.end() - 1);
  std::vector<double> rights(histogram.edges.begin() + 1, histogram.edges.end());
  std::vector<double> heights(histogram.counts.begin(), histogram.counts.end());
  return AddBars(std::move(name), std::move(lefts), std::move(rights), std::move(heights), options);
}

absl::StatusOr<Plot::DataExtent> Plot::FindDataExtent() const {
  const bool log_x = x_scale_ == AxisScale::kLog10;
  DataExtent e;
  e.x_lo = std::numeric_limits<double>::infinity();
  e.x_hi = -e.x_lo;
  e.y_lo = e.x_lo;
  e.y_hi = -e.x_lo;
  for (const Series& s : series_) {
    for (size_t i = 0; i < s.xs.size(); ++i) {
      const double xr = s.style == SeriesStyle::kBars ? s.bar_rights[i] : s.xs[i];
      if (log_x && s.xs[i] <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("log x axis: series '", s.name, "' has x[", i, "] = ", s.xs[i], " <= 0"));
      }
      e.x_lo = std::min(e.x_lo, s.xs[i]);
      e.x_hi = std::max(e.x_hi, xr);
      e.y_lo = std::min(e.y_lo, s.ys[i]);
      e.y_hi = std::max(e.y_hi, s.ys[i]);
    }
    e.has_bars |= s.style == SeriesStyle::kBars && !s.xs.empty();
  }
  return e;
}

std::pair<double, double> Plot::XAxisRange(const DataExtent& e) const {
  const bool log_x = x_scale_ == AxisScale::kLog10;
  if (x_range_) return *x_range_;
  if (std::isfinite(e.x_lo)) {
    return e.has_bars && !log_x && e.x_hi > e.x_lo ? std::make_pair(e.x_lo, e.x_hi)
                                                   : PadRange(e.x_lo, e.x_hi, x_scale_);
  }
  return log_x ? std::make_pair(1.0, 10.0) : std::make_pair(0.0, 1.0);
}

std::pair<double, double> Plot::YAxisRange(const DataExtent& e) const {
  if (y_range_) return *y_range_;
  if (!std::isfinite(e.y_lo)) return {0.0, 1.0};
  if (!e.has_bars) return PadRange(e.y_lo, e.y_hi, AxisScale::kLinear);
  // Bars grow from 0, so 0 is on the axis and not padded below.
  const double y_lo = std::min(e.y_lo, 0.0);
  const double y_hi = std::max(e.y_hi, 0.0);
  const auto [plo, phi] = PadRange(y_lo, y_hi, AxisScale::kLinear);
  return {y_lo < 0 ? plo : 0.0, phi};
}

absl::Status Plot::PlaceDataArea(Layout& layout) const {
  const bool log_x = x_scale_ == AxisScale::kLog10;
  const int f = font_scale_;
  const int x_target = std::clamp(width_ / (40 * f + 30), 3, 10);
  const int y_target = std::clamp(height_ / (20 * f + 30), 3, 10);
  layout.x_ticks = log_x ? LogTicks(layout.x_lo, layout.x_hi, x_target)
                         : LinearTicks(layout.x_lo, layout.x_hi, x_target);
  layout.y_ticks = LinearTicks(layout.y_lo, layout.y_hi, y_target);

  int y_label_width = 0;
  for (const Tick& t : layout.y_ticks)
    y_label_width = std::max(y_label_width, TextWidth(t.label, f));
  int last_x_label = 0;
  for (const Tick& t : layout.x_ticks) {
    if (!t.label.empty()) last_x_label = TextWidth(t.label, f);
  }
  const int top = kPad + (title_.empty() ? 0 : TextHeight(f + 1) + kPad);
  const int left =
      kPad + (y_label_.empty() ? 0 : TextHeight(f) + kPad) + y_label_width + kTickLength + 4;
  const int bottom =
      kPad + kTickLength + 4 + TextHeight(f) + (x_label_.empty() ? 0 : kPad + TextHeight(f));
  const int right = std::max(kPad + 6, last_x_label / 2 + 6);
  layout.area = PixelRect{left, top, width_ - right, height_ - bottom};
  if (layout.area.width() < 16 || layout.area.height() < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("plot ", width_, "x", height_, " leaves no room for data at font scale ", f));
  }
  return absl::OkStatus();
}

absl::StatusOr<Plot::Layout> Plot::ComputeLayout() const {
  if (width_ < 64 || height_ < 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("plot size ", width_, "x", height_, " is below the 64x64 minimum"));
  }
  absl::StatusOr<DataExtent> extent = FindDataExtent();
  if (!extent.ok()) return extent.status();
  Layout layout;
  const auto [x_lo, x_hi] = XAxisRange(*extent);
  const auto [y_lo, y_hi] = YAxisRange(*extent);
  if (!(x_hi > x_lo) || !(y_hi > y_lo)) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty axis range: x [", x_lo, ", ", x_hi, "], y [", y_lo, ", ", y_hi, "]"));
  }
  if (x_scale_ == AxisScale::kLog10 && x_lo <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("log x axis needs x > 0, range starts at ", x_lo));
  }
  layout.x_lo = x_lo;
  layout.x_hi = x_hi;
  layout.y_lo = y_lo;
  layout.y_hi = y_hi;
  layout.font = font_scale_;
  if (absl::Status st = PlaceDataArea(layout); !st.ok()) return st;
  return layout;
}

double Plot::MapX(const Layout& layout, double x) const {
  const double t = AxisFraction(x, layout.x_lo, layout.x_hi, x_scale_);
  return layout.area.x0 + t * (layout.area.width() - 1);
}

double Plot::MapY(const Layout& layout, double y) const {
  const double t = AxisFraction(y, layout.y_lo, layout.y_hi, AxisScale::kLinear);
  return layout.area.y1 - 1 - t * (layout.area.height() - 1);
}

absl::StatusOr<std::pair<int, int>> Plot::DataToPixel(double x, double y) const {
  SCD_ASSIGN_OR_RETURN(Layout layout, ComputeLayout());
  if (x_scale_ == AxisScale::kLog10 && x <= 0) {
    return absl::InvalidArgumentError("log x axis needs x > 0");
  }
  return std::make_pair(static_cast<int>(std::lround(MapX(layout, x))),
                        static_cast<int>(std::lround(MapY(layout, y))));
}

void Plot::DrawAxes(const Layout& layout, Canvas& canvas) const {
  const PixelRect& a = layout.area;
  // Grid first, under everything else.
  canvas.SetClip(a);
  for (const Tick& t : layout.x_ticks) {
    const double x = std::round(MapX(layout, t.value));
    canvas.DrawLine(x, a.y0, x, a.y1 - 1, t.major ? kGridMajor : kGridMinor);
  }
  for (const Tick& t : layout.y_ticks) {
    const double y = std::round(MapY(layout, t.value));
    canvas.DrawLine(a.x0, y, a.x1 - 1, y, kGridMajor);
  }
  canvas.ResetClip();
}

void Plot::DrawSeries(const Layout& layout, const Series& s, Canvas& canvas) const {
  canvas.SetClip(layout.area);
  if (s.style == SeriesStyle::kBars) {
    const double base = MapY(layout, std::clamp(0.0, layout.y_lo, layout.y_hi));
    for (size_t i = 0; i < s.xs.size(); ++i) {
      int x0 = static_cast<int>(std::lround(MapX(layout, s.xs[i])));
      int x1 = static_cast<int>(std::lround(MapX(layout, s.bar_rights[i])));
      if (x1 - x0 > 3) x1 -= 1;  // a one-pixel gap between neighbouring bars
      const double top = MapY(layout, s.ys[i]);
      const int y0 = static_cast<int>(std::lround(std::min(top, base)));
      const int y1 = static_cast<int>(std::lround(std::max(top, base))) + 1;
      canvas.FillRect({x0, y0, std::max(x1, x0 + 1), y1}, s.color);
    }
  } else {
    if (s.style == SeriesStyle::kLine || s.style == SeriesStyle::kLineAndMarkers) {
      for (size_t i = 1; i < s.xs.size(); ++i) {
        canvas.DrawLine(MapX(layout, s.xs[i - 1]), MapY(layout, s.ys[i - 1]), MapX(layout, s.xs[i]),
                        MapY(layout, s.ys[i]), s.color, s.line_width);
      }
    }
    if (s.style == SeriesStyle::kMarkers || s.style == SeriesStyle::kLineAndMarkers) {
      for (size_t i = 0; i < s.xs.size(); ++i) {
        canvas.DrawMarker(static_cast<int>(std::lround(MapX(layout, s.xs[i]))),
                          static_cast<int>(std::lround(MapY(layout, s.ys[i]))), s.marker,
                          s.marker_radius, s.color);
      }
    }
  }
  canvas.ResetClip();
}

void Plot::DrawLegend(const Layout& layout, Canvas& canvas) const {
  std::vector<const Series*> entries;
  for (const Series& s : series_) {
    if (!s.name.empty()) entries.push_back(&s);
  }
  if (entries.empty() || legend_ == LegendPosition::kNone) return;
  const int f = layout.font;
  const int sample = 12 * f + 6;
  const int row = TextHeight(f) + 2 * f + 2;
  int text_w = 0;
  for (const Series* s : entries) text_w = std::max(text_w, TextWidth(s->name, f));
  const int w = kPad + sample + kPad / 2 + text_w + kPad;
  const int h = static_cast<int>(entries.size()) * row + kPad;
  const PixelRect& a = layout.area;
  auto rect_at = [&](LegendPosition p) {
    const bool right = p == LegendPosition::kTopRight || p == LegendPosition::kBottomRight;
    const bool top = p == LegendPosition::kTopRight || p == LegendPosition::kTopLeft;
    const int x0 = right ? a.x1 - kPad - w : a.x0 + kPad;
    const int y0 = top ? a.y0 + kPad : a.y1 - kPad - h;
    return PixelRect{x0, y0, x0 + w, y0 + h};
  };
  LegendPosition where = legend_;
  if (where == LegendPosition::kAuto) {
    // The corner that hides the fewest data points (and segment midpoints).
    int best = std::numeric_limits<int>::max();
    for (LegendPosition p : {LegendPosition::kTopRight, LegendPosition::kTopLeft,
                             LegendPosition::kBottomRight, LegendPosition::kBottomLeft}) {
      const PixelRect r = rect_at(p);
      int hidden = 0;
      for (const Series& s : series_) {
        for (size_t i = 0; i < s.xs.size(); ++i) {
          const double xr = s.style == SeriesStyle::kBars ? s.bar_rights[i] : s.xs[i];
          const double px = MapX(layout, 0.5 * (s.xs[i] + xr));
          hidden += r.Contains(static_cast<int>(px), static_cast<int>(MapY(layout, s.ys[i])));
          if (i > 0 && s.style != SeriesStyle::kMarkers && s.style != SeriesStyle::kBars) {
            const double mx = 0.5 * (MapX(layout, s.xs[i - 1]) + MapX(layout, s.xs[i]));
            const double my = 0.5 * (MapY(layout, s.ys[i - 1]) + MapY(layout, s.ys[i]));
            hidden += r.Contains(static_cast<int>(mx), static_cast<int>(my));
          }
        }
      }
      if (hidden < best) {
        best = hidden;
        where = p;
      }
    }
  }
  const PixelRect box = rect_at(where);
  canvas.FillRect(box, kWhite);
  canvas.StrokeRect(box, kLegendBorder);
  for (size_t i = 0; i < entries.size(); ++i) {
    const Series& s = *entries[i];
    const int y_mid = box.y0 + kPad / 2 + static_cast<int>(i) * row + row / 2;
    const int x0 = box.x0 + kPad;
    if (s.style == SeriesStyle::kBars) {
      canvas.FillRect({x0 + sample / 4, y_mid - row / 3, x0 + 3 * sample / 4, y_mid + row / 3},
                      s.color);
    }
    if (s.style == SeriesStyle::kLine || s.style == SeriesStyle::kLineAndMarkers) {
      canvas.DrawLine(x0, y_mid, x0 + sample, y_mid, s.color, s.line_width);
    }
    if (s.style == SeriesStyle::kMarkers || s.style == SeriesStyle::kLineAndMarkers) {
      canvas.DrawMarker(x0 + sample / 2, y_mid, s.marker, s.marker_radius, s.color);
    }
    canvas.DrawText(x0 + sample + kPad / 2, y_mid - TextHeight(f) / 2, s.name, kText, f);
  }
}

absl::StatusOr<Canvas> Plot::Render() const {
  SCD_ASSIGN_OR_RETURN(Layout layout, ComputeLayout());
  Canvas canvas(width_, height_, kWhite);
  const PixelRect& a = layout.area;
  const int f = layout.font;
  DrawAxes(layout, canvas);
  for (const Series& s : series_) DrawSeries(layout, s, canvas);

  // Frame and ticks on top of the data, then the text around them.
  canvas.StrokeRect({a.x0 - 1, a.y0 - 1, a.x1 + 1, a.y1 + 1}, kFrame);
  for (const Tick& t : layout.x_ticks) {
    const int x = static_cast<int>(std::lround(MapX(layout, t.value)));
    const int len = t.major ? kTickLength : kTickLength / 2 + 1;
    canvas.FillRect({x, a.y1 + 1, x + 1, a.y1 + 1 + len}, kFrame);
    if (t.label.empty()) continue;
    const int w = TextWidth(t.label, f);
    canvas.DrawText(x - w / 2, a.y1 + 1 + kTickLength + 4, t.label, kText, f);
  }
  for (const Tick& t : layout.y_ticks) {
    const int y = static_cast<int>(std::lround(MapY(layout, t.value)));
    canvas.FillRect({a.x0 - 1 - kTickLength, y, a.x0 - 1, y + 1}, kFrame);
    const int w = TextWidth(t.label, f);
    canvas.DrawText(a.x0 - 1 - kTickLength - 4 - w, y - TextHeight(f) / 2, t.label, kText, f);
  }
  if (!title_.empty()) {
    const int w = TextWidth(title_, f + 1);
    // Centred over the data area, shifted left (never past the margin) if it would overflow.
    const int x = std::max(kPad, std::min((a.x0 + a.x1 - w) / 2, width_ - kPad - w));
    canvas.DrawText(x, kPad, title_, kText, f + 1);
  }
  if (!x_label_.empty()) {
    const int w = TextWidth(x_label_, f);
    canvas.DrawText((a.x0 + a.x1 - w) / 2, height_ - kPad - TextHeight(f), x_label_, kText, f);
  }
  if (!y_label_.empty()) {
    const int h = TextWidth(y_label_, f);
    canvas.DrawTextVertical(kPad, std::max(0, (a.y0 + a.y1 - h) / 2), y_label_, kText, f);
  }
  DrawLegend(layout, canvas);
  return canvas;
}

absl::Status Plot::WritePng(const std::string& path) const {
  SCD_ASSIGN_OR_RETURN(Canvas canvas, Render());
  return plot::WritePng(path, canvas);
}

}  // namespace scd::plot
