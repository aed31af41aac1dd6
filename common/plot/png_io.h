// PNG encoding and decoding of 8-bit RGB images through libpng's simplified API
// (png_image_*, libpng >= 1.6). Writes go through WriteFileAtomically, so a reader never
// sees a half-written plot.
#ifndef SCD_COMMON_PLOT_PNG_IO_H_
#define SCD_COMMON_PLOT_PNG_IO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/plot/canvas.h"

namespace scd::plot {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel

  Color Pixel(int x, int y) const {
    const size_t i = (static_cast<size_t>(y) * width + x) * 3;
    return Color{rgb[i], rgb[i + 1], rgb[i + 2]};
  }
};

// PNG bytes of an RGB image; InvalidArgument for an empty image or a size mismatch.
absl::StatusOr<std::string> EncodePng(int width, int height, const std::vector<uint8_t>& rgb);
absl::Status WritePng(const std::string& path, const Canvas& canvas);

// Decodes any PNG libpng reads (converted to 8-bit RGB, alpha composited on black).
absl::StatusOr<RgbImage> DecodePng(const std::string& png_bytes);
absl::StatusOr<RgbImage> ReadPng(const std::string& path);

}  // namespace scd::plot

#endif  // SCD_COMMON_PLOT_PNG_IO_H_
