// DecodeRegistry without gRPC, on a fake clock: admission (token, digest, model, fields),
// idempotent re-registration, lease expiry, MarkFailed quarantine, least-load routing with
// round-robin ties and capacity, stale leases, and concurrent use.
#include "common/rpc/decode_registry.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <map>
#include <thread>
#include <vector>

#include "tests/rpc/rpc_test_support.h"

namespace scd::rpc {
namespace {

using testing::FakeClock;
using testing::kDigest;
using testing::kModel;
using testing::kOtherDigest;
using testing::kToken;
using testing::MakeInstance;
using testing::MakeRegistryOptions;

std::unique_ptr<DecodeRegistry> MakeRegistry(FakeClock* clock) {
  DecodeRegistryOptions options = MakeRegistryOptions();
  options.clock = clock->AsFunction();
  absl::StatusOr<std::unique_ptr<DecodeRegistry>> registry =
      DecodeRegistry::Create(std::move(options));
  REQUIRE(registry.ok());
  return *std::move(registry);
}

std::string PickId(DecodeRegistry& registry) {
  absl::StatusOr<DecodeLease> lease = registry.Pick(kModel);
  REQUIRE(lease.ok());
  return lease->route().instance_id;  // released here
}

TEST_CASE("Registry admits a decode instance and routes to it", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  absl::StatusOr<RegisterOutcome> outcome = registry->Register(MakeInstance("a"), kToken);
  REQUIRE(outcome.ok());
  CHECK_FALSE(outcome->refreshed);
  CHECK(outcome->heartbeat_interval == absl::Milliseconds(50));
  CHECK(outcome->lease == absl::Milliseconds(500));

  absl::StatusOr<DecodeLease> lease = registry->Pick(kModel);
  REQUIRE(lease.ok());
  CHECK(lease->route().instance_id == "a");
  CHECK(lease->route().rpc_address == MakeInstance("a").rpc_address);
  CHECK(lease->route().data_plane_address == "tcp://127.0.0.1:7000");
  CHECK(registry->Instances().at(0).in_flight == 1);
  lease->Release();
  CHECK(registry->Instances().at(0).in_flight == 0);
  CHECK(registry->LiveInstanceCount(kModel) == 1);
  CHECK(registry->Models() == std::vector<std::string>{kModel});
}

TEST_CASE("Registry refuses a wrong cluster token with a reason", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  absl::StatusOr<RegisterOutcome> outcome = registry->Register(MakeInstance("a"), "wrong");
  REQUIRE(outcome.status().code() == absl::StatusCode::kPermissionDenied);
  CHECK_THAT(std::string(outcome.status().message()), Catch::Contains("cluster token"));
  CHECK(registry->Instances().empty());
  CHECK(registry->Heartbeat("a", "wrong", {0, 0}).status().code() ==
        absl::StatusCode::kPermissionDenied);
  CHECK(registry->Deregister("a", "").status().code() == absl::StatusCode::kPermissionDenied);
}

TEST_CASE("Registry refuses a wrong pair digest naming both digests", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  absl::StatusOr<RegisterOutcome> outcome =
      registry->Register(MakeInstance("a", 4, kModel, kOtherDigest), kToken);
  REQUIRE(outcome.status().code() == absl::StatusCode::kFailedPrecondition);
  const std::string message(outcome.status().message());
  CHECK_THAT(message, Catch::Contains(kDigest));
  CHECK_THAT(message, Catch::Contains(kOtherDigest));
  CHECK_THAT(message, Catch::Contains(kModel));
  // Digests compare case-insensitively.
  CHECK(registry->Register(MakeInstance("a", 4, kModel, "00112233445566778899AABBCCDDEEFF"), kToken)
            .ok());
  CHECK(registry->Register(MakeInstance("b", 4, kModel, "not-hex"), kToken).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Registry validates fields and models", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  DecodeInstanceInfo info = MakeInstance("a");
  info.capacity = 0;
  CHECK(registry->Register(info, kToken).status().code() == absl::StatusCode::kInvalidArgument);
  info = MakeInstance("");
  CHECK(registry->Register(info, kToken).status().code() == absl::StatusCode::kInvalidArgument);
  info = MakeInstance("a");
  info.rpc_address.clear();
  CHECK(registry->Register(info, kToken).status().code() == absl::StatusCode::kInvalidArgument);

  absl::StatusOr<RegisterOutcome> unknown =
      registry->Register(MakeInstance("a", 4, "no-such-model"), kToken);
  REQUIRE(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(unknown.status().message()), Catch::Contains(kModel));  // lists served

  CHECK(registry->Pick("no-such-model").status().code() == absl::StatusCode::kNotFound);
  CHECK(registry->Pick(kModel).status().code() == absl::StatusCode::kUnavailable);
  CHECK(registry->LiveInstanceCount(kModel) == 0);
}

TEST_CASE("Registry options are validated", "[cpu]") {
  DecodeRegistryOptions options = MakeRegistryOptions();
  options.lease = options.heartbeat_interval;
  CHECK(DecodeRegistry::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options = MakeRegistryOptions();
  options.heartbeat_interval = absl::ZeroDuration();
  CHECK(DecodeRegistry::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options = MakeRegistryOptions();
  options.expected_pair_digests["m"] = "xyz";
  CHECK(DecodeRegistry::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Re-registering is idempotent and keeps the instance's load", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  absl::StatusOr<DecodeLease> lease = registry->Pick(kModel);
  REQUIRE(lease.ok());
  DecodeInstanceInfo updated = MakeInstance("a", 8);
  absl::StatusOr<RegisterOutcome> again = registry->Register(updated, kToken);
  REQUIRE(again.ok());
  CHECK(again->refreshed);
  std::vector<DecodeInstanceStatus> instances = registry->Instances();
  REQUIRE(instances.size() == 1);
  CHECK(instances[0].info.capacity == 8);
  CHECK(instances[0].in_flight == 1);
  lease->Release();
  CHECK(registry->Instances()[0].in_flight == 0);

  CHECK(*registry->Deregister("a", kToken));
  CHECK_FALSE(*registry->Deregister("a", kToken));
  CHECK(registry->Instances().empty());
}

TEST_CASE("Lease expiry removes a silent instance and Pick routes around it", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  REQUIRE(registry->Register(MakeInstance("b"), kToken).ok());
  CHECK(registry->LiveInstanceCount(kModel) == 2);

  // Only "a" keeps heartbeating; 600 ms > the 500 ms lease.
  for (int i = 0; i < 6; ++i) {
    clock.Advance(absl::Milliseconds(100));
    REQUIRE(*registry->Heartbeat("a", kToken, {0, 0}));
  }
  std::vector<DecodeInstanceStatus> instances = registry->Instances();
  REQUIRE(instances.size() == 1);
  CHECK(instances[0].info.instance_id == "a");
  for (int i = 0; i < 5; ++i) CHECK(PickId(*registry) == "a");

  // The expired instance is told to register again, and then routes again.
  CHECK_FALSE(*registry->Heartbeat("b", kToken, {0, 0}));
  REQUIRE(registry->Register(MakeInstance("b"), kToken).ok());
  CHECK(registry->LiveInstanceCount(kModel) == 2);

  // Everything silent: the model is known but has no live instance.
  clock.Advance(absl::Seconds(1));
  CHECK(registry->Pick(kModel).status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("MarkFailed routes around an instance until its quarantine ends", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);  // quarantine defaults to the 500 ms lease
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  REQUIRE(registry->Register(MakeInstance("b"), kToken).ok());
  registry->MarkFailed("a");
  registry->MarkFailed("unknown");  // ignored
  for (int i = 0; i < 4; ++i) CHECK(PickId(*registry) == "b");
  CHECK(registry->LiveInstanceCount(kModel) == 1);
  CHECK(registry->Instances()[0].quarantined);

  // Heartbeats alone do not lift the quarantine early...
  clock.Advance(absl::Milliseconds(300));
  REQUIRE(*registry->Heartbeat("a", kToken, {0, 0}));
  REQUIRE(*registry->Heartbeat("b", kToken, {0, 0}));
  CHECK(PickId(*registry) == "b");
  // ...but its end does.
  clock.Advance(absl::Milliseconds(300));
  REQUIRE(*registry->Heartbeat("a", kToken, {0, 0}));
  REQUIRE(*registry->Heartbeat("b", kToken, {0, 0}));
  std::map<std::string, int> seen;
  for (int i = 0; i < 4; ++i) ++seen[PickId(*registry)];
  CHECK(seen["a"] == 2);
  CHECK(seen["b"] == 2);

  // Both failed: Unavailable says why.
  registry->MarkFailed("a");
  registry->MarkFailed("b");
  absl::StatusOr<DecodeLease> none = registry->Pick(kModel);
  REQUIRE(none.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(none.status().message()), Catch::Contains("2 failed recently"));
  // Re-registering (the daemon restarted) ends the quarantine.
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  CHECK(PickId(*registry) == "a");
}

TEST_CASE("Pick chooses the least loaded instance, ties round-robin", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a", 4), kToken).ok());
  REQUIRE(registry->Register(MakeInstance("b", 4), kToken).ok());

  // Equal loads alternate.
  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) order.push_back(PickId(*registry));
  CHECK(order == std::vector<std::string>{"a", "b", "a", "b"});

  // Held leases fill the instances evenly.
  std::vector<DecodeLease> held;
  std::map<std::string, int> count;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<DecodeLease> lease = registry->Pick(kModel);
    REQUIRE(lease.ok());
    ++count[lease->route().instance_id];
    held.push_back(*std::move(lease));
  }
  CHECK(count["a"] == 4);
  CHECK(count["b"] == 4);
  absl::StatusOr<DecodeLease> full = registry->Pick(kModel);
  REQUIRE(full.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK_THAT(std::string(full.status().message()), Catch::Contains("capacity"));

  // Freeing one slot on "b" makes "b" the only choice.
  for (DecodeLease& lease : held) {
    if (lease.route().instance_id == "b") {
      lease.Release();
      break;
    }
  }
  CHECK(PickId(*registry) == "b");
  held.clear();  // destructors release

  // Load is relative to capacity: c (capacity 8, 1 busy + 1 queued) beats a (capacity 4,
  // 2 busy); with 3 busy on c, a wins.
  REQUIRE(registry->Register(MakeInstance("c", 8), kToken).ok());
  REQUIRE(*registry->Deregister("b", kToken));
  REQUIRE(*registry->Heartbeat("a", kToken, {2, 0}));  // 2/4
  REQUIRE(*registry->Heartbeat("c", kToken, {1, 1}));  // 2/8
  CHECK(PickId(*registry) == "c");
  REQUIRE(*registry->Heartbeat("a", kToken, {1, 0}));  // 1/4
  REQUIRE(*registry->Heartbeat("c", kToken, {3, 0}));  // 3/8
  CHECK(PickId(*registry) == "a");
}

TEST_CASE("PeekPick names Pick's next instance without routing; heartbeats carry stage rates",
          "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a", 4), kToken).ok());
  REQUIRE(registry->Register(MakeInstance("b", 4), kToken).ok());
  for (int i = 0; i < 4; ++i) {  // the peek neither takes load nor moves the round-robin turn
    absl::StatusOr<DecodeInstanceStatus> next = registry->PeekPick(kModel);
    REQUIRE(next.ok());
    CHECK(next->info.instance_id == registry->PeekPick(kModel)->info.instance_id);
    CHECK(next->in_flight == 0);
    absl::StatusOr<DecodeLease> lease = registry->Pick(kModel);
    REQUIRE(lease.ok());
    CHECK(lease->route().instance_id == next->info.instance_id);
  }
  CHECK(registry->PeekPick("other").status().code() == absl::StatusCode::kNotFound);

  LoadReport load{1, 0, 8};
  load.rates.rebuild_seconds_per_token = {{"scd", 2e-5}, {"raw", 1e-6}};
  load.rates.prefill_seconds_per_token = 7e-5;
  REQUIRE(*registry->Heartbeat("a", kToken, load));
  REQUIRE(*registry->Heartbeat("b", kToken, {0, 0, 8}));  // b: less loaded, nothing measured
  absl::StatusOr<DecodeInstanceStatus> next = registry->PeekPick(kModel);
  REQUIRE(next.ok());
  CHECK(next->info.instance_id == "b");
  CHECK(next->rates.rebuild_seconds_per_token.empty());
  const std::vector<DecodeInstanceStatus> all = registry->Instances();
  REQUIRE(all.size() == 2);
  CHECK(all[0].rates.rebuild_seconds_per_token.at("scd") == 2e-5);
  CHECK(all[0].rates.prefill_seconds_per_token == 7e-5);
}

TEST_CASE("Reported load from other routers counts, our own is not counted twice", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a", 4), kToken).ok());
  REQUIRE(registry->Register(MakeInstance("b", 4), kToken).ok());
  absl::StatusOr<DecodeLease> ours = registry->Pick(kModel);  // "a": in_flight 1
  REQUIRE(ours.ok());
  REQUIRE(ours->route().instance_id == "a");
  // "a" reports 1 active (ours), "b" reports 2 active (someone else's).
  REQUIRE(*registry->Heartbeat("a", kToken, {1, 0}));
  REQUIRE(*registry->Heartbeat("b", kToken, {2, 0}));
  CHECK(PickId(*registry) == "a");  // a: 1, b: 2
  // Instances() shows the same loads that Pick weighs (admission reads them there).
  CHECK(registry->Instances().at(0).load == 1);
  CHECK(registry->Instances().at(1).load == 2);
  // Our request ends before the next heartbeat: a drops to 0, not below.
  ours->Release();
  CHECK(registry->Instances().at(0).load == 0);
  CHECK(PickId(*registry) == "a");
}

TEST_CASE("Batch slots are the most running reported beside a queue", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a", 64), kToken).ok());
  auto full_slots = [&] { return registry->Instances().at(0).full_slots; };
  REQUIRE(*registry->Heartbeat("a", kToken, {6, 0}));  // room to spare: slots unknown
  CHECK(full_slots() == 0);
  REQUIRE(*registry->Heartbeat("a", kToken, {8, 3}));  // full at 8
  CHECK(full_slots() == 8);
  REQUIRE(*registry->Heartbeat("a", kToken, {2, 0}));  // emptier later: still 8
  CHECK(full_slots() == 8);
  REQUIRE(*registry->Heartbeat("a", kToken, {7, 1}));  // full at 7 (less memory): the most stays
  CHECK(full_slots() == 8);
}

TEST_CASE("Reported batch slots are taken as they are, a queue beside them notwithstanding",
          "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a", 64), kToken).ok());
  auto full_slots = [&] { return registry->Instances().at(0).full_slots; };
  // One running and one waiting for the next step to join: eight slots, not one.
  REQUIRE(*registry->Heartbeat("a", kToken, {1, 1, 8}));
  CHECK(full_slots() == 8);
  REQUIRE(*registry->Heartbeat("a", kToken, {0, 0, 4}));  // reconfigured: the new number
  CHECK(full_slots() == 4);
}

