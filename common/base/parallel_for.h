// ParallelFor: runs independent work items on a few short-lived std::threads. Model loading,
// synthetic weights and the model digest split their work into fixed-size chunks so that
// results never depend on the thread count; this only decides who runs which chunk.
#ifndef SCD_COMMON_BASE_PARALLEL_FOR_H_
#define SCD_COMMON_BASE_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace scd {

// Calls fn(i) once for every i in [0, count), on up to `max_threads` threads including the
// caller (0 = the hardware concurrency, at most 16), and returns when all calls are done.
// Items are handed out in order from a shared counter; fn must be safe to run concurrently.
void ParallelFor(size_t count, const std::function<void(size_t)>& fn, size_t max_threads = 0);

}  // namespace scd

#endif  // SCD_COMMON_BASE_PARALLEL_FOR_H_
