// The GPU emulator's runtime (scd_emu/device.h): launch checks, the launch queue on the
// stand-in streams, and the block scheduler that runs each thread as a fiber.
//
// Scheduling: a block's fibers are resumed in thread order (or, with SCD_EMU_SCHEDULE=reverse,
// from the last thread to the first), each until it reaches a barrier or returns; a barrier opens
// when the last of the threads it waits for arrives, and that thread goes on at once. Passes repeat
// until every thread has returned. A pass that resumes nobody while threads still wait is a
// deadlock (a __syncthreads some threads never reach, or warp lanes at different collectives): the
// test stops with a message, where a GPU would hang. Threads that have returned count as arrived at
// __syncthreads, as on the hardware; a warp collective whose mask names a returned or missing lane
// is undefined in CUDA and stops here.
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "scd_emu/device.h"
#include "tests/gpu/standin/standin_memory.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define SCD_EMU_ASAN 1
#endif
// Race checking (SCD_EMU_RACECHECK: the kernels alone are built with -fsanitize=thread, see
// tests/gpu/CMakeLists.txt; or a whole-program TSan build): every GPU thread is a TSan fiber, the
// switches between fibers carry no ordering, and the orderings CUDA gives are told to TSan:
// a block's start after the launch (and after the previous block, which shares its
// __shared__ variables here), each barrier (released on arrival, acquired on leaving, one
// object per generation parity so that a thread already at the next barrier orders
// nothing), and the end of the block before the host reads. So TSan reports two threads of a
// block that touch the same shared or global bytes, one of them writing, with no barrier
// between: what compute-sanitizer's racecheck looks for.
#if defined(__SANITIZE_THREAD__) || defined(SCD_EMU_RACECHECK)
#include <sanitizer/tsan_interface.h>
#define SCD_EMU_TSAN 1
#endif

