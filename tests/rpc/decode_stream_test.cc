// The generated scd.v1 stubs as the daemons will use them: a Decode service streaming token
// events and a final `done` through StartGrpcServer, read by a client over a MakeChannel
// channel; a mid-stream error arrives as an `error` event; a large inline payload passes the
// raised message limit; a cancelled call ends the server's loop.
#include <grpcpp/client_context.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <string>

#include "common/rpc/credentials.h"
#include "common/rpc/grpc_server.h"
#include "proto/scd.grpc.pb.h"
#include "tests/rpc/rpc_test_support.h"

namespace scd::rpc {
namespace {

// Echoes: one token per suffix id, then done; suffix id -1 means "fail after the tokens so
// far"; max_tokens 0 means "stream until cancelled".
class FakeDecodeService final : public scd::v1::Decode::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* context, const scd::v1::DecodeRequest* request,
                        grpc::ServerWriter<scd::v1::DecodeEvent>* writer) override {
    if (request->max_tokens() == 0) {
      scd::v1::DecodeEvent event;
      event.mutable_token()->set_id(1);
      while (!context->IsCancelled() && writer->Write(event)) {
      }
      cancelled_ = true;
      return grpc::Status::CANCELLED;
    }
    int sent = 0;
    for (int id : request->suffix_token_ids()) {
      scd::v1::DecodeEvent event;
      if (id < 0) {
        event.mutable_error()->set_code(static_cast<int>(grpc::StatusCode::INTERNAL));
        event.mutable_error()->set_message("rebuild failed");
        writer->Write(event);
        return grpc::Status::OK;
      }
      event.mutable_token()->set_id(id);
      event.mutable_token()->set_text_piece("t" + std::to_string(id));
      writer->Write(event);
      ++sent;
    }
    scd::v1::DecodeEvent done;
    done.mutable_done()->set_finish_reason("length");
    done.mutable_done()->set_prompt_tokens(static_cast<int>(request->inline_payload().size()));
    done.mutable_done()->set_completion_tokens(sent);
    done.mutable_done()->mutable_timings()->set_rebuild_ms(1.5);
    writer->Write(done);
    return grpc::Status::OK;
  }

  std::atomic<bool> cancelled_{false};
};

TEST_CASE("Decode streams tokens, then done or an error event", "[cpu]") {
  FakeDecodeService service;
  absl::StatusOr<GrpcServer> server = StartGrpcServer(GrpcServerOptions{}, {&service});
  REQUIRE(server.ok());
  CHECK(server->port > 0);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(server->address, ChannelOptions{});
  REQUIRE(channel.ok());
  auto stub = scd::v1::Decode::NewStub(*channel);

  scd::v1::DecodeRequest request;
  request.set_request_id("req-1");
  request.set_max_tokens(8);
  request.set_inline_payload(std::string(6 << 20, 'x'));  // over gRPC's 4 MB default
  for (int id : {5, 6, 7}) request.add_suffix_token_ids(id);
  {
    grpc::ClientContext context;
    auto reader = stub->Generate(&context, request);
    scd::v1::DecodeEvent event;
    std::string text;
    int done = 0;
    while (reader->Read(&event)) {
      if (event.has_token()) text += event.token().text_piece();
      if (event.has_done()) {
        ++done;
        CHECK(event.done().finish_reason() == "length");
        CHECK(event.done().completion_tokens() == 3);
        CHECK(event.done().prompt_tokens() == (6 << 20));
        CHECK(event.done().timings().rebuild_ms() == 1.5);
      }
    }
    grpc::Status status = reader->Finish();
    INFO(status.error_message());
    REQUIRE(status.ok());
    CHECK(text == "t5t6t7");
    CHECK(done == 1);
  }

  request.clear_inline_payload();
  request.add_suffix_token_ids(-1);
  {
    grpc::ClientContext context;
    auto reader = stub->Generate(&context, request);
    scd::v1::DecodeEvent event;
    int tokens = 0;
    std::string error;
    while (reader->Read(&event)) {
      if (event.has_token()) ++tokens;
      if (event.has_error()) error = event.error().message();
    }
    CHECK(reader->Finish().ok());
    CHECK(tokens == 3);
    CHECK(error == "rebuild failed");
  }

  // A client that goes away mid-stream ends the server's loop.
  request.set_max_tokens(0);
  {
    grpc::ClientContext context;
    auto reader = stub->Generate(&context, request);
    scd::v1::DecodeEvent event;
    for (int i = 0; i < 3; ++i) REQUIRE(reader->Read(&event));
    context.TryCancel();
    while (reader->Read(&event)) {
    }
    CHECK(reader->Finish().error_code() == grpc::StatusCode::CANCELLED);
  }
  CHECK(testing::WaitFor([&] { return service.cancelled_.load(); }));
  server->server->Shutdown();
}

}  // namespace
}  // namespace scd::rpc
