// Helpers shared by the transport tests: deterministic payloads, transports that skip with a
// printed reason where UCX cannot start, and receive-or-fail.
#ifndef SCD_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_
#define SCD_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/base/random.h"
#include "common/transport/transport.h"

namespace scd::transport::testing {

// `size` bytes that depend only on `seed` (SplitMix64 words).
inline std::vector<uint8_t> Pattern(uint64_t seed, size_t size) {
  std::vector<uint8_t> out(size);
  SplitMix64 rng(seed * 0x9e3779b97f4a7c15ULL + 1);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t word = rng.Next();
    std::memcpy(out.data() + i, &word, 8);
  }
  if (i < size) {
    const uint64_t tail = rng.Next();
    std::memcpy(out.data() + i, &tail, size - i);
  }
  return out;
}

// True when `message` carries exactly Pattern(seed, size).
inline bool HoldsPattern(const Message& message, uint64_t seed, size_t size) {
  if (message.size != size) return false;
  const std::vector<uint8_t> want = Pattern(seed, size);
  return size == 0 || std::memcmp(message.data.get(), want.data(), size) == 0;
}

// The transport, or null after printing why UCX cannot run here (the only allowed skip).
inline std::unique_ptr<Transport> MakeTransport(const std::string& kind,
                                                const TransportOptions& options = {}) {
  auto transport = CreateTransport(kind, options);
  if (kind == "ucx" && absl::IsUnavailable(transport.status())) {
    WARN("SKIPPED: UCX cannot start on this host: " << transport.status().ToString());
    return nullptr;
  }
  REQUIRE(transport.ok());
  return std::move(*transport);
}

inline std::string AnyPort(const std::string& kind) { return kind + "://127.0.0.1:0"; }

inline absl::Time In(absl::Duration d) { return absl::Now() + d; }

// The next message; fails the test when none arrives in `wait`.
inline Message ReceiveOrFail(Listener& listener, absl::Duration wait = absl::Seconds(10)) {
  auto message = listener.Receive(In(wait));
  INFO("Receive: " << message.status().ToString());
  REQUIRE(message.ok());
  return std::move(*message);
}

}  // namespace scd::transport::testing

#endif  // SCD_TESTS_TRANSPORT_TRANSPORT_TEST_UTIL_H_
