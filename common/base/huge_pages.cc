// See huge_pages.h.
#include "common/base/huge_pages.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace scd {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr size_t kMinBytes = kHugePageBytes;

// `bytes` rounded up to whole huge pages (an address, to the next huge-page boundary).
size_t HugeRound(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

// The advice is a VMA flag, applied at 4 KB granularity; the kernel then uses a 2 MB page
// for every 2 MB-aligned extent inside a flagged mapping. Large anonymous mmaps (how malloc
// serves big vectors) start 2 MB-aligned on current kernels, so rounding out to 4 KB pages
// (malloc's chunk header sits just before the data) covers the whole buffer. Flagging a
// neighbour's pages on the brk heap is harmless: the flag changes no contents.
void AdviseHugePages(void* data, size_t bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kPage - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(data) + bytes + kPage - 1) & ~(kPage - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void* MapHugePages(size_t bytes) {
  const size_t len = HugeRound(bytes);
  // Mapped with a huge page to spare, then trimmed to a huge-page boundary at both ends.
  void* raw = ::mmap(nullptr, len + kHugePageBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = HugeRound(begin);
  if (aligned > begin) ::munmap(raw, aligned - begin);
  const uintptr_t tail = aligned + len, end = begin + len + kHugePageBytes;
  if (end > tail) ::munmap(reinterpret_cast<void*>(tail), end - tail);
  void* p = reinterpret_cast<void*>(aligned);
  AdviseHugePages(p, len);
  return p;
}

void UnmapHugePages(void* p, size_t bytes) { ::munmap(p, HugeRound(bytes)); }

void FreeDeleter::operator()(float* p) const { std::free(p); }

HugeFloats NewFloatsWithHugePages(size_t n) {
  const size_t bytes = std::max<size_t>(n * sizeof(float), 1);
  if (bytes < kMinBytes) {
    const size_t pages = (bytes + kPage - 1) / kPage * kPage;
    float* p = static_cast<float*>(std::aligned_alloc(kPage, pages));
    if (p == nullptr) throw std::bad_alloc();
    return HugeFloats(p);
  }
  const size_t rounded = (bytes + kMinBytes - 1) / kMinBytes * kMinBytes;
  float* p = static_cast<float*>(std::aligned_alloc(kMinBytes, rounded));
  if (p == nullptr) throw std::bad_alloc();
  AdviseHugePages(p, rounded);
  return HugeFloats(p);
}

long MinorPageFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Capacity is padded so that malloc's mmap (the request plus its 16-byte chunk header,
// rounded up to pages) is a whole number of 2 MB pages: the kernel only aligns anonymous
// mappings of such lengths to 2 MB, and only aligned extents can use huge pages. The
// padding (< 2 MB) is never touched, so it costs address space only.
void ResizeWithHugePages(std::vector<float>& v, size_t n) {
  if (n * sizeof(float) >= kMinBytes && v.capacity() < n) {
    std::vector<float>().swap(v);
    constexpr size_t kHeader = 16;
    const size_t bytes = HugeRound(n * sizeof(float) + kHeader) - kHeader;
    v.reserve(bytes / sizeof(float));
    AdviseHugePages(v.data(), v.capacity() * sizeof(float));
  }
  v.resize(n);
}

}  // namespace scd
