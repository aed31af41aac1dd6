// TCP-only behaviour behind the daemons' fault handling: the listener reports a sender whose
// connection ended (after its last message was queued), so a decode daemon can drop what a
// dead prefill daemon left; and peer_timeout is validated. The link faults themselves (pulled
// veth, blackholed path) are exercised in tests/netfaults.
#include <atomic>
#include <mutex>
#include <thread>

#include "tests/transport/transport_test_util.h"

namespace scd::transport::testing {

TEST_CASE("TCP listener: the peer-closed callback names the sender after its messages",
          "[tcp][transport]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen(AnyPort("tcp"));
  REQUIRE(listener.ok());
  std::mutex mu;
  std::vector<std::string> closed;
  (*listener)->SetPeerClosedCallback([&](const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu);
    closed.push_back(peer);
  });
  auto connection = transport->Connect((*listener)->address(), In(absl::Seconds(5)));
  REQUIRE(connection.ok());
  REQUIRE((*connection)->Send(7, Pattern(7, 1000), In(absl::Seconds(5))).ok());
  const Message message = ReceiveOrFail(**listener);
  CHECK(message.request_id == 7);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(closed.empty());  // still connected
  }
  connection->reset();  // the sender goes away
  const absl::Time until = In(absl::Seconds(5));
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!closed.empty() || absl::Now() > until) break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(closed.size() == 1);
  CHECK(closed[0] == message.peer);  // the same name its messages carry
  // Nothing was turned into a message: Receive semantics are unchanged.
  CHECK(absl::IsDeadlineExceeded((*listener)->Receive(In(absl::Milliseconds(100))).status()));
}

TEST_CASE("TCP transport: peer_timeout below one second is refused", "[tcp][transport]") {
  TransportOptions options;
  options.peer_timeout = absl::Milliseconds(500);
  const absl::Status st = ValidateOptions(options);
  CHECK(absl::IsInvalidArgument(st));
  CHECK(st.message().find("peer_timeout") != absl::string_view::npos);
}

}  // namespace scd::transport::testing
