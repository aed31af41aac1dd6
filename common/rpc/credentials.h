// TLS for every gRPC endpoint (control plane, Decode, Generation), from PEM paths in the
// daemons' configs. TLS turns on when any path is given and stays off (insecure credentials)
// when none is. A
// partial or unreadable configuration is an error naming the key and the file, found at
// start-up rather than as a vague handshake failure on the first call.
//
// Mutual TLS: a server given `ca_cert` requires client certificates signed by it (verified in
// the handshake, or per call: ClientCertificateCheck); a channel given `cert` and `key`
// presents them.
#ifndef SCD_COMMON_RPC_CREDENTIALS_H_
#define SCD_COMMON_RPC_CREDENTIALS_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace scd::rpc {

struct TlsPaths {
  // PEM of the certificate authority for the peer. Server: clients must present a certificate
  // it signed (mutual TLS). Channel: the root of trust for the server's certificate (empty:
  // the system's roots).
  std::string ca_cert;
  // This side's PEM certificate chain. Required on a TLS server; optional on a channel.
  std::string cert;
  // The PEM private key for `cert`; given exactly when `cert` is.
  std::string key;

  bool enabled() const { return !ca_cert.empty() || !cert.empty() || !key.empty(); }
};

// How a server given `ca_cert` treats client certificates: verified in the TLS handshake, or
// only requested there and verified per call by the services (PeerAuthenticator, which logs
// and counts each refusal; the daemons' servers).
enum class ClientCertificateCheck { kInHandshake, kPerCall };

// Insecure credentials when `paths` is empty; TLS otherwise. InvalidArgument for a partial
// configuration (cert without key, a server without cert), NotFound for a missing file,
// InvalidArgument for a file that is not PEM; every message names the key and the path.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsPaths& paths, ClientCertificateCheck check = ClientCertificateCheck::kInHandshake);
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsPaths& paths);

struct ChannelOptions {
  TlsPaths tls;
  // Overrides the host name checked against the server's certificate (tests, or addressing a
  // server by IP whose certificate names a host). Empty: the target's host.
  std::string tls_server_name;
  // gRPC's reconnect backoff. Its default (1 s doubling to 120 s) would keep a channel
  // failing for minutes after a restarted peer is back; the control plane wants seconds.
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(2);
  // Largest message either way (inline SCD payloads can exceed gRPC's 4 MB default).
  int max_message_bytes = 64 << 20;
  // HTTP/2 keepalive: a PING after `keepalive_time` without traffic, and the connection is
  // declared dead (its calls fail UNAVAILABLE, the channel reconnects) when no answer comes
  // within `keepalive_timeout` (gRPC also sets TCP_USER_TIMEOUT to it). Pings go out even
  // without calls in flight. Without keepalive a stream whose link died waits for its
  // deadline, and an idle channel keeps a dead connection until the kernel gives up
  // (~15 min). Servers must accept the rate (GrpcServerOptions::min_ping_interval).
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(10);
  // Whether pings go out while no call is in flight. etcd's server refuses them (a Go gRPC
  // server without PermitWithoutStream answers them with GOAWAY "too_many_pings").
  bool keepalive_without_calls = true;
  // Metadata added to every call on the channel (the cluster token on Decode calls). Sent on
  // plaintext channels too, unlike gRPC's call credentials.
  std::map<std::string, std::string> call_metadata;
};

// A channel to `target` ("host:port") with the credentials and settings of `options`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& target,
                                                           const ChannelOptions& options);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_CREDENTIALS_H_
