// Secret comparison whose time does not depend on where two strings first differ (API keys,
// cluster tokens). Header-only.
#ifndef SCD_COMMON_BASE_CONSTANT_TIME_H_
#define SCD_COMMON_BASE_CONSTANT_TIME_H_

#include <string>

namespace scd {

// True when `presented` equals `expected`. The loop always runs over `expected`, whatever the
// presented bytes or length, so the time tells an attacker nothing about the secret's content.
inline bool ConstantTimeEquals(const std::string& presented, const std::string& expected) {
  unsigned char diff = presented.size() == expected.size() ? 0 : 1;
  const std::string& other = presented.size() == expected.size() ? presented : expected;
  for (size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(other[i] ^ expected[i]);
  }
  return diff == 0;
}

}  // namespace scd

#endif  // SCD_COMMON_BASE_CONSTANT_TIME_H_
