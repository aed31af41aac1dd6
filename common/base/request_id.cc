// See request_id.h.
#include "common/base/request_id.h"

#include <cstdint>
#include <functional>
#include <random>
#include <thread>

namespace scd {

std::string NewRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   std::hash<std::thread::id>{}(std::this_thread::get_id()));
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(kRequestIdLength, '0');
  uint64_t bits = 0;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i % 16 == 0) bits = rng();  // 16 hex digits per 64-bit draw
    id[i] = kHex[bits & 0xf];
    bits >>= 4;
  }
  return id;
}

}  // namespace scd
