// See quantize.h. The asymmetric group quantiser is written once over (start, stride, count)
// element walks; keys walk a column segment, values walk a row segment.
#include "common/scd/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/float16.h"
#include "common/base/status_macros.h"

namespace scd {
namespace {

bool IsKey(Encoding e) { return e == Encoding::kKeyInt8 || e == Encoding::kKeyInt4; }
bool IsValue(Encoding e) { return e == Encoding::kValueInt8 || e == Encoding::kValueInt4; }
int Bits(Encoding e) { return (e == Encoding::kKeyInt4 || e == Encoding::kValueInt4) ? 4 : 8; }

// Number of groups and the element walk of group g.
struct Groups {
  int rows, cols, group;
  bool per_channel;  // key layout: groups run down a column
  long count() const {
    return per_channel ? static_cast<long>((rows + group - 1) / group) * cols
                       : static_cast<long>(rows) * ((cols + group - 1) / group);
  }
  // First element index, stride and length of group g.
  void Walk(long g, long* first, long* stride, int* len) const {
    if (per_channel) {
      const int col = static_cast<int>(g % cols);
      const int block = static_cast<int>(g / cols);
      *first = static_cast<long>(block) * group * cols + col;
      *stride = cols;
      *len = std::min(group, rows - block * group);
    } else {
      const int per_row = (cols + group - 1) / group;
      const int row = static_cast<int>(g / per_row);
      const int block = static_cast<int>(g % per_row);
      *first = static_cast<long>(row) * cols + static_cast<long>(block) * group;
      *stride = 1;
      *len = std::min(group, cols - block * group);
    }
  }
};

void PutCode(uint8_t* codes, long i, int bits, uint32_t q) {
  if (bits == 8) {
    codes[i] = static_cast<uint8_t>(q);
  } else if (i % 2 == 0) {
    codes[i / 2] = static_cast<uint8_t>((codes[i / 2] & 0xF0) | q);
  } else {
    codes[i / 2] = static_cast<uint8_t>((codes[i / 2] & 0x0F) | (q << 4));
  }
}

uint32_t GetCode(const uint8_t* codes, long i, int bits) {
  if (bits == 8) return codes[i];
  return (i % 2 == 0) ? (codes[i / 2] & 0x0F) : (codes[i / 2] >> 4);
}

// INVALID_ARGUMENT unless `bytes` is what EncodeMatrix writes for this shape.
absl::Status CheckEncodedSize(Encoding e, size_t bytes, int rows, int cols, int group) {
  if (rows >= 0 && cols >= 0 && bytes == EncodedBytes(e, rows, cols, group)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(std::string(EncodingName(e)), " block of ", rows,
                                                 "x", cols, " holds ", bytes, " bytes, expected ",
                                                 EncodedBytes(e, rows, cols, group)));
}

}  // namespace

std::string_view EncodingName(Encoding e) {
  switch (e) {
    case Encoding::kF32:
      return "f32";
    case Encoding::kF16:
      return "f16";
    case Encoding::kInt8Row:
      return "int8-row";
    case Encoding::kKeyInt8:
      return "kivi-key-int8";
    case Encoding::kKeyInt4:
      return "kivi-key-int4";
    case Encoding::kValueInt8:
      return "kivi-value-int8";
    case Encoding::kValueInt4:
      return "kivi-value-int4";
  }
  return "?";
}

absl::StatusOr<Encoding> EncodingFromByte(uint8_t b) {
  if (b > static_cast<uint8_t>(Encoding::kValueInt4)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown matrix encoding ", int{b}));
  }
  return static_cast<Encoding>(b);
}

size_t EncodedBytes(Encoding e, int rows, int cols, int group) {
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (e) {
    case Encoding::kF32:
      return n * 4;
    case Encoding::kF16:
      return n * 2;
    case Encoding::kInt8Row:
      return static_cast<size_t>(rows) * 2 + n;
    default: {
      const Groups g{rows, cols, std::max(group, 1), IsKey(e)};
      return static_cast<size_t>(g.count()) * 4 + (n * Bits(e) + 7) / 8;
    }
  }
}

void EncodeMatrix(Encoding e, const float* x, int rows, int cols, int group, uint8_t* out) {
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (e) {
    case Encoding::kF32:
      std::memcpy(out, x, n * 4);
      return;
    case Encoding::kF16:
      FloatToHalf(x, out, n);
      return;
    case Encoding::kInt8Row: {
      uint8_t* codes = out + static_cast<size_t>(rows) * 2;
      for (int r = 0; r < rows; ++r) {
        const float* row = x + static_cast<size_t>(r) * cols;
        float max_abs = 0;
        for (int c = 0; c < cols; ++c) max_abs = std::max(max_abs, std::abs(row[c]));
        const uint16_t scale_h = FloatToHalf(max_abs / 127.0f);
        std::memcpy(out + static_cast<size_t>(r) * 2, &scale_h, 2);
        const float scale = HalfToFloat(scale_h);
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (int c = 0; c < cols; ++c) {
          const float q = std::clamp(std::nearbyint(row[c] * inv), -127.0f, 127.0f);
          codes[static_cast<size_t>(r) * cols + c] = static_cast<uint8_t>(static_cast<int8_t>(q));
        }
      }
      return;
    }
    default: {
      const Groups g{rows, cols, std::max(group, 1), IsKey(e)};
      const int bits = Bits(e);
      const float levels = static_cast<float>((1 << bits) - 1);
      uint8_t* codes = out + static_cast<size_t>(g.count()) * 4;
      std::memset(codes, 0, (n * bits + 7) / 8);
      for (long gi = 0; gi < g.count(); ++gi) {
        long first, stride;
        int len;
        g.Walk(gi, &first, &stride, &len);
        float lo = x[first], hi = x[first];
        for (int i = 1; i < len; ++i) {
          lo = std::min(lo, x[first + i * stride]);
          hi = std::max(hi, x[first + i * stride]);
        }
        const uint16_t scale_h = FloatToHalf((hi - lo) / levels);
        const uint16_t zero_h = FloatToHalf(lo);
        std::memcpy(out + gi * 4, &scale_h, 2);
        std::memcpy(out + gi * 4 + 2, &zero_h, 2);
        const float scale = HalfToFloat(scale_h), zero = HalfToFloat(zero_h);
        const float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (int i = 0; i < len; ++i) {
          const long idx = first + i * stride;
          const float q = std::clamp(std::nearbyint((x[idx] - zero) * inv), 0.0f, levels);
          PutCode(codes, idx, bits, static_cast<uint32_t>(q));
        }
      }
      return;
    }
  }
}

absl::Status DecodeMatrix(Encoding e, const uint8_t* in, size_t bytes, int rows, int cols,
                          int group, float* out) {
  SCD_RETURN_IF_ERROR(CheckEncodedSize(e, bytes, rows, cols, group));
  if ((IsKey(e) || IsValue(e)) && group <= 0) {
    return absl::InvalidArgumentError("quantised block has group size 0");
  }
  const size_t n = static_cast<size_t>(rows) * cols;
  switch (e) {
    case Encoding::kF32:
      std::memcpy(out, in, n * 4);
      return absl::OkStatus();
    case Encoding::kF16:
      HalfToFloat(in, out, n);
      return absl::OkStatus();
    case Encoding::kInt8Row: {
      const uint8_t* codes = in + static_cast<size_t>(rows) * 2;
      for (int r = 0; r < rows; ++r) {
        uint16_t scale_h;
        std::memcpy(&scale_h, in + static_cast<size_t>(r) * 2, 2);
        const float scale = HalfToFloat(scale_h);
        for (int c = 0; c < cols; ++c) {
          const size_t i = static_cast<size_t>(r) * cols + c;
          out[i] = static_cast<float>(static_cast<int8_t>(codes[i])) * scale;
        }
      }
      return absl::OkStatus();
    }
    default: {
      const Groups g{rows, cols, group, IsKey(e)};
      const int bits = Bits(e);
      const uint8_t* codes = in + static_cast<size_t>(g.count()) * 4;
      for (long gi = 0; gi < g.count(); ++gi) {
        long first, stride;
        int len;
        g.Walk(gi, &first, &stride, &len);
        uint16_t scale_h, zero_h;
        std::memcpy(&scale_h, in + gi * 4, 2);
        std::memcpy(&zero_h, in + gi * 4 + 2, 2);
        const float scale = HalfToFloat(scale_h), zero = HalfToFloat(zero_h);
        for (int i = 0; i < len; ++i) {
          const long idx = first + i * stride;
          out[idx] = zero + scale * static_cast<float>(GetCode(codes, idx, bits));
        }
      }
      return absl::OkStatus();
    }
  }
}

int EncodedRowStep(Encoding e, int cols, int group) {
  int step = IsKey(e) ? std::max(group, 1) : 1;  // a key group's scale covers `group` rows
  if (Bits(e) == 4 && cols % 2 != 0 && step % 2 != 0) step *= 2;  // rows start on a byte
  return step;
}

absl::Status SliceEncodedRows(Encoding e, const uint8_t* in, size_t bytes, int rows, int cols,
                              int group, int begin, int end, std::vector<uint8_t>* out) {
  SCD_RETURN_IF_ERROR(CheckEncodedSize(e, bytes, rows, cols, group));
  const int step = EncodedRowStep(e, cols, group);
  if (begin < 0 || begin > end || end > rows || begin % step != 0 ||
      (end % step != 0 && end != rows)) {
    return absl::InvalidArgumentError(absl::StrCat("rows [", begin, ", ", end, ") of a ",
                                                   std::string(EncodingName(e)), " block of ", rows,
                                                   " rows do not split at its step of ", step));
  }
  const size_t r0 = static_cast<size_t>(begin), r1 = static_cast<size_t>(end);
  const size_t n = static_cast<size_t>(cols);
  out->resize(EncodedBytes(e, end - begin, cols, group));
  uint8_t* o = out->data();
  auto copy = [&](size_t from, size_t count) {
    if (count > 0) std::memcpy(o, in + from, count);
    o += count;
  };
  switch (e) {
    case Encoding::kF32:
      copy(r0 * n * 4, (r1 - r0) * n * 4);
      break;
    case Encoding::kF16:
      copy(r0 * n * 2, (r1 - r0) * n * 2);
      break;
    case Encoding::kInt8Row:
      copy(r0 * 2, (r1 - r0) * 2);  // the rows' scales, then their codes
      copy(static_cast<size_t>(rows) * 2 + r0 * n, (r1 - r0) * n);
      break;
    default: {
      // The rows' groups (all (scale, zero) pairs come first, in group order), then their
      // codes; a key group's rows all lie in the slice (begin and end are on group bounds).
      const Groups whole{rows, cols, std::max(group, 1), IsKey(e)};
      const size_t g = static_cast<size_t>(whole.group);
      // The rows' groups: a key group is `g` rows of one column (a block of g rows holds
      // `cols` groups), a value group `g` columns of one row.
      const size_t per_row = (n + g - 1) / g;
      const size_t g0 = IsKey(e) ? r0 / g * n : r0 * per_row;
      const size_t g1 = IsKey(e) ? (r1 + g - 1) / g * n : r1 * per_row;
      copy(g0 * 4, (g1 - g0) * 4);
      const size_t codes = static_cast<size_t>(whole.count()) * 4;
      const int bits = Bits(e);
      copy(codes + r0 * n * bits / 8, ((r1 - r0) * n * bits + 7) / 8);
      break;
    }
  }
  return absl::OkStatus();
}

}  // namespace scd
