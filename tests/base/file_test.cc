// MappedFile and the whole-file helpers: contents, the empty file, and errors that name the
// path with the right status code.
#include <catch2/catch.hpp>
#include <filesystem>

#include "common/base/file_io.h"
#include "common/base/mapped_file.h"
#include "tests/test_support.h"

namespace scd {
namespace {

TEST_CASE("WriteFileAtomically and ReadFileToString round trip", "[cpu]") {
  const std::string dir = testing::TempDir();
  const std::string path = dir + "/a.bin";
  std::string contents(100000, '\0');
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<char>(i * 7);
  REQUIRE(WriteFileAtomically(path, contents).ok());
  auto read = ReadFileToString(path);
  REQUIRE(read.ok());
  CHECK(*read == contents);

  const std::string_view parts[] = {"ab", "", "cde"};
  REQUIRE(WriteFileAtomically(path, parts).ok());  // replaces the old file
  CHECK(*ReadFileToString(path) == "abcde");
  CHECK(std::distance(std::filesystem::directory_iterator(dir),
                      std::filesystem::directory_iterator()) == 1);  // no temp left behind
}

TEST_CASE("File helpers report missing files and bad targets by path", "[cpu]") {
  const std::string dir = testing::TempDir();
  auto missing = ReadFileToString(dir + "/nope.txt");
  REQUIRE(!missing.ok());
  CHECK(absl::IsNotFound(missing.status()));
  CHECK(std::string(missing.status().message()).find(dir + "/nope.txt") != std::string::npos);

  absl::Status status = WriteFileAtomically(dir + "/no/such/dir/x", "x");
  REQUIRE(!status.ok());
  CHECK(std::string(status.message()).find("no/such/dir") != std::string::npos);

  auto mapped_missing = MappedFile::Open(dir + "/nope.bin");
  REQUIRE(!mapped_missing.ok());
  CHECK(absl::IsNotFound(mapped_missing.status()));
  CHECK(std::string(mapped_missing.status().message()).find("nope.bin") != std::string::npos);

  auto mapped_dir = MappedFile::Open(dir);
  REQUIRE(!mapped_dir.ok());
  CHECK(absl::IsFailedPrecondition(mapped_dir.status()));
}

TEST_CASE("MappedFile maps contents and empty files", "[cpu]") {
  const std::string dir = testing::TempDir();
  REQUIRE(WriteFileAtomically(dir + "/data", "hello, mapping").ok());
  auto file = MappedFile::Open(dir + "/data");
  REQUIRE(file.ok());
  CHECK((*file)->size() == 14);
  CHECK((*file)->view() == "hello, mapping");
  CHECK((*file)->path() == dir + "/data");

  REQUIRE(WriteFileAtomically(dir + "/empty", "").ok());
  auto empty = MappedFile::Open(dir + "/empty");
  REQUIRE(empty.ok());
  CHECK((*empty)->size() == 0);
  CHECK((*empty)->data() == nullptr);
  CHECK((*empty)->view().empty());
}

}  // namespace
}  // namespace scd