// Switching fibers: on x86-64 a hand-written switch of the callee-saved registers (about 20
// ns; ucontext's swapcontext makes a system call per switch, which made the emulated tests ten
// times slower); elsewhere ucontext.
#if defined(__x86_64__)
#define SCD_EMU_ASM_SWITCH 1
// void scd_emu_switch(void** save_sp, void* load_sp): saves the callee-saved registers, MXCSR
// and the x87 control word on the current stack, stores its pointer in *save_sp, and resumes
// the stack load_sp points at.
asm(R"(
  .text
  .globl scd_emu_switch
  .type scd_emu_switch,@function
scd_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size scd_emu_switch,.-scd_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
extern "C" void scd_emu_switch(void** save_sp, void* load_sp);
#endif

namespace scd_emu {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxThreads = 1024;
constexpr size_t kDefaultDynamicShared = 48 * 1024;
// The largest opt-in of the smallest architecture we build for (sm_80: 163 KB); sm_90 allows
// 227 KB, but a kernel that needs more than 163 KB would fail on an A100.
constexpr size_t kMaxDynamicShared = 163 * 1024;
#if defined(SCD_EMU_ASAN) || defined(SCD_EMU_TSAN)
constexpr size_t kStackBytes = 512 * 1024;  // instrumented frames are larger
#else
constexpr size_t kStackBytes = 64 * 1024;
#endif

thread_local cudaError_t t_last_error = cudaSuccess;

std::mutex& AttributeMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

std::map<const void*, size_t>& SharedOptIns() {
  static auto* opt_ins = new std::map<const void*, size_t>;
  return *opt_ins;
}

enum class Wait { kRunning, kBlock, kWarp, kDone };

// A saved execution context: a stack pointer (x86-64) or a ucontext.
struct Context {
#if defined(SCD_EMU_ASM_SWITCH)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

void SwitchContext(Context& save, Context& load) {
#if defined(SCD_EMU_ASM_SWITCH)
  scd_emu_switch(&save.sp, load.sp);
#else
  swapcontext(&save.uc, &load.uc);
#endif
}

// A fiber of the host thread: its stack (above a guard page, so that an overflow faults
// instead of corrupting another stack) and saved context. Fibers live as long as their host
// thread and serve thread i of every block in turn, looping in FiberMain: making and ending
// a fiber per GPU thread would cost ASan a fake stack each (megabytes, mapped and unmapped).
struct FiberSlot {
  Context context;
  char* stack = nullptr;
  bool started = false;
  void* tsan_fiber = nullptr;  // race checking only
};

class FiberPool {
 public:
  ~FiberPool() {
    for (FiberSlot* slot : slots_) {
      munmap(slot->stack - Page(), kStackBytes + Page());
      delete slot;
    }
  }
  // The first `count` fibers, made as needed; existing ones never move.
  FiberSlot* Slot(int i) {
    while (static_cast<int>(slots_.size()) <= i) {
      void* p = mmap(nullptr, kStackBytes + Page(), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) Fail("no memory for fiber stacks");
      mprotect(p, Page(), PROT_NONE);
      auto* slot = new FiberSlot;
      slot->stack = static_cast<char*>(p) + Page();
#if defined(SCD_EMU_TSAN)
      slot->tsan_fiber = __tsan_create_fiber(0);
#endif
      slots_.push_back(slot);
    }
    return slots_[static_cast<size_t>(i)];
  }

 private:
  static size_t Page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  std::vector<FiberSlot*> slots_;
};

// A GPU thread of the running block.
struct Fiber {
  FiberSlot* slot = nullptr;
  Wait wait = Wait::kRunning;
  uint64_t generation = 0;
  int warp = 0, lane = 0;
  ThreadCoords coords;
};

enum class WarpOp { kNone, kSync, kExchange };

struct WarpState {
  int lanes = 0, exited = 0, arrived = 0;
  uint64_t generation = 0;
  WarpOp pending = WarpOp::kNone;
  uint64_t in[32], out[32];
  int lane_mask[32];
  char order[2];  // race checking: what each barrier generation (by parity) orders
};

struct Block {
  std::vector<Fiber> fibers;
  std::vector<WarpState> warps;
  int live = 0, arrived = 0;
  uint64_t generation = 0;
  Context scheduler;
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  void* shared = nullptr;
  void* scheduler_fiber = nullptr;  // race checking only
  char block_start = 0, block_end = 0, barrier_order[2] = {0, 0};
};

thread_local Block* t_block = nullptr;
#if defined(SCD_EMU_ASAN)
// The host thread's stack, which the scheduler runs on (ASan learns it at a fiber's start).
thread_local const void* t_scheduler_stack = nullptr;
thread_local size_t t_scheduler_stack_bytes = 0;
#endif

// What the sanitizers need to hear about each switch (nothing without them).
#if defined(SCD_EMU_ASAN)
const void* SchedulerStack() { return t_scheduler_stack; }
size_t SchedulerStackBytes() { return t_scheduler_stack_bytes; }
#else
const void* SchedulerStack() { return nullptr; }
size_t SchedulerStackBytes() { return 0; }
#endif

// Happens-before edges for race checking: a release on `order` is seen by a later acquire.
void Release(void* order) {
#if defined(SCD_EMU_TSAN)
  __tsan_release(order);
#else
  (void)order;
#endif
}

void Acquire(void* order) {
#if defined(SCD_EMU_TSAN)
  __tsan_acquire(order);
#else
  (void)order;
#endif
}

// SCD_EMU_SCHEDULE=reverse resumes a block's threads from the last to the first: a kernel
// that reads what a lower thread writes without a barrier fails in the default order, one
// that reads what a higher thread writes fails in this one (ctest runs both).
bool ReverseSchedule() {
  static const bool reverse = [] {
    const char* v = std::getenv("SCD_EMU_SCHEDULE");
    if (v == nullptr || std::strcmp(v, "forward") == 0) return false;
    if (std::strcmp(v, "reverse") == 0) return true;
    std::fprintf(stderr, "gpu emulator: SCD_EMU_SCHEDULE must be forward or reverse, not %s\n", v);
    std::abort();
  }();
  return reverse;
}

Block& Current() {
  if (t_block == nullptr || t_block->current == nullptr) {
    std::fprintf(stderr, "gpu emulator: a device function ran outside a kernel\n");
    std::abort();
  }
  return *t_block;
}

// Saves the running context in `from` and resumes `to`, whose stack is [stack, +bytes), telling
// the sanitizers; returns when something switches back to `from`.
void Switch(Context& from, Context& to, const void* stack, size_t bytes, void* tsan_fiber) {
#if defined(SCD_EMU_ASAN)
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, stack, bytes);
#else
  (void)stack;
  (void)bytes;
#endif
#if defined(SCD_EMU_TSAN)
  __tsan_switch_to_fiber(tsan_fiber, __tsan_switch_to_fiber_no_sync);
#else
  (void)tsan_fiber;
#endif
  SwitchContext(from, to);
#if defined(SCD_EMU_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
#endif
}

void StartContext(Block& b, FiberSlot& f);

// From the scheduler into fiber `f`, and back when it parks.
void Resume(Block& b, Fiber& f) {
  b.current = &f;
  if (!f.slot->started) {
    StartContext(b, *f.slot);
    f.slot->started = true;
  }
  Switch(b.scheduler, f.slot->context, f.slot->stack, kStackBytes, f.slot->tsan_fiber);
  b.current = nullptr;
}

// From the running fiber back to the scheduler, until the scheduler resumes it.
void Park() {
  Block& b = Current();
  Switch(b.current->slot->context, b.scheduler, SchedulerStack(), SchedulerStackBytes(),
         b.scheduler_fiber);
}

void OpenBlockBarrier(Block& b) {
  b.arrived = 0;
  ++b.generation;
}

// A fiber's whole life: thread i of each block it is resumed for, one after another.
void FiberMain() {
#if defined(SCD_EMU_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &t_scheduler_stack, &t_scheduler_stack_bytes);
#endif
  for (;;) {
    Block& b = *t_block;
    Fiber& f = *b.current;
    Acquire(&b.block_start);
    (*b.body)();
    Release(&b.block_end);
    WarpState& w = b.warps[static_cast<size_t>(f.warp)];
    if (w.arrived > 0) Fail("a lane returned while its warp waits for it at a warp collective");
    f.wait = Wait::kDone;
    --b.live;
    ++w.exited;
    if (b.arrived > 0 && b.arrived == b.live) OpenBlockBarrier(b);
    Park();  // until a later block needs this fiber
  }
}

// Makes `f` start in FiberMain on its stack when first resumed.
void StartContext(Block& b, FiberSlot& f) {
#if defined(SCD_EMU_ASM_SWITCH)
  // The frame scd_emu_switch pops: MXCSR and x87 control word, r15..rbp, then the "return"
  // into FiberMain, which then sees a stack aligned as after a call (rsp % 16 == 8).
  auto* top = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(f.stack) + kStackBytes) &
                                          ~uintptr_t{15});
  *--top = 0;  // FiberMain's own return address: it never returns
  *--top = reinterpret_cast<uint64_t>(&FiberMain);
  for (int i = 0; i < 6; ++i) *--top = 0;  // rbp, rbx, r12..r15
  *--top = 0x037F00001F80ull;              // MXCSR 0x1F80 (low half), x87 control word 0x037F
  f.context.sp = top;
  (void)b;
#else
  getcontext(&f.context.uc);
  f.context.uc.uc_stack.ss_sp = f.stack;
  f.context.uc.uc_stack.ss_size = kStackBytes;
  f.context.uc.uc_link = &b.scheduler.uc;
  makecontext(&f.context.uc, FiberMain, 0);
#endif
}

