// control_plane.registry and the etcd keys, the same on both daemons: the defaults are the
// members' initial values here, the ranges are checked in ReadRegistryKeys, and the daemons'
// config readers call it (header-only, so that scd_config links no gRPC).
#ifndef SCD_COMMON_RPC_REGISTRY_CONFIG_H_
#define SCD_COMMON_RPC_REGISTRY_CONFIG_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "common/config/option_keys.h"
#include "common/rpc/credentials.h"
#include "common/rpc/etcd_client.h"

namespace scd::rpc {

struct RegistryOptions {
  enum class Kind { kEmbedded, kEtcd };
  // embedded: the prefill daemon is the registry (decode daemons Register with it over gRPC);
  // etcd: every daemon announces itself in etcd and prefill daemons watch it.
  Kind kind = Kind::kEmbedded;
  std::string etcd_endpoints = "http://127.0.0.1:2379";
  std::string etcd_prefix = "/scd";
  std::string etcd_user;      // etcd auth; empty: none
  std::string etcd_password;  // required with etcd_user
  TlsPaths etcd_tls;          // https endpoints

  bool etcd() const { return kind == Kind::kEtcd; }
  absl::StatusOr<EtcdOptions> ToEtcdOptions() const {
    absl::StatusOr<std::vector<std::string>> endpoints = ParseEtcdEndpoints(etcd_endpoints);
    if (!endpoints.ok()) return endpoints.status();
    EtcdOptions o;
    o.endpoints = std::move(*endpoints);
    o.user = etcd_user;
    o.password = etcd_password;
    o.tls = etcd_tls;
    return o;
  }
};

// The registry keys of a `control_plane` mapping.
inline void ReadRegistryKeys(config::ConfigReader& cp, const config::PathKeys& path,
                             RegistryOptions* o) {
  using Kind = RegistryOptions::Kind;
  static constexpr std::pair<std::string_view, Kind> kKinds[] = {{"embedded", Kind::kEmbedded},
                                                                 {"etcd", Kind::kEtcd}};
  config::ReadEnum(cp, "registry", &o->kind, absl::MakeConstSpan(kKinds));
  config::ReadString(cp, "etcd_endpoints", &o->etcd_endpoints);
  config::ReadString(cp, "etcd_prefix", &o->etcd_prefix);
  config::ReadString(cp, "etcd_user", &o->etcd_user);
  config::ReadString(cp, "etcd_password", &o->etcd_password);
  config::ConfigReader tls = cp.Child("etcd_tls");
  config::ReadTlsPaths(tls, path, &o->etcd_tls);
  if (!o->etcd()) return;
  if (absl::StatusOr<EtcdOptions> e = o->ToEtcdOptions(); !e.ok()) {
    cp.AddError("etcd_endpoints", std::string(e.status().message()));
  }
  if (!absl::StartsWith(o->etcd_prefix, "/") || absl::EndsWith(o->etcd_prefix, "/")) {
    cp.AddError("etcd_prefix", "must start with '/' and not end with one (e.g. /scd)");
  }
  if (!o->etcd_user.empty() && o->etcd_password.empty()) {
    cp.AddError("etcd_password", "is required with control_plane.etcd_user");
  }
}

}  // namespace scd::rpc

#endif  // SCD_COMMON_RPC_REGISTRY_CONFIG_H_
