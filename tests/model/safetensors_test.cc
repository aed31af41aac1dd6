// Safetensors reader and writer: exact F16/BF16 widening, metadata, unaligned data, and
// every corruption we can think of yields an error naming the file (and tensor), never a
// crash: truncations at every boundary, garbage header lengths, bad JSON, bad offsets,
// shape/span mismatches, overlaps, and random byte flips in the header.
#include "common/model/safetensors.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>

#include "common/base/file_io.h"
#include "common/base/float16.h"
#include "common/base/random.h"
#include "tests/test_support.h"

namespace scd {
namespace {

// A raw file: 8-byte length, `header` verbatim (no padding), then `data`.
std::string RawFile(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(n >> (8 * i));
  return out + header + data;
}

std::string WriteRaw(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = dir + "/" + name;
  REQUIRE(WriteFileAtomically(path, bytes).ok());
  return path;
}

// The error of opening `bytes` as a safetensors file, which must fail and name the file.
absl::Status OpenError(const std::string& dir, const std::string& name, const std::string& bytes) {
  const std::string path = WriteRaw(dir, name, bytes);
  auto file = SafetensorsFile::Open(path);
  REQUIRE(!file.ok());
  INFO(file.status().message());
  CHECK(testing::StatusHas(file.status(), path));
  return file.status();
}

TEST_CASE("Writer and reader round trip F32, F16 and BF16 exactly", "[cpu]") {
  const std::string dir = testing::TempDir();
  // Values representable in every format: small integers, halves, powers of two.
  const std::vector<float> exact = {0.0f,
                                    -0.0f,
                                    1.0f,
                                    -2.5f,
                                    0.125f,
                                    1024.0f,
                                    -3.0f,
                                    0.75f,
                                    std::ldexp(1.0f, -14),
                                    -std::ldexp(1.0f, -10),
                                    96.0f,
                                    7.0f};
  std::vector<float> random(37);
  FillNormal(random.data(), random.size(), 1, 0.0f, 1.0f);
  std::map<std::string, SafetensorsTensor> tensors;
  tensors["f32"] = SafetensorsTensor::FromFloats(DType::kF32, {3, 4}, exact);
  tensors["f16"] = SafetensorsTensor::FromFloats(DType::kF16, {2, 6}, exact);
  tensors["bf16"] = SafetensorsTensor::FromFloats(DType::kBF16, {12}, exact);
  tensors["f32_random"] = SafetensorsTensor::FromFloats(DType::kF32, {37}, random);
  tensors["f16_random"] = SafetensorsTensor::FromFloats(DType::kF16, {37}, random);
  tensors["scalar"] = SafetensorsTensor::FromFloats(DType::kF32, {}, std::vector<float>{4.0f});
  tensors["empty"] = SafetensorsTensor::FromFloats(DType::kF16, {0, 5}, {});
  const std::string path = dir + "/t.safetensors";
  REQUIRE(WriteSafetensors(path, tensors, {{"format", "pt"}, {"note", "hi"}}).ok());

  // The header is padded so the data region starts at a multiple of 64 bytes.
  const std::string bytes = testing::ReadFileOrFail(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  CHECK((8 + header_len) % 64 == 0);

  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  const SafetensorsFile& f = **file;
  CHECK(f.num_tensors() == 7);
  CHECK(f.metadata().at("note") == "hi");
  CHECK(f.TensorNames().front() == "bf16");
  for (const char* name : {"f32", "f16", "bf16"}) {
    auto values = f.ReadAsFloat(name);
    REQUIRE(values.ok());
    REQUIRE(values->size() == exact.size());
    for (size_t i = 0; i < exact.size(); ++i) {
      CHECK(FloatToBits((*values)[i]) == FloatToBits(exact[i]));  // -0.0 keeps its sign
    }
  }
  CHECK(f.Find("f16")->dtype == DType::kF16);
  CHECK(f.Find("f16")->shape == std::vector<int64_t>{2, 6});
  CHECK(f.Find("f16")->nbytes == 24);
  CHECK(*f.ReadAsFloat("f32_random", std::vector<int64_t>{37}) == random);
  auto narrowed = f.ReadAsFloat("f16_random");
  for (size_t i = 0; i < random.size(); ++i) {
    CHECK((*narrowed)[i] == HalfToFloat(FloatToHalf(random[i])));
  }
  CHECK(*f.ReadAsFloat("scalar", std::vector<int64_t>{}) == std::vector<float>{4.0f});
  CHECK(f.ReadAsFloat("empty")->empty());
  CHECK(f.Find("missing") == nullptr);
}

TEST_CASE("Reader handles unaligned data and ignores unknown dtypes until requested", "[cpu]") {
  const std::string dir = testing::TempDir();
  // Header of odd length: the F32 data starts at an unaligned address.
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::string data(reinterpret_cast<const char*>(values), sizeof(values));
  data += std::string(16, '\x01');  // an I64 tensor of 2 elements
  const std::string header =
      R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},)"
      R"("ids":{"dtype":"I64","shape":[2],"data_offsets":[12,28]},"__metadata__":{"k":"v","n":1}})";
  REQUIRE(header.size() % 2 == 1);
  const std::string path = WriteRaw(dir, "u.safetensors", RawFile(header, data));
  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  CHECK(*(*file)->ReadAsFloat("a") == std::vector<float>{1.5f, -2.0f, 3.25f});
  CHECK((*file)->metadata().size() == 1);  // non-string metadata is ignored
  const TensorInfo* ids = (*file)->Find("ids");
  REQUIRE(ids != nullptr);
  CHECK(ids->dtype == DType::kUnsupported);
  CHECK(ids->dtype_name == "I64");
  auto read = (*file)->ReadAsFloat("ids");
  REQUIRE(!read.ok());
  CHECK(absl::IsUnimplemented(read.status()));
  CHECK(testing::StatusHas(read.status(), "I64"));
  CHECK(testing::StatusHas(read.status(), "'ids'"));
  CHECK(testing::StatusHas(read.status(), path));
}

TEST_CASE("ReadAsFloat reports missing tensors and shape mismatches", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/s.safetensors";
  REQUIRE(WriteSafetensors(path, {{"w", SafetensorsTensor::FromFloats(
                                            DType::kF32, {2, 3}, std::vector<float>(6, 1.0f))}})
              .ok());
  auto file = SafetensorsFile::Open(path);
  REQUIRE(file.ok());
  auto wrong = (*file)->ReadAsFloat("w", std::vector<int64_t>{3, 2});
  REQUIRE(!wrong.ok());
  CHECK(absl::IsInvalidArgument(wrong.status()));
  CHECK(testing::StatusHas(wrong.status(), "'w' has shape [2, 3], expected [3, 2]"));
  CHECK(testing::StatusHas(wrong.status(), path));
  auto missing = (*file)->ReadAsFloat("v");
  REQUIRE(!missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(testing::StatusHas(missing.status(), "'v'"));
  CHECK(testing::StatusHas(missing.status(), path));

  auto no_file = SafetensorsFile::Open(dir + "/absent.safetensors");
  REQUIRE(!no_file.ok());
  CHECK(absl::IsNotFound(no_file.status()));
  CHECK(testing::StatusHas(no_file.status(), dir + "/absent.safetensors"));
}

TEST_CASE("Writer rejects inconsistent tensors by name", "[cpu]") {
  const std::string dir = testing::TempDir();
  SafetensorsTensor bad;
  bad.dtype = DType::kF16;
  bad.shape = {4};
  bad.bytes = std::string(6, '\0');
  absl::Status status = WriteSafetensors(dir + "/x.safetensors", {{"bad_tensor", bad}});
  CHECK(absl::IsInvalidArgument(status));
  CHECK(testing::StatusHas(status, "bad_tensor"));
  bad.dtype = DType::kUnsupported;
  CHECK(testing::StatusHas(WriteSafetensors(dir + "/x.safetensors", {{"u", bad}}), "'u'"));
  CHECK(!WriteSafetensors(dir + "/x.safetensors",
                          {{"__metadata__", SafetensorsTensor::FromFloats(DType::kF32, {}, {0.f})}})
             .ok());
}

TEST_CASE("Truncated copies of a valid file are errors naming the file", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string good = dir + "/good.safetensors";
  std::vector<float> values(64, 0.5f);
  REQUIRE(
      WriteSafetensors(good, {{"a", SafetensorsTensor::FromFloats(DType::kF32, {64}, values)},
                              {"b", SafetensorsTensor::FromFloats(DType::kBF16, {8, 8}, values)}})
          .ok());
  const std::string bytes = testing::ReadFileOrFail(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  const size_t cuts[] = {0,
                         1,
                         7,
                         8,
                         9,
                         8 + header_len / 2,
                         8 + header_len - 1,
                         8 + header_len,
                         8 + header_len + 1,
                         8 + header_len + 128,
                         bytes.size() - 1};
  for (size_t cut : cuts) {
    INFO("truncated to " << cut << " of " << bytes.size() << " bytes");
    const absl::Status status = OpenError(dir, "cut" + std::to_string(cut), bytes.substr(0, cut));
    CHECK(absl::IsDataLoss(status));
  }
  // Cutting into the data region names the tensor that runs past the end.
  CHECK(testing::StatusHas(OpenError(dir, "cut_last", bytes.substr(0, bytes.size() - 1)),
                           "tensor 'b'"));
}

TEST_CASE("Corrupt headers are errors naming the file and tensor", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string data(24, '\0');
  std::string huge(8, '\xff');
  huge += "{}";
  CHECK(testing::StatusHas(OpenError(dir, "huge_len", huge), "header length"));
  CHECK(testing::StatusHas(OpenError(dir, "garbage", RawFile("{\"a\": [1, 2", data)),
                           "not valid JSON"));
  CHECK(testing::StatusHas(
      OpenError(dir, "binary", RawFile(std::string("\x00\x01\x02\x03", 4), data)),
      "not valid JSON"));
  CHECK(testing::StatusHas(OpenError(dir, "empty_header", RawFile("", data)), "not valid JSON"));
  CHECK(testing::StatusHas(OpenError(dir, "array", RawFile("[1,2]", data)), "not a JSON object"));

  struct Case {
    const char* name;
    std::string header;
    const char* expect;
  };
  const Case cases[] = {
      {"past_end", R"({"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})", "run past"},
      {"shape_span", R"({"t":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
       "shape [2, 3] of F32 needs 24 bytes but data_offsets span 20"},
      {"unknown_size_span", R"({"t":{"dtype":"I32","shape":[2],"data_offsets":[0,12]}})",
       "needs 8 bytes"},
      {"begin_gt_end", R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
       "bad data_offsets"},
      {"neg_offset", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})",
       "bad data_offsets"},
      {"one_offset", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "data_offsets"},
      {"neg_shape", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "shape"},
      {"float_shape", R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", "shape"},
      {"no_dtype", R"({"t":{"shape":[1],"data_offsets":[0,4]}})", "dtype"},
      {"not_object", R"({"t":[1,2,3]})", "not an object"},
      {"overflow", R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       "more than 2^64"},
      {"overlap",
       R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("u":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       "overlaps tensor 't'"},
  };
  for (const Case& c : cases) {
    INFO(c.name << ": " << c.header);
    const absl::Status status = OpenError(dir, c.name, RawFile(c.header, data));
    CHECK(absl::IsDataLoss(status));
    CHECK(testing::StatusHas(status, c.expect));
    CHECK(testing::StatusHas(status, "tensor '"));
  }
  // Gaps and out-of-order offsets are allowed; empty tensors never overlap.
  auto ok = SafetensorsFile::Open(
      WriteRaw(dir, "gappy",
               RawFile(R"({"late":{"dtype":"F16","shape":[2],"data_offsets":[16,20]},)"
                       R"("early":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("none":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
                       data)));
  CHECK(ok.ok());
}

TEST_CASE("Random header corruption never crashes the reader", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string good = dir + "/fuzz_base.safetensors";
  REQUIRE(
      WriteSafetensors(
          good, {{"a", SafetensorsTensor::FromFloats(DType::kF32, {4, 4}, std::vector<float>(16))},
                 {"b", SafetensorsTensor::FromFloats(DType::kF16, {3}, std::vector<float>(3))}})
          .ok());
  const std::string bytes = testing::ReadFileOrFail(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  SplitMix64 rng(99);
  int failures = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string corrupt = bytes;
    const int flips = 1 + static_cast<int>(rng.NextBelow(4));
    for (int i = 0; i < flips; ++i) {
      const size_t pos = rng.NextBelow(static_cast<uint32_t>(8 + header_len));
      corrupt[pos] = static_cast<char>(rng.Next());
    }
    const std::string path = WriteRaw(dir, "fuzz", corrupt);
    auto file = SafetensorsFile::Open(path);
    if (!file.ok()) {
      ++failures;
      REQUIRE(testing::StatusHas(file.status(), path));
      continue;
    }
    for (const std::string& name : (*file)->TensorNames()) {
      auto values = (*file)->ReadAsFloat(name);  // must not read out of bounds
      if (values.ok()) {
        REQUIRE(static_cast<int64_t>(values->size()) == (*file)->Find(name)->NumElements());
      }
    }
  }
  CHECK(failures > 100);  // most corruptions are detected
}

}  // namespace
}  // namespace scd
