// BackgroundQueue runs posted work in order on one thread that is not the caller's; Release
// destroys an object there, after its hook; Flush waits for what was posted before it; the
// destructor runs what is still queued.
#include "common/base/background_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

namespace scd {
namespace {

// Records the thread its destructor ran on.
struct Probe {
  explicit Probe(std::thread::id* where) : where(where) {}
  ~Probe() { *where = std::this_thread::get_id(); }
  std::thread::id* where;
};

TEST_CASE("BackgroundQueue runs work in order, off the caller's thread", "[cpu]") {
  std::vector<int> order;  // written by the queue's thread only
  std::thread::id ran_on;
  {
    BackgroundQueue q;
    for (int i = 0; i < 100; ++i) {
      q.Post([&order, &ran_on, i] {
        order.push_back(i);
        ran_on = std::this_thread::get_id();
      });
    }
    q.Flush();
    REQUIRE(q.completed() == 100);
    REQUIRE(order.size() == 100);
    for (int i = 0; i < 100; ++i) REQUIRE(order[i] == i);
    CHECK(ran_on != std::this_thread::get_id());
  }
}

TEST_CASE("BackgroundQueue::Release destroys the object on its thread, after the hook", "[cpu]") {
  BackgroundQueue q;
  std::thread::id destroyed, hooked;
  std::atomic<bool> alive_in_hook{false};
  auto probe = std::make_unique<Probe>(&destroyed);
  q.Release(std::move(probe), [&] {
    hooked = std::this_thread::get_id();
    alive_in_hook = destroyed == std::thread::id();  // not destroyed yet
  });
  REQUIRE(probe == nullptr);
  q.Flush();
  CHECK(alive_in_hook.load());
  CHECK(hooked == destroyed);
  CHECK(destroyed != std::this_thread::get_id());
  CHECK(destroyed != std::thread::id());
  q.Release(std::unique_ptr<Probe>());  // nothing to release: nothing posted
  q.Flush();
  CHECK(q.completed() == 1);
}

TEST_CASE("BackgroundQueue's destructor runs what is still queued", "[cpu]") {
  std::atomic<int> ran{0};
  {
    BackgroundQueue q;
    // The first item holds the thread while the others queue up behind it.
    q.Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); });
    for (int i = 0; i < 10; ++i) q.Post([&ran] { ++ran; });
  }
  CHECK(ran.load() == 10);
}

}  // namespace
}  // namespace scd
