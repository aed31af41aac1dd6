// BitmapFont: a built-in 5x7 pixel font for printable ASCII (32..126), so plots can carry
// titles, tick labels and legends without a font library. Each glyph is seven rows of five
// bits (bit 4 is the leftmost column); a glyph occupies a 6x8 cell (one column and one row of
// spacing). Characters outside 32..126 render as '?'.
#ifndef SCD_COMMON_PLOT_BITMAP_FONT_H_
#define SCD_COMMON_PLOT_BITMAP_FONT_H_

#include <array>
#include <cstdint>
#include <string_view>

namespace scd::plot {

inline constexpr int kGlyphWidth = 5;
inline constexpr int kGlyphHeight = 7;
inline constexpr int kCellWidth = kGlyphWidth + 1;    // advance per character
inline constexpr int kCellHeight = kGlyphHeight + 1;  // line height

// The seven row bitmaps of `c` (bit 4 = leftmost pixel).
const std::array<uint8_t, kGlyphHeight>& Glyph(char c);

// True when pixel (col, row) of `c`'s glyph is set; false outside the 5x7 box.
bool GlyphPixel(char c, int col, int row);

// Size in pixels of `text` drawn on one line at integer `scale` (no trailing spacing).
int TextWidth(std::string_view text, int scale);
inline int TextHeight(int scale) { return kGlyphHeight * scale; }

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_BITMAP_FONT_H_
