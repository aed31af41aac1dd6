// PeerAuthenticator: who may call a daemon's gRPC services. With mutual TLS (a server TLS
// config with `ca`), a caller must present a certificate that chains to that CA, the cluster's
// (per-daemon certificates, scripts/make_test_ca.sh for tests); a Decode call must also carry
// the cluster token (cluster_token.h).
//
// Why the certificate is verified per call rather than in the TLS handshake: a handshake that
// fails never reaches the application, so a refused peer would leave no log line and no count.
// The handshake therefore requests the client's certificate without judging it (TLS still
// proves the client holds its key: CertificateVerify), and every service checks it with Check
// before it reads the request, against the same CA with OpenSSL's chain verification (expiry,
// signatures, CA constraints, client-auth purpose). A call that fails gets UNAUTHENTICATED
// and is logged and counted by the service's RefusalLog with the peer's address.
//
// Thread-safe; Check takes no lock.
#ifndef SCD_COMMON_RPC_PEER_AUTH_H_
#define SCD_COMMON_RPC_PEER_AUTH_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/daemon/refusal_log.h"
#include "common/rpc/credentials.h"

struct x509_store_st;  // OpenSSL's X509_STORE

namespace scd::rpc {

// Why a call was refused: the RefusalLog's reason label and the caller's status.
struct PeerRefusal {
  std::string reason;  // "no_certificate", "untrusted_certificate", "token"
  absl::Status status;
};

class PeerAuthenticator {
 public:
  // `tls` is the server's TLS config (MakeServerCredentials's errors for a bad one); with
  // tls.ca_cert, callers need a certificate it signed. Empty `tls`: a plaintext server whose
  // callers are not checked for certificates.
  static absl::StatusOr<std::unique_ptr<PeerAuthenticator>> Create(const TlsPaths& tls);
  ~PeerAuthenticator();
  PeerAuthenticator(const PeerAuthenticator&) = delete;
  PeerAuthenticator& operator=(const PeerAuthenticator&) = delete;

  // The credentials the server must listen with.
  const std::shared_ptr<grpc::ServerCredentials>& credentials() const { return credentials_; }
  bool requires_certificate() const { return store_ != nullptr; }

  // OK, or why the caller behind `context` is refused: no certificate, or one that does not
  // chain to the CA (the message says why, in OpenSSL's words).
  absl::Status CheckCertificate(const grpc::ServerContext& context, std::string* reason) const;

  // CheckCertificate, then, with a non-empty `cluster_token`, the token in the call's metadata
  // (kClusterTokenMetadata). A refusal is recorded in `refusals` (may be null) and returned as
  // the caller's status.
  grpc::Status Check(const grpc::ServerContext& context, const std::string& cluster_token,
                     daemon::RefusalLog* refusals) const;

 private:
  PeerAuthenticator() = default;
  absl::Status Verify(const std::string& leaf_pem, const std::string& chain_pem) const;

  std::shared_ptr<grpc::ServerCredentials> credentials_;
  ::x509_store_st* store_ = nullptr;  // the CA; null without mutual TLS
};

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_PEER_AUTH_H_
