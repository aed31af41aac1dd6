// SHA-256 against the FIPS 180-2 / NIST test vectors, and the SHA-NI path against the
// portable one on random inputs fed in random pieces.
#include "common/base/sha256.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/base/random.h"

namespace scd {
namespace {

TEST_CASE("Sha256 matches the standard test vectors", "[cpu]") {
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(Sha256Hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const std::string million_a(1000000, 'a');
  CHECK(Sha256Hex(million_a) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  for (Sha256::Impl impl : {Sha256::Impl::kAuto, Sha256::Impl::kPortable}) {
    Sha256 hasher(impl);
    for (int i = 0; i < 1000; ++i) hasher.Update(million_a.data(), 1000);  // 1000-byte pieces
    CHECK(Sha256::ToHex(hasher.Finish()) ==
          "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    hasher.Update("abc");  // Finish resets
    CHECK(Sha256::ToHex(hasher.Finish()) ==
          "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  }
}

TEST_CASE("Sha256 hardware and portable paths agree at every length and split", "[cpu]") {
  INFO("SHA-NI in use: " << Sha256::HardwareAccelerated());
  SplitMix64 rng(7);
  std::string data(3000, '\0');
  for (char& c : data) c = static_cast<char>(rng.Next());
  for (size_t len = 0; len <= 300; ++len) {
    const std::string_view piece(data.data(), len);
    Sha256 portable(Sha256::Impl::kPortable);
    portable.Update(piece);
    const Sha256::Digest expected = portable.Finish();
    Sha256 hasher;
    size_t pos = 0;
    while (pos < len) {  // random piece sizes exercise the 64-byte buffer
      const size_t take = std::min<size_t>(len - pos, rng.NextBelow(130));
      hasher.Update(piece.data() + pos, take);
      pos += take;
    }
    REQUIRE(hasher.Finish() == expected);
  }
  Sha256 a, b(Sha256::Impl::kPortable);
  a.Update(data);
  b.Update(data);
  CHECK(a.Finish() == b.Finish());
}

}  // namespace
}  // namespace scd
