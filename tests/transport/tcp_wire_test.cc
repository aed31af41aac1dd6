// TCP-only checks that write raw bytes to the listener, independent of our own sender:
// a body corrupted on the wire is rejected with a DATA_LOSS ACK carrying the request id, and
// a corrupted header drops only its own connection while other connections keep working.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/base/crc32c.h"
#include "common/transport/frame.h"
#include "tests/transport/transport_test_util.h"

namespace scd::transport {
namespace {

using testing::HoldsPattern;
using testing::In;
using testing::MakeTransport;
using testing::Pattern;
using testing::ReceiveOrFail;

// A raw client socket that has consumed the listener's HELLO.
int RawConnect(const std::string& address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  REQUIRE(absl::SimpleAtoi(address.substr(colon + 1), &port));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  EncodedHeader hello;
  REQUIRE(recv(fd, hello.data(), hello.size(), MSG_WAITALL) == static_cast<ssize_t>(hello.size()));
  auto decoded = DecodeHeader(hello, 0);
  REQUIRE(decoded.ok());
  CHECK(decoded->type == FrameType::kHello);
  return fd;
}

void WriteAll(int fd, const void* data, size_t size) {
  REQUIRE(send(fd, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size));
}

TEST_CASE("tcp: a body corrupted on the wire gets a DATA_LOSS ACK", "[transport][tcp]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen("tcp://127.0.0.1:0");
  REQUIRE(listener.ok());
  const int fd = RawConnect((*listener)->address());

  std::vector<uint8_t> body = Pattern(21, 5000);
  FrameHeader header;
  header.sequence = 1;
  header.request_id = 21;
  header.body_length = body.size();
  header.body_crc = Crc32c(body.data(), body.size());
  body[4321] ^= 0x01;  // flipped after the checksum, as a bad link would
  const EncodedHeader encoded = EncodeHeader(header);
  WriteAll(fd, encoded.data(), encoded.size());
  WriteAll(fd, body.data(), body.size());

  EncodedHeader ack_bytes;
  REQUIRE(recv(fd, ack_bytes.data(), ack_bytes.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(ack_bytes.size()));
  auto ack = DecodeHeader(ack_bytes, 1 << 16);
  REQUIRE(ack.ok());
  CHECK(ack->type == FrameType::kAck);
  CHECK(ack->sequence == 1);
  CHECK(ack->request_id == 21);
  CHECK(ack->status_code == static_cast<uint32_t>(absl::StatusCode::kDataLoss));
  std::string text(ack->body_length, '\0');
  REQUIRE(recv(fd, text.data(), text.size(), MSG_WAITALL) == static_cast<ssize_t>(text.size()));
  CHECK(text.find("checksum") != std::string::npos);

  Message report = ReceiveOrFail(**listener);
  INFO(report.status.ToString());
  CHECK(report.request_id == 21);
  CHECK(absl::IsDataLoss(report.status));

  // The same raw connection is still in sync: a good frame is accepted and ACKed OK.
  body = Pattern(22, 100);
  header.sequence = 2;
  header.request_id = 22;
  header.body_length = body.size();
  header.body_crc = Crc32c(body.data(), body.size());
  const EncodedHeader good = EncodeHeader(header);
  WriteAll(fd, good.data(), good.size());
  WriteAll(fd, body.data(), body.size());
  REQUIRE(recv(fd, ack_bytes.data(), ack_bytes.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(ack_bytes.size()));
  ack = DecodeHeader(ack_bytes, 1 << 16);
  REQUIRE(ack.ok());
  CHECK(ack->status_code == 0);
  Message next = ReceiveOrFail(**listener);
  CHECK(next.request_id == 22);
  CHECK(HoldsPattern(next, 22, 100));
  close(fd);
}

TEST_CASE("tcp: a corrupted header drops only its own connection", "[transport][tcp]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen("tcp://127.0.0.1:0");
  REQUIRE(listener.ok());
  auto healthy = transport->Connect((*listener)->address(), In(absl::Seconds(5)));
  REQUIRE(healthy.ok());

  const int fd = RawConnect((*listener)->address());
  FrameHeader header;
  header.request_id = 31;
  header.body_length = 1 << 30;
  EncodedHeader encoded = EncodeHeader(header);
  encoded[33] ^= 0x10;  // the length field: would be a 1 GiB allocation if believed
  WriteAll(fd, encoded.data(), encoded.size());
  Message report = ReceiveOrFail(**listener);
  INFO(report.status.ToString());
  CHECK(report.request_id == 0);  // a corrupt header's request id is not trusted
  CHECK(absl::IsDataLoss(report.status));
  CHECK(std::string(report.status.message()).find("corrupt frame header") != std::string::npos);
  char byte;
  CHECK(recv(fd, &byte, 1, 0) == 0);  // the listener hung up on the raw socket
  close(fd);

  REQUIRE((*healthy)->Send(32, Pattern(32, 777), In(absl::Seconds(5))).ok());
  Message next = ReceiveOrFail(**listener);
  CHECK(next.request_id == 32);
  CHECK(HoldsPattern(next, 32, 777));
}

}  // namespace
}  // namespace scd::transport
