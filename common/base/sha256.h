// SHA-256 (FIPS 180-4), our one cryptographic hash: model digests identify a checkpoint (the
// canonical config plus every weight's F32 bytes) so that a producer and a consumer can check
// that they run the same function before exchanging KV state. Streaming API; x86 hosts with
// the SHA extensions (SHA-NI) use them, which hashes a 110M-parameter model in well under a
// second; every other host uses the portable compression function. Both give the same bytes.
#ifndef SCD_COMMON_BASE_SHA256_H_
#define SCD_COMMON_BASE_SHA256_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace scd {

class Sha256 {
 public:
  static constexpr size_t kDigestSize = 32;
  using Digest = std::array<uint8_t, kDigestSize>;
  // kAuto picks SHA-NI when the CPU has it; kPortable forces the plain C++ rounds (tests
  // compare the two).
  enum class Impl { kAuto, kPortable };

  explicit Sha256(Impl impl = Impl::kAuto);

  void Update(const void* data, size_t size);
  void Update(std::string_view data) { Update(data.data(), data.size()); }
  // Returns the digest of everything passed to Update and resets the hasher.
  Digest Finish();

  // One-shot helpers.
  static Digest Hash(std::string_view data);
  static std::string ToHex(const Digest& digest);
  // True when this process hashes with the CPU's SHA extensions.
  static bool HardwareAccelerated();

 private:
  void Reset();
  void Compress(const uint8_t* blocks, size_t count);

  bool use_hardware_;
  uint32_t state_[8];
  uint64_t total_bytes_ = 0;
  uint8_t buffer_[64];
  size_t buffered_ = 0;
};

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace scd

#endif  // SCD_COMMON_BASE_SHA256_H_
