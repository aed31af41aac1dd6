// TLS configuration: clear errors for missing, partial and non-PEM settings; a TLS control
// plane that a client with the CA reaches and a plaintext client does not; mutual TLS that
// refuses a client without a certificate. Also the absl <-> gRPC status translation.
#include "common/rpc/credentials.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/base/file_io.h"
#include "common/rpc/control_plane_client.h"
#include "common/rpc/status_translation.h"
#include "tests/rpc/rpc_test_support.h"
#include "tests/rpc/tls_fixtures.h"
#include "tests/test_support.h"

namespace scd::rpc {
namespace {

using testing::ControlPlaneServer;
using testing::kToken;
using testing::MakeInstance;
using testing::MakeRegistryOptions;

struct PemFiles {
  std::string ca, server_cert, server_key, client_cert, client_key;
};

PemFiles WritePemFiles() {
  const std::string dir = scd::testing::TempDir();
  PemFiles files{dir + "/ca.pem", dir + "/server.pem", dir + "/server.key", dir + "/client.pem",
                 dir + "/client.key"};
  REQUIRE(WriteFileAtomically(files.ca, testing::kTestCaPem).ok());
  REQUIRE(WriteFileAtomically(files.server_cert, testing::kTestServerCertPem).ok());
  REQUIRE(WriteFileAtomically(files.server_key, testing::kTestServerKeyPem).ok());
  REQUIRE(WriteFileAtomically(files.client_cert, testing::kTestClientCertPem).ok());
  REQUIRE(WriteFileAtomically(files.client_key, testing::kTestClientKeyPem).ok());
  return files;
}

// Starts a client against `address` and returns Start's result.
absl::Status TryRegister(const std::string& address, const ChannelOptions& channel) {
  ControlPlaneClientOptions options;
  options.target = address;
  options.channel = channel;
  options.instance = MakeInstance("tls-client");
  options.cluster_token = kToken;
  options.rpc_timeout = absl::Seconds(2);
  options.initial_backoff = absl::Milliseconds(20);
  options.max_backoff = absl::Milliseconds(100);
  absl::StatusOr<std::unique_ptr<ControlPlaneClient>> client = ControlPlaneClient::Create(options);
  if (!client.ok()) return client.status();
  return (*client)->Start(absl::Milliseconds(500));
}

TEST_CASE("No TLS paths means insecure credentials", "[cpu]") {
  CHECK(MakeServerCredentials(TlsPaths{}).ok());
  CHECK(MakeChannelCredentials(TlsPaths{}).ok());
  CHECK_FALSE(TlsPaths{}.enabled());
}

TEST_CASE("TLS configuration errors name the key and the file", "[cpu]") {
  const PemFiles files = WritePemFiles();
  const std::string missing = scd::testing::TempDir() + "/missing.pem";

  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> server =
      MakeServerCredentials(TlsPaths{"", missing, files.server_key});
  REQUIRE(server.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(server.status().message()), Catch::Contains("cert"));
  CHECK_THAT(std::string(server.status().message()), Catch::Contains(missing));

  server = MakeServerCredentials(TlsPaths{missing, files.server_cert, files.server_key});
  REQUIRE(server.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(server.status().message()), Catch::Contains("ca_cert"));

  server = MakeServerCredentials(TlsPaths{"", files.server_cert, ""});
  REQUIRE(server.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(server.status().message()), Catch::Contains("without a key"));

  server = MakeServerCredentials(TlsPaths{files.ca, "", ""});
  REQUIRE(server.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(server.status().message()), Catch::Contains("needs cert and key"));

  const std::string not_pem = scd::testing::TempDir() + "/not.pem";
  REQUIRE(WriteFileAtomically(not_pem, "hello").ok());
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> channel =
      MakeChannelCredentials(TlsPaths{not_pem, "", ""});
  REQUIRE(channel.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(channel.status().message()), Catch::Contains("not PEM"));

  channel = MakeChannelCredentials(TlsPaths{"", "", files.client_key});
  REQUIRE(channel.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(channel.status().message()), Catch::Contains("without a cert"));

  CHECK(MakeChannel("", ChannelOptions{}).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("A TLS control plane admits clients that trust its CA", "[cpu]") {
  const PemFiles files = WritePemFiles();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(TlsPaths{"", files.server_cert, files.server_key});
  REQUIRE(credentials.ok());
  auto server = ControlPlaneServer::Start(MakeRegistryOptions(), "127.0.0.1:0", *credentials);

  ChannelOptions tls;
  tls.tls.ca_cert = files.ca;
  tls.tls_server_name = "localhost";
  absl::Status status = TryRegister(server->address(), tls);
  INFO(status.ToString());
  CHECK(status.ok());

  // Plaintext against TLS never gets through.
  status = TryRegister(server->address(), ChannelOptions{});
  CHECK(status.code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("Mutual TLS refuses a client without a certificate", "[cpu]") {
  const PemFiles files = WritePemFiles();
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(TlsPaths{files.ca, files.server_cert, files.server_key});
  REQUIRE(credentials.ok());
  auto server = ControlPlaneServer::Start(MakeRegistryOptions(), "127.0.0.1:0", *credentials);

  ChannelOptions anonymous;
  anonymous.tls.ca_cert = files.ca;
  anonymous.tls_server_name = "localhost";
  CHECK(TryRegister(server->address(), anonymous).code() == absl::StatusCode::kUnavailable);

  ChannelOptions with_cert = anonymous;
  with_cert.tls.cert = files.client_cert;
  with_cert.tls.key = files.client_key;
  absl::Status status = TryRegister(server->address(), with_cert);
  INFO(status.ToString());
  CHECK(status.ok());
}

TEST_CASE("Status translation keeps code and message", "[cpu]") {
  const absl::Status denied = absl::PermissionDeniedError("no token");
  const grpc::Status grpc_denied = ToGrpcStatus(denied);
  CHECK(grpc_denied.error_code() == grpc::StatusCode::PERMISSION_DENIED);
  CHECK(grpc_denied.error_message() == "no token");
  CHECK(FromGrpcStatus(grpc_denied) == denied);
  CHECK(ToGrpcStatus(absl::OkStatus()).ok());
  CHECK(FromGrpcStatus(grpc::Status::OK).ok());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code), "m");
    CHECK(FromGrpcStatus(ToGrpcStatus(status)) == status);
  }
  // 20 is outside google.rpc.Code but inside the enum's range (values up to 31 are valid).
  CHECK(FromGrpcStatus(grpc::Status(static_cast<grpc::StatusCode>(20), "odd")).code() ==
        absl::StatusCode::kUnknown);
}

}  // namespace
}  // namespace scd::rpc