// Arrival at the running fiber's warp barrier for `op`; true in the lane that opens it.
bool WarpArrive(WarpOp op, unsigned mask) {
  Block& b = Current();
  Fiber& f = *b.current;
  WarpState& w = b.warps[static_cast<size_t>(f.warp)];
  if (mask != kFullMask) Fail("warp collective with a partial mask (the emulator models full)");
  if (w.lanes != 32) Fail("warp collective's full mask names lanes the block does not have");
  if (w.exited > 0) Fail("warp collective's mask names a lane that has returned");
  if (w.arrived > 0 && w.pending != op) Fail("lanes of one warp at different collectives");
  w.pending = op;
  char* const order = &w.order[w.generation % 2];
  Release(order);
  if (++w.arrived == w.lanes) {
    if (op == WarpOp::kExchange) {
      for (int lane = 0; lane < 32; ++lane) {
        const int src = lane ^ w.lane_mask[lane];
        if (src < 0 || src >= 32) Fail("__shfl_xor_sync source lane out of range");
        w.out[lane] = w.in[src];
      }
    }
    w.arrived = 0;
    w.pending = WarpOp::kNone;
    ++w.generation;
    Acquire(order);
    return true;
  }
  f.wait = Wait::kWarp;
  f.generation = w.generation;
  Park();
  Acquire(order);
  return false;
}

