// Canvas drawing primitives. Lines use the distance-to-segment test over the segment's
// bounding box rather than Bresenham, which gives uniform thickness at every slope and round
// joins between consecutive segments of a polyline for free.
#include "common/plot/canvas.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "common/plot/bitmap_font.h"

namespace scd::plot {

Canvas::Canvas(int width, int height, Color background)
    : width_(std::max(width, 0)), height_(std::max(height, 0)) {
  if (width_ == 0 || height_ == 0) width_ = height_ = 0;
  rgb_.resize(static_cast<size_t>(width_) * height_ * 3);
  for (size_t i = 0; i < rgb_.size(); i += 3) {
    rgb_[i] = background.r;
    rgb_[i + 1] = background.g;
    rgb_[i + 2] = background.b;
  }
  ResetClip();
}

void Canvas::SetClip(const PixelRect& clip) {
  clip_.x0 = std::clamp(clip.x0, 0, width_);
  clip_.y0 = std::clamp(clip.y0, 0, height_);
  clip_.x1 = std::clamp(clip.x1, clip_.x0, width_);
  clip_.y1 = std::clamp(clip.y1, clip_.y0, height_);
}

void Canvas::ResetClip() { clip_ = PixelRect{0, 0, width_, height_}; }

void Canvas::SetPixel(int x, int y, Color c) {
  if (!Visible(x, y)) return;
  size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  rgb_[i] = c.r;
  rgb_[i + 1] = c.g;
  rgb_[i + 2] = c.b;
}

Color Canvas::GetPixel(int x, int y) const {
  if (x < 0 || y < 0 || x >= width_ || y >= height_) return kBlack;
  size_t i = (static_cast<size_t>(y) * width_ + x) * 3;
  return Color{rgb_[i], rgb_[i + 1], rgb_[i + 2]};
}

void Canvas::FillRect(const PixelRect& rect, Color c) {
  int x0 = std::max(rect.x0, clip_.x0), x1 = std::min(rect.x1, clip_.x1);
  int y0 = std::max(rect.y0, clip_.y0), y1 = std::min(rect.y1, clip_.y1);
  for (int y = y0; y < y1; ++y) {
    for (int x = x0; x < x1; ++x) SetPixel(x, y, c);
  }
}

void Canvas::StrokeRect(const PixelRect& rect, Color c) {
  if (rect.width() <= 0 || rect.height() <= 0) return;
  FillRect({rect.x0, rect.y0, rect.x1, rect.y0 + 1}, c);
  FillRect({rect.x0, rect.y1 - 1, rect.x1, rect.y1}, c);
  FillRect({rect.x0, rect.y0, rect.x0 + 1, rect.y1}, c);
  FillRect({rect.x1 - 1, rect.y0, rect.x1, rect.y1}, c);
}

void Canvas::DrawLine(double x0, double y0, double x1, double y1, Color c, int thickness) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) {
    return;
  }
  // A thickness-1 line keeps every pixel within half a diagonal (8-connected, no gaps).
  const double half = thickness <= 1 ? 0.7072 : thickness / 2.0;
  const double dx = x1 - x0, dy = y1 - y0;
  const double len2 = dx * dx + dy * dy;
  const int bx0 = std::max(static_cast<int>(std::floor(std::min(x0, x1) - half)), clip_.x0);
  const int bx1 = std::min(static_cast<int>(std::ceil(std::max(x0, x1) + half)), clip_.x1 - 1);
  const int by0 = std::max(static_cast<int>(std::floor(std::min(y0, y1) - half)), clip_.y0);
  const int by1 = std::min(static_cast<int>(std::ceil(std::max(y0, y1) + half)), clip_.y1 - 1);
  for (int y = by0; y <= by1; ++y) {
    for (int x = bx0; x <= bx1; ++x) {
      double t = len2 > 0 ? ((x - x0) * dx + (y - y0) * dy) / len2 : 0.0;
      t = std::clamp(t, 0.0, 1.0);
      const double px = x0 + t * dx - x, py = y0 + t * dy - y;
      if (px * px + py * py <= half * half) SetPixel(x, y, c);
    }
  }
}

void Canvas::DrawMarker(int cx, int cy, MarkerShape shape, int radius, Color c) {
  const int r = std::max(radius, 1);
  for (int dy = -r; dy <= r; ++dy) {
    for (int dx = -r; dx <= r; ++dx) {
      bool on = false;
      switch (shape) {
        case MarkerShape::kCircle:
          on = dx * dx + dy * dy <= r * r + r;
          break;
        case MarkerShape::kSquare:
          on = true;
          break;
        case MarkerShape::kDiamond:
          on = std::abs(dx) + std::abs(dy) <= r;
          break;
        case MarkerShape::kTriangle:
          // Apex at the top, base at the bottom: half-width grows from 0 to r.
          on = 2 * std::abs(dx) <= dy + r;
          break;
        case MarkerShape::kCross:
          on = std::abs(std::abs(dx) - std::abs(dy)) <= (r >= 3 ? 1 : 0);
          break;
      }
      if (on) SetPixel(cx + dx, cy + dy, c);
    }
  }
}

void Canvas::DrawText(int x, int y, std::string_view text, Color c, int scale) {
  scale = std::max(scale, 1);
  for (size_t i = 0; i < text.size(); ++i) {
    const int gx = x + static_cast<int>(i) * kCellWidth * scale;
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (!GlyphPixel(text[i], col, row)) continue;
        FillRect({gx + col * scale, y + row * scale, gx + (col + 1) * scale, y + (row + 1) * scale},
                 c);
      }
    }
  }
}

void Canvas::DrawTextVertical(int x, int y, std::string_view text, Color c, int scale) {
  scale = std::max(scale, 1);
  // Rotating 90° counter-clockwise maps glyph (col, row) of character i, at horizontal offset
  // u = i*cell + col, to (x + row, y + total_width - 1 - u).
  const int total = TextWidth(text, 1);
  for (size_t i = 0; i < text.size(); ++i) {
    for (int row = 0; row < kGlyphHeight; ++row) {
      for (int col = 0; col < kGlyphWidth; ++col) {
        if (!GlyphPixel(text[i], col, row)) continue;
        const int u = static_cast<int>(i) * kCellWidth + col;
        const int px = x + row * scale;
        const int py = y + (total - 1 - u) * scale;
        FillRect({px, py, px + scale, py + scale}, c);
      }
    }
  }
}

}  // namespace scd::plot
