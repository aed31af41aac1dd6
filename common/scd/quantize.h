// Matrix encodings used on the wire. Every payload block is a [rows, cols] F32 matrix stored
// in one of these encodings:
//   kF32, kF16              — plain (F16 is the "raw" baseline and SCD's default code type);
//   kInt8Row                — symmetric int8 with one F16 scale per row (SCD int8 codes);
//   kKeyInt8, kKeyInt4      — KIVI keys: asymmetric, one (scale, zero) per channel per group
//                             of `group` consecutive tokens (keys have per-channel outliers);
//   kValueInt8, kValueInt4  — KIVI values: asymmetric, one (scale, zero) per token per group
//                             of `group` consecutive channels.
// KIVI: Liu et al., "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache", 2024.
// Layout of the asymmetric encodings: all (scale, zero) F16 pairs in group order, then the
// codes in row-major element order (int4: two per byte, low nibble first).
#ifndef SCD_COMMON_SCD_QUANTIZE_H_
#define SCD_COMMON_SCD_QUANTIZE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace scd {

enum class Encoding : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kInt8Row = 2,
  kKeyInt8 = 3,
  kKeyInt4 = 4,
  kValueInt8 = 5,
  kValueInt4 = 6,
};

std::string_view EncodingName(Encoding e);
absl::StatusOr<Encoding> EncodingFromByte(uint8_t b);

// Bytes EncodeMatrix writes for a [rows, cols] matrix.
size_t EncodedBytes(Encoding e, int rows, int cols, int group);

// Writes EncodedBytes(...) bytes to `out`.
void EncodeMatrix(Encoding e, const float* x, int rows, int cols, int group, uint8_t* out);

// Reads a matrix written by EncodeMatrix; `bytes` must equal EncodedBytes(...).
absl::Status DecodeMatrix(Encoding e, const uint8_t* in, size_t bytes, int rows, int cols,
                          int group, float* out);

// The smallest row step at which the bytes of an encoded [rows, cols] matrix split into the
// bytes of its row ranges: 1 for F32, F16 and int8-row; a KIVI key block's group (its scales
// and zeros cover `group` rows); doubled where int4 codes of an odd column count would start a
// row inside a byte.
int EncodedRowStep(Encoding e, int cols, int group);

// The bytes EncodeMatrix writes for rows [begin, end) of the matrix alone, cut from the bytes
// `in` of the whole [rows, cols] matrix. `begin` must be a multiple of EncodedRowStep, and
// `end` one too or `rows`; `bytes` must equal EncodedBytes(...).
absl::Status SliceEncodedRows(Encoding e, const uint8_t* in, size_t bytes, int rows, int cols,
                              int group, int begin, int end, std::vector<uint8_t>* out);

}  // namespace scd

#endif  // SCD_COMMON_SCD_QUANTIZE_H_
