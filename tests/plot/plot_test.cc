// Tests for the raster plot library: the font table, canvas primitives, PNG round trips
// through libpng, tick placement, and real pixel behaviour of rendered plots (a series is
// found in its colour at the pixel its data point maps to).
#include "common/plot/plot.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "common/plot/axis.h"
#include "common/plot/bitmap_font.h"
#include "common/plot/canvas.h"
#include "common/plot/png_io.h"
#include "tests/test_support.h"

namespace scd::plot {
namespace {

int CountPixels(const RgbImage& image, Color c) {
  int n = 0;
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) n += image.Pixel(x, y) == c;
  }
  return n;
}

// True when some pixel within `radius` of (x, y) has colour `c`.
bool ColorNear(const RgbImage& image, int x, int y, Color c, int radius) {
  for (int dy = -radius; dy <= radius; ++dy) {
    for (int dx = -radius; dx <= radius; ++dx) {
      const int px = x + dx, py = y + dy;
      if (px >= 0 && py >= 0 && px < image.width && py < image.height && image.Pixel(px, py) == c) {
        return true;
      }
    }
  }
  return false;
}

TEST_CASE("font covers printable ASCII with distinct glyphs", "[cpu]") {
  for (int c = 33; c <= 126; ++c) {
    int on = 0;
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) on += GlyphPixel(static_cast<char>(c), col, row);
    }
    INFO("char " << static_cast<char>(c));
    CHECK(on > 0);
  }
  for (int a = 33; a <= 126; ++a) {
    for (int b = a + 1; b <= 126; ++b) {
      INFO(static_cast<char>(a) << " vs " << static_cast<char>(b));
      CHECK(Glyph(static_cast<char>(a)) != Glyph(static_cast<char>(b)));
    }
  }
  CHECK(Glyph(' ') == std::array<uint8_t, kGlyphHeight>{});
  CHECK(Glyph('\x01') == Glyph('?'));
  // 'T': full top bar, then a centre stem.
  CHECK(Glyph('T')[0] == 0x1F);
  CHECK(GlyphPixel('T', 2, 6));
  CHECK_FALSE(GlyphPixel('T', 0, 6));
  CHECK(TextWidth("ab", 1) == 11);
  CHECK(TextWidth("ab", 2) == 22);
  CHECK(TextWidth("", 3) == 0);
}

TEST_CASE("canvas primitives set exact pixels and respect the clip", "[cpu]") {
  Canvas canvas(20, 10, kWhite);
  const Color red{255, 0, 0};
  canvas.DrawLine(0, 5, 19, 5, red, 1);
  for (int x = 0; x < 20; ++x) CHECK(canvas.GetPixel(x, 5) == red);
  CHECK(canvas.GetPixel(3, 3) == kWhite);

  canvas.SetClip({0, 0, 10, 10});
  canvas.FillRect({0, 0, 20, 2}, red);
  canvas.ResetClip();
  CHECK(canvas.GetPixel(9, 0) == red);
  CHECK(canvas.GetPixel(10, 0) == kWhite);

  Canvas text(40, 12, kWhite);
  text.DrawText(1, 1, "T", kBlack, 1);
  CHECK(text.GetPixel(1, 1) == kBlack);  // top bar, left end
  CHECK(text.GetPixel(5, 1) == kBlack);  // top bar, right end
  CHECK(text.GetPixel(3, 7) == kBlack);  // stem bottom
  CHECK(text.GetPixel(1, 7) == kWhite);

  Canvas vertical(12, 40, kWhite);
  vertical.DrawTextVertical(0, 0, "T", kBlack, 1);
  // Rotated counter-clockwise: the top bar becomes the left column (x = row 0), reading up.
  for (int y = 0; y < 5; ++y) CHECK(vertical.GetPixel(0, y) == kBlack);
  CHECK(vertical.GetPixel(6, 2) == kBlack);  // stem end, at the glyph's middle column
  CHECK(vertical.GetPixel(6, 0) == kWhite);
}

