// PEM loading and gRPC credential construction for TlsPaths (see credentials.h).
#include "common/rpc/credentials.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/client_interceptor.h>

#include <map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"

namespace scd::rpc {
namespace {

// Reads the PEM file configured under `key`; the error names both.
absl::StatusOr<std::string> ReadPem(const char* key, const std::string& path) {
  absl::StatusOr<std::string> pem = ReadFileToString(path);
  if (!pem.ok()) {
    return absl::Status(pem.status().code(),
                        absl::StrCat("TLS ", key, " file '", path,
                                     "' cannot be read: ", std::string(pem.status().message())));
  }
  if (!absl::StrContains(*pem, "-----BEGIN ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ", key, " file '", path, "' is not PEM (no -----BEGIN line)"));
  }
  return pem;
}

absl::Status CheckCertKeyPair(const TlsPaths& paths) {
  if (paths.cert.empty() != paths.key.empty()) {
    return absl::InvalidArgumentError(
        paths.cert.empty() ? absl::StrCat("TLS key '", paths.key, "' is given without a cert")
                           : absl::StrCat("TLS cert '", paths.cert, "' is given without a key"));
  }
  return absl::OkStatus();
}

// Adds fixed metadata to every call's initial metadata (ChannelOptions::call_metadata).
class MetadataInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(const std::map<std::string, std::string>* metadata)
      : metadata_(metadata) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* sent = methods->GetSendInitialMetadata();
      for (const auto& [key, value] : *metadata_) sent->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const std::map<std::string, std::string>* const metadata_;
};

class MetadataInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(std::map<std::string, std::string> metadata)
      : metadata_(std::move(metadata)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new MetadataInterceptor(&metadata_);
  }

 private:
  const std::map<std::string, std::string> metadata_;  // lives as long as the channel
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsPaths& paths, ClientCertificateCheck check) {
  if (!paths.enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status s = CheckCertKeyPair(paths); !s.ok()) return s;
  if (paths.cert.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS ca_cert '", paths.ca_cert, "' is given but a TLS server also needs cert and key"));
  }
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  absl::StatusOr<std::string> cert = ReadPem("cert", paths.cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("key", paths.key);
  if (!key.ok()) return key.status();
  pair.cert_chain = *std::move(cert);
  pair.private_key = *std::move(key);
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (!paths.ca_cert.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("ca_cert", paths.ca_cert);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
    // Per call: the handshake asks for the certificate (and TLS proves the client holds its
    // key), PeerAuthenticator judges it, so that a refusal reaches the log.
    options.client_certificate_request =
        check == ClientCertificateCheck::kInHandshake
            ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsPaths& paths) {
  if (!paths.enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status s = CheckCertKeyPair(paths); !s.ok()) return s;
  grpc::SslCredentialsOptions options;
  if (!paths.ca_cert.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("ca_cert", paths.ca_cert);
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!paths.cert.empty()) {
    absl::StatusOr<std::string> cert = ReadPem("cert", paths.cert);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("key", paths.key);
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ChannelOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("gRPC target address is empty");
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  // Only the backoff between attempts is shortened. GRPC_ARG_MIN_RECONNECT_BACKOFF_MS is left
  // alone: gRPC also uses it as the minimum connect timeout (20 s), which a slow TLS
  // handshake needs.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.initial_reconnect_backoff)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  if (options.keepalive_time > absl::ZeroDuration()) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, options.keepalive_without_calls ? 1 : 0);
    // The default (2) stops pinging an idle connection after two unanswered-by-data pings,
    // which would leave an idle control-plane channel blind to a dead link.
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  }
  if (!options.tls_server_name.empty() && options.tls.enabled()) {
    args.SetSslTargetNameOverride(options.tls_server_name);
  }
  if (options.call_metadata.empty()) return grpc::CreateCustomChannel(target, *credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<MetadataInterceptorFactory>(options.call_metadata));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, *credentials, args,
                                                                 std::move(interceptors));
}

}  // namespace scd::rpc
