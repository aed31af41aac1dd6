// See peer_auth.h.
#include "common/rpc/peer_auth.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/file_io.h"
#include "common/rpc/cluster_token.h"
#include "common/rpc/status_translation.h"

namespace scd::rpc {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct StackFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct StoreCtxFree {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
using UniqueBio = std::unique_ptr<BIO, BioFree>;
using UniqueX509 = std::unique_ptr<X509, X509Free>;

UniqueBio MemoryBio(const std::string& pem) {
  return UniqueBio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// Every certificate of a PEM text, in order.
std::unique_ptr<STACK_OF(X509), StackFree> ReadCertificates(const std::string& pem) {
  std::unique_ptr<STACK_OF(X509), StackFree> certs(sk_X509_new_null());
  UniqueBio bio = MemoryBio(pem);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(certs.get(), cert);
  }
  ERR_clear_error();  // the read that ended the loop (end of data) leaves an error queued
  return certs;
}

// The first value of an auth-context property; empty when absent.
std::string Property(const grpc::AuthContext& auth, const char* name) {
  const std::vector<grpc::string_ref> values = auth.FindPropertyValues(name);
  if (values.empty()) return "";
  return std::string(values.front().data(), values.front().size());
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerAuthenticator>> PeerAuthenticator::Create(const TlsPaths& tls) {
  std::unique_ptr<PeerAuthenticator> auth(new PeerAuthenticator());
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(tls, ClientCertificateCheck::kPerCall);
  if (!credentials.ok()) return credentials.status();
  auth->credentials_ = *std::move(credentials);
  if (tls.ca_cert.empty()) return auth;
  absl::StatusOr<std::string> pem = ReadFileToString(tls.ca_cert);  // readable: checked above
  if (!pem.ok()) return pem.status();
  auto certs = ReadCertificates(*pem);
  if (sk_X509_num(certs.get()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TLS ca_cert file '", tls.ca_cert, "' holds no certificate OpenSSL can read"));
  }
  auth->store_ = X509_STORE_new();
  for (int i = 0; i < sk_X509_num(certs.get()); ++i) {
    X509_STORE_add_cert(auth->store_, sk_X509_value(certs.get(), i));  // takes a reference
  }
  return auth;
}

PeerAuthenticator::~PeerAuthenticator() {
  if (store_ != nullptr) X509_STORE_free(store_);
}

absl::Status PeerAuthenticator::Verify(const std::string& leaf_pem,
                                       const std::string& chain_pem) const {
  UniqueBio bio = MemoryBio(leaf_pem);
  UniqueX509 leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr) {
    ERR_clear_error();
    return absl::UnauthenticatedError("the client certificate cannot be parsed");
  }
  // The chain the client sent may carry intermediates; they are untrusted until they chain
  // to the CA.
  auto untrusted = ReadCertificates(chain_pem);
  std::unique_ptr<X509_STORE_CTX, StoreCtxFree> ctx(X509_STORE_CTX_new());
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store_, leaf.get(), untrusted.get()) != 1) {
    ERR_clear_error();
    return absl::InternalError("cannot set up certificate verification");
  }
  X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
  if (X509_verify_cert(ctx.get()) == 1) return absl::OkStatus();
  const int error = X509_STORE_CTX_get_error(ctx.get());
  ERR_clear_error();
  char subject[256] = "";
  X509_NAME_oneline(X509_get_subject_name(leaf.get()), subject, sizeof(subject));
  return absl::UnauthenticatedError(
      absl::StrCat("the client certificate (", subject,
                   ") is not one of this cluster's CA: ", X509_verify_cert_error_string(error)));
}

absl::Status PeerAuthenticator::CheckCertificate(const grpc::ServerContext& context,
                                                 std::string* reason) const {
  if (store_ == nullptr) return absl::OkStatus();
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  const std::string leaf =
      auth != nullptr ? Property(*auth, GRPC_X509_PEM_CERT_PROPERTY_NAME) : std::string();
  if (leaf.empty()) {
    *reason = "no_certificate";
    return absl::UnauthenticatedError(
        "no client certificate: this daemon admits callers with a certificate signed by the "
        "cluster's CA (mutual TLS)");
  }
  absl::Status verified = Verify(leaf, Property(*auth, GRPC_X509_PEM_CERT_CHAIN_PROPERTY_NAME));
  if (!verified.ok()) *reason = "untrusted_certificate";
  return verified;
}

grpc::Status PeerAuthenticator::Check(const grpc::ServerContext& context,
                                      const std::string& cluster_token,
                                      daemon::RefusalLog* refusals) const {
  std::string reason;
  absl::Status status = CheckCertificate(context, &reason);
  if (status.ok() && !cluster_token.empty()) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kClusterTokenMetadata);
    const std::string presented =
        it != metadata.end() ? std::string(it->second.data(), it->second.size()) : "";
    if (!ClusterTokenMatches(cluster_token, presented)) {
      reason = "token";
      status = absl::UnauthenticatedError(
          presented.empty() ? "the call carries no cluster token (metadata scd-cluster-token)"
                            : "the call's cluster token does not match this daemon's");
    }
  }
  if (status.ok()) return grpc::Status::OK;
  if (refusals != nullptr) refusals->Refuse(context.peer(), reason, std::string(status.message()));
  return ToGrpcStatus(status);
}

}  // namespace scd::rpc