bool Blocked(const Block& b, const Fiber& f) {
  switch (f.wait) {
    case Wait::kDone:
      return true;
    case Wait::kBlock:
      return f.generation == b.generation;
    case Wait::kWarp:
      return f.generation == b.warps[static_cast<size_t>(f.warp)].generation;
    case Wait::kRunning:
      return false;
  }
  return true;
}

void RunBlock(Block& b, const uint3& block_idx) {
  const int threads = static_cast<int>(b.fibers.size());
  b.live = threads;
  b.arrived = 0;
  for (WarpState& w : b.warps) {
    w.exited = w.arrived = 0;
    w.pending = WarpOp::kNone;
  }
  for (int i = 0; i < threads; ++i) {
    Fiber& f = b.fibers[static_cast<size_t>(i)];
    f.wait = Wait::kRunning;
    f.coords.block_idx = block_idx;
  }
  Release(&b.block_start);
  const bool reverse = ReverseSchedule();
  for (;;) {
    bool resumed = false;
    for (int n = 0; n < threads; ++n) {
      Fiber& f = b.fibers[static_cast<size_t>(reverse ? threads - 1 - n : n)];
      if (Blocked(b, f)) continue;
      f.wait = Wait::kRunning;
      Resume(b, f);
      resumed = true;
    }
    if (b.live == 0) break;
    if (!resumed) {
      int at_block = 0, at_warp = 0;
      for (const Fiber& f : b.fibers) {
        at_block += f.wait == Wait::kBlock;
        at_warp += f.wait == Wait::kWarp;
      }
      std::fprintf(stderr,
                   "gpu emulator: deadlock in block (%u,%u,%u): %d threads at __syncthreads, %d "
                   "at warp collectives, %d returned (a barrier not every thread reaches)\n",
                   block_idx.x, block_idx.y, block_idx.z, at_block, at_warp, threads - b.live);
      std::abort();
    }
  }
  Acquire(&b.block_end);
}

void RunGrid(const LaunchConfig& config, const std::function<void()>& body) {
  const int threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
  thread_local FiberPool pool;
  Block b;
  b.fibers.resize(static_cast<size_t>(threads));
  b.warps.resize(static_cast<size_t>((threads + 31) / 32));
  for (size_t w = 0; w < b.warps.size(); ++w) {
    b.warps[w].lanes = std::min(32, threads - static_cast<int>(w) * 32);
  }
  for (int i = 0; i < threads; ++i) {
    Fiber& f = b.fibers[static_cast<size_t>(i)];
    f.slot = pool.Slot(i);
    f.warp = i / 32;
    f.lane = i % 32;
    f.coords.thread_idx = {static_cast<unsigned>(i) % config.block.x,
                           static_cast<unsigned>(i) / config.block.x % config.block.y,
                           static_cast<unsigned>(i) / (config.block.x * config.block.y)};
    f.coords.block_dim = config.block;
    f.coords.grid_dim = config.grid;
  }
  std::vector<unsigned char> shared(config.shared_bytes + 256);
  b.shared = shared.data() + (256 - reinterpret_cast<uintptr_t>(shared.data()) % 256);
  b.body = &body;
#if defined(SCD_EMU_TSAN)
  // Thread i of every block is the same TSan fiber, ordered by the block edges.
  b.scheduler_fiber = __tsan_get_current_fiber();
#endif
  Block* const outer = t_block;
  t_block = &b;
  for (unsigned z = 0; z < config.grid.z; ++z) {
    for (unsigned y = 0; y < config.grid.y; ++y) {
      for (unsigned x = 0; x < config.grid.x; ++x) {
        std::memset(b.shared, scd::cuda::standin::kPoison, config.shared_bytes);
        RunBlock(b, {x, y, z});
      }
    }
  }
  t_block = outer;
}

}  // namespace

const ThreadCoords& Coords() { return Current().current->coords; }

void* DynamicShared() { return Current().shared; }

