// Canvas: an 8-bit RGB raster with the few drawing primitives a chart needs: pixels, filled
// rectangles, thick line segments, markers and bitmap-font text (horizontal, or rotated 90°
// for a y-axis label). Nothing is anti-aliased, so every drawn pixel carries exactly its
// colour; tests rely on that to find a series at its mapped coordinates.
//
// Coordinates are pixels with (0, 0) at the top-left. Every primitive is clipped to the
// canvas and to an optional clip rectangle (the plot area, so data never paints over axes).
#ifndef SCD_COMMON_PLOT_CANVAS_H_
#define SCD_COMMON_PLOT_CANVAS_H_

#include <cstdint>
#include <string_view>
#include <vector>

namespace scd::plot {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Color& a, const Color& b) {
    return a.r == b.r && a.g == b.g && a.b == b.b;
  }
  friend bool operator!=(const Color& a, const Color& b) { return !(a == b); }
};

inline constexpr Color kWhite{255, 255, 255};
inline constexpr Color kBlack{0, 0, 0};

// Half-open pixel rectangle [x0, x1) x [y0, y1).
struct PixelRect {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  bool Contains(int x, int y) const { return x >= x0 && x < x1 && y >= y0 && y < y1; }
  int width() const { return x1 - x0; }
  int height() const { return y1 - y0; }
};

enum class MarkerShape { kCircle, kSquare, kDiamond, kTriangle, kCross };

class Canvas {
 public:
  // Non-positive sizes give an empty canvas (every draw is a no-op).
  Canvas(int width, int height, Color background = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }
  // Row-major RGB bytes, 3 per pixel.
  const std::vector<uint8_t>& rgb() const { return rgb_; }

  // Restricts drawing to `clip` (intersected with the canvas) until ResetClip().
  void SetClip(const PixelRect& clip);
  void ResetClip();

  void SetPixel(int x, int y, Color c);
  // The pixel's colour; black outside the canvas.
  Color GetPixel(int x, int y) const;

  void FillRect(const PixelRect& rect, Color c);
  // One-pixel outline of `rect`.
  void StrokeRect(const PixelRect& rect, Color c);
  // Segment from (x0, y0) to (x1, y1) with round caps: every pixel whose centre lies within
  // thickness/2 of the segment. Thickness 1 is a plain 8-connected line.
  void DrawLine(double x0, double y0, double x1, double y1, Color c, int thickness = 1);
  // Marker centred at (cx, cy) with half-size `radius`.
  void DrawMarker(int cx, int cy, MarkerShape shape, int radius, Color c);

  // Text with its top-left corner at (x, y), each font pixel a scale x scale block.
  void DrawText(int x, int y, std::string_view text, Color c, int scale = 1);
  // Text rotated 90° counter-clockwise (reads bottom to top); (x, y) is the top-left of its
  // bounding box, which is TextHeight(scale) wide and TextWidth(text, scale) tall.
  void DrawTextVertical(int x, int y, std::string_view text, Color c, int scale = 1);

 private:
  bool Visible(int x, int y) const { return clip_.Contains(x, y); }

  int width_;
  int height_;
  std::vector<uint8_t> rgb_;
  PixelRect clip_;
};

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_CANVAS_H_
