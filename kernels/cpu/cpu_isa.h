// Which vector instructions the CPU kernels use, chosen at run time: the build's floor is
// AVX2+FMA (SCD_CPU_FLAGS); kernels with an AVX-512 variant take it where the CPU has
// AVX-512F/BW/VL. SCD_CPU_ISA=scalar|avx2|avx512 lowers the choice (never above what the CPU
// has), so that every variant a host can run is tested and benchmarked against the others.
#ifndef SCD_KERNELS_CPU_CPU_ISA_H_
#define SCD_KERNELS_CPU_CPU_ISA_H_

#include <string_view>
#include <vector>

namespace scd::cpu {

enum class CpuIsa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view IsaName(CpuIsa isa);

// The best this CPU runs (kScalar off x86).
CpuIsa DetectedIsa();

// What the kernels use now: DetectedIsa(), lowered by SCD_CPU_ISA or SetActiveIsa.
CpuIsa ActiveIsa();

// Lowers (or restores) the choice for this process; capped at DetectedIsa(). For tests and
// benchmarks that compare variants in one run; not safe while kernels run on other threads.
void SetActiveIsa(CpuIsa isa);

// Every variant this CPU can run, lowest first.
std::vector<CpuIsa> RunnableIsas();

}  // namespace scd::cpu

#endif  // SCD_KERNELS_CPU_CPU_ISA_H_
