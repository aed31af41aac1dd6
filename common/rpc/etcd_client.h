// EtcdClient: the few etcd v3 calls the cluster registry needs (common/rpc/etcd_registry.h),
// over etcd's own gRPC API (proto/etcd/rpc.proto): Put/Range/DeleteRange on keys, leases
// (grant, keep-alive, revoke), and watching a key prefix.
//
// Endpoints: one channel per endpoint ("http://host:port", or "https://..." with TLS). Calls go
// to the current endpoint; one that answers UNAVAILABLE or DEADLINE_EXCEEDED (member down,
// partitioned, or without a leader) moves the client to the next and the call is tried there,
// each endpoint once per call. So losing a member of a 3-member cluster costs one failed try.
//
// Auth: with a user, the client authenticates (Auth/Authenticate) and sends the token as the
// "token" metadata on every call; a call refused for an expired or unknown token
// authenticates again and is retried once. TLS: https endpoints use `tls` (ca for the
// server's certificate, cert/key for client-certificate auth).
//
// Thread-safe.
#ifndef SCD_COMMON_RPC_ETCD_CLIENT_H_
#define SCD_COMMON_RPC_ETCD_CLIENT_H_

#include <grpcpp/client_context.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/mutex.h"
#include "common/rpc/credentials.h"
#include "common/rpc/etcd_endpoints.h"
#include "proto/etcd/rpc.grpc.pb.h"

namespace scd::rpc {

struct EtcdOptions {
  // "http://host:port" or "https://host:port"; at least one.
  std::vector<std::string> endpoints;
  // etcd auth (empty user: none). The password comes from the config or its override.
  std::string user;
  std::string password;
  // For https endpoints: the CA of etcd's server certificate, and this client's certificate
  // and key when etcd requires client certificates (--client-cert-auth).
  TlsPaths tls;
  // Deadline of each unary call and of each keep-alive exchange.
  absl::Duration rpc_timeout = absl::Seconds(2);
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

struct EtcdEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  std::string key;
  std::string value;  // empty for kDelete
  int64_t revision = 0;
};

struct EtcdRange {
  std::vector<EtcdKeyValue> kvs;
  int64_t revision = 0;  // the store's revision when read: watch from revision + 1
};

// Lets another thread end a blocking Watch.
class EtcdWatchCancel {
 public:
  void Cancel();

 private:
  friend class EtcdClient;
  // False when Cancel already ran (the watch must not start).
  bool Attach(grpc::ClientContext* ctx);
  void Detach();

  scd::Mutex mu_;
  grpc::ClientContext* ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class EtcdClient {
 public:
  // InvalidArgument for no endpoints, a malformed one, or auth without a password; TLS file
  // errors from MakeChannelCredentials. Contacts nobody.
  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(EtcdOptions options);

  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // A lease of `ttl` (whole seconds, at least 1): its id.
  absl::StatusOr<int64_t> Grant(absl::Duration ttl);
  // Renews the lease: the TTL granted. NotFound when the lease is gone (expired or revoked).
  absl::StatusOr<absl::Duration> KeepAlive(int64_t lease);
  absl::Status Revoke(int64_t lease);

  // `lease` 0: the key lives until deleted.
  absl::Status Put(const std::string& key, const std::string& value, int64_t lease = 0);
  absl::Status Delete(const std::string& key);
  // Every key starting with `prefix`, sorted by key, and the store's revision.
  absl::StatusOr<EtcdRange> GetPrefix(const std::string& prefix);

  // Watches every key starting with `prefix` from `start_revision` (> 0), calling `on_events`
  // for each batch on this thread, until the stream ends: Cancelled when `cancel` ran, the
  // reason otherwise (member lost, leader lost, revision compacted: OutOfRange). Never OK.
  absl::Status Watch(const std::string& prefix, int64_t start_revision,
                     const std::function<void(const std::vector<EtcdEvent>&)>& on_events,
                     EtcdWatchCancel* cancel);

  // The endpoint calls go to now.
  std::string current_endpoint() const;

 private:
  struct Endpoint {
    std::string url;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<etcdserverpb::KV::Stub> kv;
    std::unique_ptr<etcdserverpb::Lease::Stub> lease;
    std::unique_ptr<etcdserverpb::Watch::Stub> watch;
    std::unique_ptr<etcdserverpb::Auth::Stub> auth;
  };
  using Call = std::function<grpc::Status(Endpoint&, grpc::ClientContext*)>;

  explicit EtcdClient(EtcdOptions options) : options_(std::move(options)) {}
  // Runs `call` with a deadline and the auth token, moving on to the next endpoint on
  // UNAVAILABLE/DEADLINE_EXCEEDED and authenticating again on an auth-token refusal.
  absl::Status Invoke(const Call& call);
  absl::Status Authenticate(Endpoint& endpoint);
  void Prepare(grpc::ClientContext* ctx, absl::Duration timeout);
  void Advance(size_t from);

  const EtcdOptions options_;
  std::vector<Endpoint> endpoints_;
  std::atomic<size_t> current_{0};
  mutable scd::Mutex token_mu_;
  std::string token_ ABSL_GUARDED_BY(token_mu_);
};

// "<prefix>" with the smallest key after every key that starts with it (etcd's range_end for
// a prefix).
std::string EtcdPrefixEnd(const std::string& prefix);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_ETCD_CLIENT_H_
