// TCP-only checks that write raw bytes to the listener, independent of our own sender:
// a body corrupted on the wire is rejected with a DATA_LOSS ACK carrying the request id, a
// corrupted header or transfer token drops only its own connection while other connections
// keep working, and a version-1 frame (no token) is refused by its version.
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

// A version-2 DATA frame's header and token, as our sender writes them (frame.h).
void WriteDataHeader(int fd, const FrameHeader& header, const TransferToken& token) {
  const EncodedHeader encoded = EncodeHeader(header);
  WriteAll(fd, encoded.data(), encoded.size());
  WriteAll(fd, token.data(), token.size());
}

TEST_CASE("tcp: a body corrupted on the wire gets a DATA_LOSS ACK", "[transport][tcp]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen("tcp://127.0.0.1:0");
  REQUIRE(listener.ok());
  const int fd = RawConnect((*listener)->address());

  std::vector<uint8_t> body = Pattern(21, 5000);
  const TransferToken token = NewTransferToken();
  FrameHeader header = MakeData(21, token, body);
  header.sequence = 1;
  body[4321] ^= 0x01;  // flipped after the checksum, as a bad link would
  WriteDataHeader(fd, header, token);
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
  CHECK(report.token == token);  // the loss report names the transfer it belongs to
  CHECK(absl::IsDataLoss(report.status));

  // The same raw connection is still in sync: a good frame is accepted and ACKed OK.
  body = Pattern(22, 100);
  header = MakeData(22, token, body);
  header.sequence = 2;
  WriteDataHeader(fd, header, token);
  WriteAll(fd, body.data(), body.size());
  REQUIRE(recv(fd, ack_bytes.data(), ack_bytes.size(), MSG_WAITALL) ==
          static_cast<ssize_t>(ack_bytes.size()));
  ack = DecodeHeader(ack_bytes, 1 << 16);
  REQUIRE(ack.ok());
  CHECK(ack->status_code == 0);
  Message next = ReceiveOrFail(**listener);
  CHECK(next.request_id == 22);
  CHECK(next.token == token);
  CHECK(HoldsPattern(next, 22, 100));
  close(fd);
}

TEST_CASE("tcp: a corrupted transfer token drops the connection", "[transport][tcp]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen("tcp://127.0.0.1:0");
  REQUIRE(listener.ok());
  const int fd = RawConnect((*listener)->address());
  const std::vector<uint8_t> body = Pattern(41, 100);
  TransferToken token = NewTransferToken();
  const FrameHeader header = MakeData(41, token, body);
  token[5] ^= 0x04;  // after the header sealed its CRC
  WriteDataHeader(fd, header, token);
  Message report = ReceiveOrFail(**listener);
  INFO(report.status.ToString());
  CHECK(report.request_id == 0);  // nothing of the frame is trusted
  CHECK(absl::IsDataLoss(report.status));
  CHECK(std::string(report.status.message()).find("transfer token") != std::string::npos);
  char byte;
  CHECK(recv(fd, &byte, 1, 0) == 0);
  close(fd);
}

TEST_CASE("tcp: a version-1 frame is refused by its version", "[transport][tcp]") {
  auto transport = MakeTransport("tcp");
  auto listener = transport->Listen("tcp://127.0.0.1:0");
  REQUIRE(listener.ok());
  const int fd = RawConnect((*listener)->address());
  EncodedHeader v1 = EncodeHeader(MakeData(51, TransferToken{}, {}));
  v1[4] = 1;  // the version field, then the header CRC resealed as a version-1 sender would
  const uint32_t crc = Crc32c(v1.data(), kFrameHeaderBytes - 4);
  for (int i = 0; i < 4; ++i) v1[kFrameHeaderBytes - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  WriteAll(fd, v1.data(), v1.size());
  Message report = ReceiveOrFail(**listener);
  INFO(report.status.ToString());
  CHECK(absl::IsDataLoss(report.status));
  CHECK(std::string(report.status.message()).find("unsupported frame version 1") !=
        std::string::npos);
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
  header.type = FrameType::kData;
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
