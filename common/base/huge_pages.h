// Large host buffers (model weights) backed by transparent huge pages. Faulting in a 440 MB
// buffer 4 KB at a time costs over a second on virtualised hosts (one guest page fault per
// page); 2 MB pages make it ~50 ms. We ask with madvise(MADV_HUGEPAGE), which works when
// the kernel's THP mode is "madvise" or "always" and is a harmless no-op otherwise.
#ifndef SCD_COMMON_BASE_HUGE_PAGES_H_
#define SCD_COMMON_BASE_HUGE_PAGES_H_

#include <cstddef>
#include <memory>
#include <vector>

namespace scd {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Advises huge pages for the memory holding [data, data + bytes).
void AdviseHugePages(void* data, size_t bytes);

// `bytes` (rounded up to whole huge pages) of fresh, zeroed memory on a huge-page boundary,
// advised for huge pages: the kernel zeroes each page as whoever first writes it faults it in,
// so there is no zeroing pass here. Null if the mapping fails; UnmapHugePages(p, bytes)
// releases it.
void* MapHugePages(size_t bytes);
void UnmapHugePages(void* p, size_t bytes);

// Storage from malloc or aligned_alloc, given back with free.
struct FreeDeleter {
  void operator()(float* p) const;
};
using HugeFloats = std::unique_ptr<float[], FreeDeleter>;

// n floats, left uninitialised (their pages are touched when first written), in whole pages
// of their own: 4 KB-aligned and a whole number of 4 KB pages, so that nothing else shares them
// (a range registered with a GPU is locked by whole pages, see GpuSekv). When they take 2 MB or
// more, the storage is 2 MB-aligned, a whole number of 2 MB pages, and advised for huge pages,
// so that each 2 MB is one page fault when first written.
HugeFloats NewFloatsWithHugePages(size_t n);

// Minor page faults of this process so far (getrusage): what benchmarks and tests read to see
// the cost of first touches.
long MinorPageFaults();

// Makes `v` hold n zeros. When that needs a new allocation of ≥ 2 MB, the storage is advised
// for huge pages before it is first touched; the old contents are then not kept.
void ResizeWithHugePages(std::vector<float>& v, size_t n);

}  // namespace scd

#endif  // SCD_COMMON_BASE_HUGE_PAGES_H_
