// PNG through libpng's simplified API: png_image_write_to_memory then an atomic file write;
// png_image_begin_read_from_memory / png_image_finish_read for decoding. The simplified API
// reports errors in image.message instead of longjmp, which keeps this file free of setjmp.
#include "common/plot/png_io.h"

#include <png.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/base/status_macros.h"

namespace scd::plot {

absl::StatusOr<std::string> EncodePng(int width, int height, const std::vector<uint8_t>& rgb) {
  if (width <= 0 || height <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("EncodePng: empty image ", width, "x", height));
  }
  if (rgb.size() != static_cast<size_t>(width) * height * 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("EncodePng: ", rgb.size(), " bytes for a ", width, "x", height, " RGB image"));
  }
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  // First call sizes the buffer, second fills it.
  if (!png_image_write_to_memory(&image, nullptr, &size, 0, rgb.data(), 0, nullptr)) {
    return absl::InternalError(absl::StrCat("libpng: ", image.message));
  }
  std::string out(size, '\0');
  if (!png_image_write_to_memory(&image, out.data(), &size, 0, rgb.data(), 0, nullptr)) {
    return absl::InternalError(absl::StrCat("libpng: ", image.message));
  }
  out.resize(size);
  return out;
}

absl::Status WritePng(const std::string& path, const Canvas& canvas) {
  SCD_ASSIGN_OR_RETURN(std::string bytes, EncodePng(canvas.width(), canvas.height(), canvas.rgb()));
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<RgbImage> DecodePng(const std::string& png_bytes) {
  png_image image;
  std::memset(&image, 0, sizeof(image));
  image.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&image, png_bytes.data(), png_bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("not a PNG: ", image.message));
  }
  image.format = PNG_FORMAT_RGB;
  RgbImage out;
  out.width = static_cast<int>(image.width);
  out.height = static_cast<int>(image.height);
  out.rgb.resize(PNG_IMAGE_SIZE(image));
  png_color black{0, 0, 0};
  if (!png_image_finish_read(&image, &black, out.rgb.data(), 0, nullptr)) {
    png_image_free(&image);
    return absl::InvalidArgumentError(absl::StrCat("corrupt PNG: ", image.message));
  }
  return out;
}

absl::StatusOr<RgbImage> ReadPng(const std::string& path) {
  SCD_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  absl::StatusOr<RgbImage> image = DecodePng(bytes);
  if (!image.ok()) {
    return absl::Status(image.status().code(), absl::StrCat(path, ": ", image.status().message()));
  }
  return image;
}

}  // namespace scd::plot
