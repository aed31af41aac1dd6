// Unit tests for the pieces under the transports: the frame header (round trip, every
// corruption caught before allocation), ACK encoding, address parsing, option validation,
// the BandwidthLimiter's accuracy, and the factory.
#include "common/transport/frame.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>
#include <vector>

#include "common/base/crc32c.h"
#include "common/transport/address.h"
#include "common/transport/bandwidth_limiter.h"
#include "common/transport/transport.h"

namespace scd::transport {
namespace {

TEST_CASE("frame headers round-trip and every flipped bit is caught", "[cpu][transport]") {
  FrameHeader header;
  header.type = FrameType::kData;
  header.sequence = 0x0102030405060708ULL;
  header.request_id = 42;
  header.body_length = 123456789;
  header.body_crc = 0xdeadbeef;
  const EncodedHeader bytes = EncodeHeader(header);
  CHECK(bytes[0] == 'S');
  CHECK(bytes[3] == 'T');
  auto decoded = DecodeHeader(bytes, header.body_length);
  REQUIRE(decoded.ok());
  CHECK(decoded->type == FrameType::kData);
  CHECK(decoded->sequence == header.sequence);
  CHECK(decoded->request_id == 42);
  CHECK(decoded->body_length == 123456789);
  CHECK(decoded->body_crc == 0xdeadbeef);

  int caught = 0;
  for (size_t bit = 0; bit < bytes.size() * 8; ++bit) {
    EncodedHeader flipped = bytes;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    caught += absl::IsDataLoss(DecodeHeader(flipped, ~uint64_t{0}).status()) ? 1 : 0;
  }
  CHECK(caught == static_cast<int>(bytes.size() * 8));

  // A well-formed header announcing too much is refused before anything is allocated.
  CHECK(absl::IsResourceExhausted(DecodeHeader(bytes, header.body_length - 1).status()));
  CHECK(absl::IsInvalidArgument(DecodeHeader(absl::MakeSpan(bytes.data(), 47), 1).status()));
}

TEST_CASE("a DATA frame seals its transfer token; tokens are random", "[cpu][transport]") {
  const std::vector<uint8_t> body = {9, 8, 7};
  const TransferToken token = NewTransferToken();
  CHECK(HasToken(token));
  CHECK(NewTransferToken() != token);
  const FrameHeader header = MakeData(11, token, body);
  CHECK(header.type == FrameType::kData);
  CHECK(VerifyBody(header, body).ok());
  auto decoded = DecodeHeader(EncodeHeader(header), body.size());
  REQUIRE(decoded.ok());
  CHECK(decoded->token_crc == header.token_crc);
  CHECK(VerifyToken(*decoded, token).ok());
  TransferToken flipped = token;
  flipped[15] ^= 0x80;
  const absl::Status bad = VerifyToken(*decoded, flipped);
  CHECK(absl::IsDataLoss(bad));
  CHECK(std::string(bad.message()).find("request 11") != std::string::npos);

  // The version field is checked: a version-1 header (no token) is refused by number.
  EncodedHeader v1 = EncodeHeader(header);
  v1[4] = 1;
  const uint32_t crc = Crc32c(v1.data(), kFrameHeaderBytes - 4);
  for (int i = 0; i < 4; ++i) v1[kFrameHeaderBytes - 4 + i] = static_cast<uint8_t>(crc >> (8 * i));
  const absl::Status old = DecodeHeader(v1, body.size()).status();
  CHECK(absl::IsDataLoss(old));
  CHECK(std::string(old.message()).find("unsupported frame version 1 (this build speaks 2)") !=
        std::string::npos);
}

TEST_CASE("bodies are verified and ACKs carry the verdict", "[cpu][transport]") {
  const std::vector<uint8_t> body = {1, 2, 3, 4, 5};
  FrameHeader header;
  header.request_id = 7;
  header.sequence = 3;
  header.body_length = body.size();
  header.body_crc = Crc32c(body.data(), body.size());
  CHECK(VerifyBody(header, body).ok());
  std::vector<uint8_t> bad = body;
  bad[2] ^= 1;
  const absl::Status mismatch = VerifyBody(header, bad);
  CHECK(absl::IsDataLoss(mismatch));
  CHECK(std::string(mismatch.message()).find("request 7") != std::string::npos);

  std::string text;
  const FrameHeader ack = MakeAck(header, mismatch, &text);
  CHECK(ack.type == FrameType::kAck);
  CHECK(ack.sequence == 3);
  auto decoded = DecodeHeader(EncodeHeader(ack), 1 << 16);
  REQUIRE(decoded.ok());
  const absl::Span<const uint8_t> text_bytes(reinterpret_cast<const uint8_t*>(text.data()),
                                             text.size());
  CHECK(VerifyBody(*decoded, text_bytes).ok());
  const absl::Status at_sender = AckToStatus(*decoded, text_bytes);
  CHECK(absl::IsDataLoss(at_sender));
  CHECK(std::string(at_sender.message()).find("checksum") != std::string::npos);
  CHECK(AckToStatus(MakeAck(header, absl::OkStatus(), &text), {}).ok());
}

TEST_CASE("addresses parse, resolve and format", "[cpu][transport]") {
  auto address = ResolveAddress("tcp://127.0.0.1:5555", "tcp");
  REQUIRE(address.ok());
  CHECK(FormatAddress("tcp", *address) == "tcp://127.0.0.1:5555");
  auto localhost = ResolveAddress("ucx://localhost:0", "ucx");
  REQUIRE(localhost.ok());
  CHECK(FormatAddress("ucx", *localhost) == "ucx://127.0.0.1:0");
  CHECK(absl::IsInvalidArgument(ResolveAddress("ucx://127.0.0.1:1", "tcp").status()));
  CHECK(absl::IsInvalidArgument(ResolveAddress("tcp://127.0.0.1", "tcp").status()));
  CHECK(absl::IsInvalidArgument(ResolveAddress("tcp://127.0.0.1:70000", "tcp").status()));
  CHECK(absl::IsInvalidArgument(ResolveAddress("tcp://:80", "tcp").status()));
  CHECK(!ResolveAddress("tcp://no-such-host.invalid:80", "tcp").ok());
}

TEST_CASE("invalid options are errors that name the field", "[cpu][transport]") {
  TransportOptions options;
  CHECK(ValidateOptions(options).ok());
  options.bandwidth_gbps = -1;
  const absl::Status negative = ValidateOptions(options);
  CHECK(absl::IsInvalidArgument(negative));
  CHECK(std::string(negative.message()).find("bandwidth_gbps") != std::string::npos);
  CHECK(absl::IsInvalidArgument(CreateTransport("tcp", options).status()));
  options = TransportOptions();
  options.stall_timeout = absl::ZeroDuration();
  CHECK(absl::IsInvalidArgument(ValidateOptions(options)));
  options = TransportOptions();
  options.max_inbox_messages = 0;
  CHECK(absl::IsInvalidArgument(ValidateOptions(options)));
  CHECK(absl::IsInvalidArgument(CreateTransport("rdma").status()));
}

TEST_CASE("the bandwidth limiter paces 8 MiB at 0.5 Gbit/s to ~134 ms", "[cpu][transport]") {
  auto limiter = BandwidthLimiter::Create(0.5);
  REQUIRE(limiter.ok());
  CHECK((*limiter)->gbps() == Approx(0.5));
  const size_t total = 8 << 20;
  const absl::Time start = absl::Now();
  for (size_t sent = 0; sent < total; sent += BandwidthLimiter::kChunkBytes) {
    REQUIRE((*limiter)->Acquire(BandwidthLimiter::kChunkBytes, absl::InfiniteFuture()).ok());
  }
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  const double expected = total * 8 / 0.5e9;
  INFO("took " << took * 1e3 << " ms, expected " << expected * 1e3 << " ms");
  CHECK(took == Approx(expected).epsilon(0.2));
}

TEST_CASE("the bandwidth limiter is shared fairly and honours deadlines", "[cpu][transport]") {
  auto limiter = BandwidthLimiter::Create(1.0);  // 125 MB/s
  REQUIRE(limiter.ok());
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  std::atomic<int> refused{0};  // counted here, checked after join: Catch2 is not thread-safe
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 16; ++i) {
        if (!(*limiter)->Acquire(64 << 10, absl::InfiniteFuture()).ok()) ++refused;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(refused == 0);
  const double took = absl::ToDoubleSeconds(absl::Now() - start);
  const double expected = 4 * 16 * (64 << 10) * 8 / 1e9;  // 33.5 ms
  INFO("took " << took * 1e3 << " ms");
  CHECK(took == Approx(expected).epsilon(0.25));

  // 100 MB at 1 Gbit/s cannot fit in 50 ms: refused at once, consuming nothing.
  const absl::Time before = absl::Now();
  CHECK(absl::IsDeadlineExceeded(
      (*limiter)->Acquire(100 << 20, absl::Now() + absl::Milliseconds(50))));
  CHECK(absl::Now() - before < absl::Milliseconds(40));

  auto unlimited = BandwidthLimiter::Create(0);
  REQUIRE(unlimited.ok());
  CHECK((*unlimited)->unlimited());
  CHECK((*unlimited)->Acquire(size_t{1} << 40, absl::Now()).ok());
  CHECK(absl::IsInvalidArgument(BandwidthLimiter::Create(-0.1).status()));
}

}  // namespace
}  // namespace scd::transport
