// The cluster token: the shared secret every daemon of a cluster holds
// (control_plane.cluster_token). A decode daemon presents it at Register and Heartbeat, keys
// its etcd announcement's HMAC with it, and the prefill daemon sends it with every Decode call
// (metadata kClusterTokenMetadata), where the decode daemon checks it.
//
// A config that ships a token ships no secret: a daemon refuses to start with an empty token,
// the configs' example one, or one shorter than kMinClusterTokenBytes (what `openssl rand
// -hex 16` gives), unless control_plane.dev_insecure is set (the demo, the tests, local
// benchmarks on loopback). docs/CONFIG.md, "Securing a cluster".
#ifndef SCD_COMMON_RPC_CLUSTER_TOKEN_H_
#define SCD_COMMON_RPC_CLUSTER_TOKEN_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace scd::rpc {

// gRPC metadata key of the token on Decode calls (lower case, as HTTP/2 requires).
inline constexpr char kClusterTokenMetadata[] = "scd-cluster-token";
// The token of configs/*.yaml, usable for the demo only.
inline constexpr char kExampleClusterToken[] = "scd-dev-cluster-token";
inline constexpr size_t kMinClusterTokenBytes = 32;

// OK when `token` is a usable secret, or when `dev_insecure`. Otherwise FailedPrecondition
// naming control_plane.cluster_token, what is wrong with it, and the way out.
absl::Status CheckClusterToken(const std::string& token, bool dev_insecure);

// Whether `presented` equals `expected`, in time independent of where they differ. An empty
// `expected` admits any token (a development cluster, see above).
bool ClusterTokenMatches(const std::string& expected, const std::string& presented);

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_CLUSTER_TOKEN_H_