void SyncThreads() {
  Block& b = Current();
  Fiber& f = *b.current;
  char* const order = &b.barrier_order[b.generation % 2];
  Release(order);
  if (++b.arrived == b.live) {
    OpenBlockBarrier(b);
    Acquire(order);
    return;
  }
  f.wait = Wait::kBlock;
  f.generation = b.generation;
  Park();
  Acquire(order);
}

void SyncWarp(unsigned mask) { WarpArrive(WarpOp::kSync, mask); }

bool WarpArriveIsLast() { return WarpArrive(WarpOp::kSync, kFullMask); }

uint64_t WarpExchangeXor(unsigned mask, uint64_t bits, int lane_mask, int width) {
  if (width != 32) Fail("__shfl_xor_sync with width != 32 (the emulator models 32)");
  Block& b = Current();
  Fiber& f = *b.current;
  WarpState& w = b.warps[static_cast<size_t>(f.warp)];
  w.in[f.lane] = bits;
  w.lane_mask[f.lane] = lane_mask;
  WarpArrive(WarpOp::kExchange, mask);
  return b.warps[static_cast<size_t>(f.warp)].out[f.lane];
}

void Fail(const char* what) {
  if (t_block != nullptr && t_block->current != nullptr) {
    const ThreadCoords& c = t_block->current->coords;
    std::fprintf(stderr, "gpu emulator: %s (block (%u,%u,%u), thread (%u,%u,%u))\n", what,
                 c.block_idx.x, c.block_idx.y, c.block_idx.z, c.thread_idx.x, c.thread_idx.y,
                 c.thread_idx.z);
  } else {
    std::fprintf(stderr, "gpu emulator: %s\n", what);
  }
  std::abort();
}

cudaError_t SetMaxDynamicShared(const void* kernel, int bytes) {
  if (bytes < 0 || static_cast<size_t>(bytes) > kMaxDynamicShared) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(AttributeMutex());
  SharedOptIns()[kernel] = static_cast<size_t>(bytes);
  return cudaSuccess;
}

void Launch(const void* kernel, const LaunchConfig& config, std::function<void()> body) {
  const dim3& g = config.grid;
  const dim3& k = config.block;
  const uint64_t threads = uint64_t{k.x} * k.y * k.z;
  if (threads == 0 || threads > kMaxThreads || k.z > 64 || g.x == 0 || g.y == 0 || g.z == 0 ||
      g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) {
    t_last_error = cudaErrorInvalidConfiguration;
    return;
  }
  size_t limit = kDefaultDynamicShared;
  {
    std::lock_guard<std::mutex> lock(AttributeMutex());
    auto it = SharedOptIns().find(kernel);
    if (it != SharedOptIns().end()) limit = std::max(limit, it->second);
  }
  if (config.shared_bytes > limit) {
    t_last_error = cudaErrorInvalidValue;
    return;
  }
  const LaunchConfig copy = config;
  scd::cuda::standin::Enqueue(config.stream,
                              [copy, body = std::move(body)] { RunGrid(copy, body); });
}

void EnqueueOnStream(cudaStream_t stream, std::function<void()> work) {
  scd::cuda::standin::Enqueue(stream, std::move(work));
}

void RequireDeviceRange(const void* p, size_t bytes, const char* what) {
  scd::cuda::standin::RequireDeviceBytes(p, bytes, what);
}

}  // namespace scd_emu

cudaError_t cudaGetLastError() {
  const cudaError_t e = scd_emu::t_last_error;
  scd_emu::t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return scd_emu::t_last_error; }

namespace scd_emu {
namespace {

// The codes the emulator sets: name and description, as the runtime gives them.
struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
};

const ErrorText& TextOf(cudaError_t e) {
  static constexpr ErrorText kOther = {cudaSuccess /* unused */, "cudaError (emulated)",
                                       "emulated CUDA error"};
  for (const ErrorText& t : kErrors) {
    if (t.code == e) return t;
  }
  return kOther;
}

}  // namespace
}  // namespace scd_emu

const char* cudaGetErrorName(cudaError_t e) { return scd_emu::TextOf(e).name; }

const char* cudaGetErrorString(cudaError_t e) { return scd_emu::TextOf(e).text; }
