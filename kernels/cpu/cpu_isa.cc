// See cpu_isa.h.
#include "kernels/cpu/cpu_isa.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

namespace scd::cpu {
namespace {

CpuIsa FromEnvironment(CpuIsa detected) {
  const char* env = std::getenv("SCD_CPU_ISA");
  if (env == nullptr) return detected;
  CpuIsa want = detected;
  if (std::strcmp(env, "scalar") == 0) want = CpuIsa::kScalar;
  if (std::strcmp(env, "avx2") == 0) want = CpuIsa::kAvx2;
  if (std::strcmp(env, "avx512") == 0) want = CpuIsa::kAvx512;
  return std::min(want, detected);
}

std::atomic<int>& Active() {
  static std::atomic<int> active{static_cast<int>(FromEnvironment(DetectedIsa()))};
  return active;
}

}  // namespace

std::string_view IsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

CpuIsa DetectedIsa() {
#if defined(__x86_64__)
  static const CpuIsa detected = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
      return CpuIsa::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return detected;
#else
  return CpuIsa::kScalar;
#endif
}

CpuIsa ActiveIsa() { return static_cast<CpuIsa>(Active().load(std::memory_order_relaxed)); }

void SetActiveIsa(CpuIsa isa) {
  Active().store(static_cast<int>(std::min(isa, DetectedIsa())), std::memory_order_relaxed);
}

std::vector<CpuIsa> RunnableIsas() {
  std::vector<CpuIsa> out;
  for (int i = 0; i <= static_cast<int>(DetectedIsa()); ++i) out.push_back(static_cast<CpuIsa>(i));
  return out;
}

}  // namespace scd::cpu