TEST_CASE("A lease from an expired registration does not touch its successor", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  absl::StatusOr<DecodeLease> stale = registry->Pick(kModel);
  REQUIRE(stale.ok());
  clock.Advance(absl::Seconds(1));
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());  // a fresh entry
  absl::StatusOr<DecodeLease> fresh = registry->Pick(kModel);
  REQUIRE(fresh.ok());
  stale->Release();
  CHECK(registry->Instances().at(0).in_flight == 1);
  DecodeLease moved = *std::move(fresh);
  CHECK(moved.held());
  moved.Release();
  CHECK(registry->Instances().at(0).in_flight == 0);
}

TEST_CASE("SetExpectedDigest adds models and evicts instances of another pair", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  REQUIRE(registry->Register(MakeInstance("a"), kToken).ok());
  REQUIRE(registry->SetExpectedDigest("specialist-b", kOtherDigest).ok());
  REQUIRE(registry->Register(MakeInstance("b", 4, "specialist-b", kOtherDigest), kToken).ok());
  CHECK(registry->Models() == std::vector<std::string>{kModel, "specialist-b"});
  REQUIRE(registry->SetExpectedDigest(kModel, kOtherDigest).ok());  // new artifact for kModel
  std::vector<DecodeInstanceStatus> instances = registry->Instances();
  REQUIRE(instances.size() == 1);
  CHECK(instances[0].info.instance_id == "b");
  CHECK(registry->SetExpectedDigest("m", "zz").code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Registry is safe under concurrent register, heartbeat, pick and release", "[cpu]") {
  FakeClock clock;
  auto registry = MakeRegistry(&clock);
  constexpr int kThreads = 8;
  constexpr int kIterations = 400;
  std::atomic<int> picked{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const std::string id = "inst-" + std::to_string(t);
      for (int i = 0; i < kIterations; ++i) {
        if (!registry->Register(MakeInstance(id, 2), kToken).ok()) ++failures;
        if (!registry->Heartbeat(id, kToken, {i % 3, 0}).ok()) ++failures;
        absl::StatusOr<DecodeLease> lease = registry->Pick(kModel);
        if (lease.ok()) ++picked;
        if (i % 50 == 0) registry->MarkFailed(id);
        if (i % 97 == 0 && !registry->Deregister(id, kToken).ok()) ++failures;
        registry->Instances();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == 0);
  CHECK(picked > 0);
  for (const DecodeInstanceStatus& status : registry->Instances()) CHECK(status.in_flight == 0);
}

}  // namespace
}  // namespace scd::rpc