TEST_CASE("PNG round trip through libpng keeps size and pixels", "[cpu]") {
  Canvas canvas(7, 5, Color{10, 20, 30});
  canvas.SetPixel(6, 4, Color{200, 100, 50});
  const std::string path = testing::TempDir() + "/tiny.png";
  REQUIRE(WritePng(path, canvas).ok());
  const std::string bytes = testing::ReadFileOrFail(path);
  REQUIRE(bytes.size() > 8);
  CHECK(bytes.substr(1, 3) == "PNG");
  auto image = ReadPng(path);
  REQUIRE(image.ok());
  CHECK(image->width == 7);
  CHECK(image->height == 5);
  CHECK(image->Pixel(0, 0) == Color{10, 20, 30});
  CHECK(image->Pixel(6, 4) == Color{200, 100, 50});

  CHECK(EncodePng(0, 5, {}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(EncodePng(2, 2, std::vector<uint8_t>(5)).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(DecodePng("not a png").status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(ReadPng(testing::TempDir() + "/missing.png").status().code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("nice ticks and labels", "[cpu]") {
  CHECK(NiceStep(0, 1, 6) == Approx(0.2));
  CHECK(NiceStep(0, 100, 5) == Approx(20));
  CHECK(NiceStep(0, 7, 8) == Approx(1));
  auto ticks = LinearTicks(-0.05, 1.05, 6);
  REQUIRE(ticks.size() == 6);
  CHECK(ticks.front().label == "0.0");
  CHECK(ticks.back().label == "1.0");
  CHECK(ticks[1].label == "0.2");
  CHECK(FormatTickValue(-1e-18, 0.1) == "0.0");
  CHECK(FormatTickValue(2500000, 500000) == "2.5e+06");
  CHECK(FormatTickValue(250, 50) == "250");

  auto log_ticks = LogTicks(0.5, 2000, 6);
  std::vector<std::string> labels;
  for (const Tick& t : log_ticks) {
    if (!t.label.empty()) labels.push_back(t.label);
  }
  CHECK(labels == std::vector<std::string>{"1", "10", "100", "1000"});
  CHECK(log_ticks.size() > labels.size());  // minor ticks at 2..9 x 10^k
  // Under a decade: falls back to nice linear ticks, still labelled.
  auto narrow = LogTicks(2, 8, 5);
  REQUIRE(narrow.size() >= 3);
  CHECK(!narrow.front().label.empty());
  CHECK(AxisFraction(10, 1, 100, AxisScale::kLog10) == Approx(0.5));
  CHECK(AxisFraction(3, 2, 4, AxisScale::kLinear) == Approx(0.5));
}

TEST_CASE("rendered plot has each series' colour at its data points", "[cpu]") {
  Plot plot(640, 480);
  plot.SetTitle("Quality vs payload");
  plot.SetXLabel("payload / raw fp16");
  plot.SetYLabel("exact match");
  REQUIRE(plot.AddSeries("scd", {0.1, 0.3, 0.5, 0.9}, {0.2, 0.6, 0.4, 0.8}).ok());
  SeriesOptions markers;
  markers.style = SeriesStyle::kMarkers;
  markers.marker = MarkerShape::kSquare;
  REQUIRE(plot.AddSeries("raw", {1.0}, {0.36}, markers).ok());
  const std::string path = testing::TempDir() + "/series.png";
  REQUIRE(plot.WritePng(path).ok());

  auto image = ReadPng(path);
  REQUIRE(image.ok());
  CHECK(image->width == 640);
  CHECK(image->height == 480);
  const Color scd_color = plot.SeriesColor(0);
  const Color raw_color = plot.SeriesColor(1);
  CHECK(scd_color == PaletteColor(0));
  CHECK(raw_color != scd_color);

  const std::vector<std::pair<double, double>> scd_points = {
      {0.1, 0.2}, {0.3, 0.6}, {0.5, 0.4}, {0.9, 0.8}};
  for (const auto& [x, y] : scd_points) {
    auto px = plot.DataToPixel(x, y);
    REQUIRE(px.ok());
    INFO("point (" << x << ", " << y << ") at pixel " << px->first << "," << px->second);
    CHECK(image->Pixel(px->first, px->second) == scd_color);
  }
  auto raw_px = plot.DataToPixel(1.0, 0.36);
  REQUIRE(raw_px.ok());
  CHECK(image->Pixel(raw_px->first, raw_px->second) == raw_color);
  // The line between (0.1, 0.2) and (0.3, 0.6) passes through its midpoint.
  auto mid = plot.DataToPixel(0.2, 0.4);
  REQUIRE(mid.ok());
  CHECK(ColorNear(*image, mid->first, mid->second, scd_color, 1));
  // Away from the data the area is background; text is drawn somewhere.
  auto empty = plot.DataToPixel(0.9, 0.25);
  REQUIRE(empty.ok());
  CHECK(image->Pixel(empty->first, empty->second) == kWhite);
  CHECK(CountPixels(*image, Color{20, 20, 20}) > 200);  // title, ticks, labels, legend
  // Every series appears in the legend too: more pixels than its data alone draw.
  CHECK(CountPixels(*image, raw_color) > 81);
}

TEST_CASE("log-x axis maps decades evenly", "[cpu]") {
  Plot plot(600, 400);
  plot.SetLogX(true);
  plot.SetLegend(LegendPosition::kNone);
  REQUIRE(plot.AddSeries("", {1, 10, 100, 1000}, {1, 2, 3, 4}).ok());
  auto p1 = plot.DataToPixel(1, 1), p10 = plot.DataToPixel(10, 2), p100 = plot.DataToPixel(100, 3);
  REQUIRE(p1.ok());
  REQUIRE(p10.ok());
  REQUIRE(p100.ok());
  CHECK(std::abs((p10->first - p1->first) - (p100->first - p10->first)) <= 1);
  auto canvas = plot.Render();
  REQUIRE(canvas.ok());
  CHECK(canvas->GetPixel(p100->first, p100->second) == PaletteColor(0));

  Plot bad(600, 400);
  bad.SetLogX(true);
  REQUIRE(bad.AddSeries("zero", {0, 1}, {1, 2}).ok());
  auto status = bad.Render().status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(status.message()).find("zero") != std::string::npos);
}

TEST_CASE("histogram bins and bars", "[cpu]") {
  auto h = ComputeHistogram({1, 2, 2, 3, 3, 3, 4, 10}, 3, std::make_pair(1.0, 4.0));
  REQUIRE(h.ok());
  CHECK(h->counts == std::vector<int64_t>{1, 2, 4});  // 4 falls in the closed last bin
  CHECK(h->outside == 1);
  CHECK(h->edges.front() == 1.0);
  CHECK(h->edges.back() == 4.0);
  auto log_h = ComputeHistogram({1, 10, 100, 1000}, 3, std::make_pair(1.0, 1000.0), true);
  REQUIRE(log_h.ok());
  CHECK(log_h->edges[1] == Approx(10));
  CHECK(log_h->counts == std::vector<int64_t>{1, 1, 2});
  CHECK(!ComputeHistogram({1, 2}, 0).ok());
  CHECK(!ComputeHistogram({-1, 2}, 2, std::nullopt, true).ok());

  Plot plot(500, 360);
  plot.SetTitle("TTFT");
  REQUIRE(plot.AddHistogram("ttft", *h).ok());
  auto canvas = plot.Render();
  REQUIRE(canvas.ok());
  // The tallest bar's middle, half-way up, is filled with the series colour.
  auto px = plot.DataToPixel(3.5, 2.0);
  REQUIRE(px.ok());
  CHECK(canvas->GetPixel(px->first, px->second) == plot.SeriesColor(0));
  // Above the shortest bar there is no fill.
  auto above = plot.DataToPixel(1.5, 2.0);
  REQUIRE(above.ok());
  CHECK(canvas->GetPixel(above->first, above->second) != plot.SeriesColor(0));
}

TEST_CASE("plot input errors are reported", "[cpu]") {
  Plot plot(300, 200);
  auto st = plot.AddSeries("s", {1, 2}, {1});
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(st.message()).find("'s'") != std::string::npos);
  CHECK(plot.AddSeries("nan", {1, 2}, {1, NAN}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(plot.AddBars("b", {1}, {0.5}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(Plot(10, 10).Render().status().code() == absl::StatusCode::kInvalidArgument);
  Plot ranged(300, 200);
  ranged.SetYRange(1, 1);
  CHECK(ranged.Render().status().code() == absl::StatusCode::kInvalidArgument);
  // An empty plot still renders axes.
  CHECK(Plot(300, 200).Render().ok());
}

}  // namespace
}  // namespace scd::plot
