// See etcd_client.h.
#include "common/rpc/etcd_client.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/support/channel_arguments.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/rpc/status_translation.h"

namespace scd::rpc {
namespace {

bool MovesOn(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

// etcd refuses a token it does not know (expired, or issued before a restart) this way.
bool TokenRefused(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
         absl::StrContains(s.error_message(), "invalid auth token");
}

absl::Status Named(const grpc::Status& s, const std::string& url) {
  absl::Status st = FromGrpcStatus(s);
  return absl::Status(st.code(), absl::StrCat("etcd at ", url, ": ", st.message()));
}

}  // namespace

std::string EtcdPrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    unsigned char last = static_cast<unsigned char>(end.back());
    if (last < 0xff) {
      end.back() = static_cast<char>(last + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

void EtcdWatchCancel::Cancel() {
  scd::MutexLock lock(&mu_);
  cancelled_ = true;
  if (ctx_ != nullptr) ctx_->TryCancel();
}

bool EtcdWatchCancel::Attach(grpc::ClientContext* ctx) {
  scd::MutexLock lock(&mu_);
  if (cancelled_) return false;
  ctx_ = ctx;
  return true;
}

void EtcdWatchCancel::Detach() {
  scd::MutexLock lock(&mu_);
  ctx_ = nullptr;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(EtcdOptions options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("no etcd endpoint given");
  if (!options.user.empty() && options.password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("control_plane.etcd_password is required with control_plane.etcd_user '",
                     options.user, "'"));
  }
  if (options.rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the etcd call timeout must be positive");
  }
  std::unique_ptr<EtcdClient> client(new EtcdClient(options));
  for (const std::string& url : client->options_.endpoints) {
    absl::string_view rest = url;
    const bool https = absl::ConsumePrefix(&rest, "https://");
    if (!https && !absl::ConsumePrefix(&rest, "http://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", url, "' must start with http:// or https://"));
    }
    absl::ConsumeSuffix(&rest, "/");
    ChannelOptions channel;
    if (https) {
      channel.tls = client->options_.tls;
    } else if (client->options_.tls.enabled()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "control_plane.etcd_tls is set but the etcd endpoint '", url, "' is http://"));
    }
    // etcd refuses pings more often than every 5 s (--grpc-keepalive-min-time) and pings
    // without a call in flight; a watch stream is always in flight on the prefill daemons.
    channel.keepalive_time = absl::Seconds(10);
    channel.keepalive_timeout = absl::Seconds(5);
    channel.keepalive_without_calls = false;
    absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(std::string(rest), channel);
    if (!ch.ok()) return ch.status();
    Endpoint e;
    e.url = url;
    e.channel = *ch;
    e.kv = etcdserverpb::KV::NewStub(e.channel);
    e.lease = etcdserverpb::Lease::NewStub(e.channel);
    e.watch = etcdserverpb::Watch::NewStub(e.channel);
    e.auth = etcdserverpb::Auth::NewStub(e.channel);
    client->endpoints_.push_back(std::move(e));
  }
  return client;
}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[current_.load() % endpoints_.size()].url;
}

void EtcdClient::Advance(size_t from) {
  size_t expected = from;
  current_.compare_exchange_strong(expected, (from + 1) % endpoints_.size());
}

void EtcdClient::Prepare(grpc::ClientContext* ctx, absl::Duration timeout) {
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  scd::MutexLock lock(&token_mu_);
  if (!token_.empty()) ctx->AddMetadata("token", token_);
}

absl::Status EtcdClient::Authenticate(Endpoint& endpoint) {
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.rpc_timeout));
  etcdserverpb::AuthenticateRequest req;
  req.set_name(options_.user);
  req.set_password(options_.password);
  etcdserverpb::AuthenticateResponse resp;
  grpc::Status s = endpoint.auth->Authenticate(&ctx, req, &resp);
  if (!s.ok()) return Named(s, endpoint.url);
  scd::MutexLock lock(&token_mu_);
  token_ = resp.token();
  return absl::OkStatus();
}

absl::Status EtcdClient::Invoke(const Call& call) {
  grpc::Status last;
  std::string last_url;
  bool reauthenticated = false;
  for (size_t tries = 0; tries < endpoints_.size();) {
    const size_t i = current_.load() % endpoints_.size();
    Endpoint& e = endpoints_[i];
    bool need_token;
    {
      scd::MutexLock lock(&token_mu_);
      need_token = !options_.user.empty() && token_.empty();
    }
    if (need_token) {
      absl::Status st = Authenticate(e);
      if (!st.ok()) {
        if (st.code() != absl::StatusCode::kUnavailable &&
            st.code() != absl::StatusCode::kDeadlineExceeded) {
          return st;
        }
        last = ToGrpcStatus(st);
        last_url = e.url;
        Advance(i);
        ++tries;
        continue;
      }
    }
    grpc::ClientContext ctx;
    Prepare(&ctx, options_.rpc_timeout);
    grpc::Status s = call(e, &ctx);
    if (s.ok()) return absl::OkStatus();
    if (!options_.user.empty() && TokenRefused(s) && !reauthenticated) {
      reauthenticated = true;
      scd::MutexLock lock(&token_mu_);
      token_.clear();
      continue;
    }
    if (!MovesOn(s)) return Named(s, e.url);
    last = s;
    last_url = e.url;
    Advance(i);
    ++tries;
  }
  return Named(last, absl::StrCat(last_url, " (no etcd endpoint answered)"));
}

absl::StatusOr<int64_t> EtcdClient::Grant(absl::Duration ttl) {
  etcdserverpb::LeaseGrantRequest req;
  req.set_ttl(std::max<int64_t>(1, absl::ToInt64Seconds(absl::Ceil(ttl, absl::Seconds(1)))));
  etcdserverpb::LeaseGrantResponse resp;
  absl::Status st = Invoke(
      [&](Endpoint& e, grpc::ClientContext* ctx) { return e.lease->LeaseGrant(ctx, req, &resp); });
  if (!st.ok()) return st;
  if (!resp.error().empty())
    return absl::UnavailableError(absl::StrCat("etcd lease grant: ", resp.error()));
  return resp.id();
}

absl::StatusOr<absl::Duration> EtcdClient::KeepAlive(int64_t lease) {
  etcdserverpb::LeaseKeepAliveResponse resp;
  absl::Status st = Invoke([&](Endpoint& e, grpc::ClientContext* ctx) {
    auto stream = e.lease->LeaseKeepAlive(ctx);
    etcdserverpb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    if (!stream->Write(req) || !stream->Read(&resp)) {
      ctx->TryCancel();
      grpc::Status s = stream->Finish();
      return s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream closed") : s;
    }
    stream->WritesDone();
    ctx->TryCancel();  // the server keeps the stream open; we are done with it
    stream->Finish();
    return grpc::Status::OK;
  });
  if (!st.ok()) return st;
  if (resp.ttl() <= 0) return absl::NotFoundError(absl::StrCat("etcd lease ", lease, " is gone"));
  return absl::Seconds(resp.ttl());
}

absl::Status EtcdClient::Revoke(int64_t lease) {
  etcdserverpb::LeaseRevokeRequest req;
  req.set_id(lease);
  etcdserverpb::LeaseRevokeResponse resp;
  return Invoke(
      [&](Endpoint& e, grpc::ClientContext* ctx) { return e.lease->LeaseRevoke(ctx, req, &resp); });
}

absl::Status EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  etcdserverpb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  etcdserverpb::PutResponse resp;
  return Invoke([&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->Put(ctx, req, &resp); });
}

absl::Status EtcdClient::Delete(const std::string& key) {
  etcdserverpb::DeleteRangeRequest req;
  req.set_key(key);
  etcdserverpb::DeleteRangeResponse resp;
  return Invoke(
      [&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->DeleteRange(ctx, req, &resp); });
}

absl::StatusOr<EtcdRange> EtcdClient::GetPrefix(const std::string& prefix) {
  etcdserverpb::RangeRequest req;
  req.set_key(prefix);
  req.set_range_end(EtcdPrefixEnd(prefix));
  etcdserverpb::RangeResponse resp;
  absl::Status st =
      Invoke([&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->Range(ctx, req, &resp); });
  if (!st.ok()) return st;
  EtcdRange out;
  out.revision = resp.header().revision();
  for (const mvccpb::KeyValue& kv : resp.kvs()) {
    out.kvs.push_back({kv.key(), kv.value(), kv.mod_revision(), kv.lease()});
  }
  return out;
}

absl::Status EtcdClient::Watch(const std::string& prefix, int64_t start_revision,
                               const std::function<void(const std::vector<EtcdEvent>&)>& on_events,
                               EtcdWatchCancel* cancel) {
  const size_t i = current_.load() % endpoints_.size();
  Endpoint& e = endpoints_[i];
  grpc::ClientContext ctx;
  {
    scd::MutexLock lock(&token_mu_);
    if (!token_.empty()) ctx.AddMetadata("token", token_);
  }
  // Ends the stream when this member loses its leader, instead of going silent.
  ctx.AddMetadata("hasleader", "true");
  if (!cancel->Attach(&ctx)) return absl::CancelledError("watch cancelled");
  struct Detach {
    EtcdWatchCancel* c;
    ~Detach() { c->Detach(); }
  } detach{cancel};
  auto stream = e.watch->Watch(&ctx);
  etcdserverpb::WatchRequest req;
  auto* create = req.mutable_create_request();
  create->set_key(prefix);
  create->set_range_end(EtcdPrefixEnd(prefix));
  create->set_start_revision(start_revision);
  if (!stream->Write(req)) {
    grpc::Status s = stream->Finish();
    Advance(i);
    return Named(s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch refused") : s, e.url);
  }
  etcdserverpb::WatchResponse resp;
  std::vector<EtcdEvent> batch;
  while (stream->Read(&resp)) {
    if (resp.compact_revision() > 0) {
      ctx.TryCancel();
      stream->Finish();
      return absl::OutOfRangeError(absl::StrCat("etcd watch: revision ", start_revision,
                                                " was compacted (now ", resp.compact_revision(),
                                                ")"));
    }
    if (resp.canceled()) {
      ctx.TryCancel();
      stream->Finish();
      Advance(i);
      return absl::UnavailableError(
          absl::StrCat("etcd at ", e.url, " cancelled the watch: ", resp.cancel_reason()));
    }
    batch.clear();
    for (const mvccpb::Event& ev : resp.events()) {
      EtcdEvent out;
      out.type =
          ev.type() == mvccpb::Event::DELETE ? EtcdEvent::Type::kDelete : EtcdEvent::Type::kPut;
      out.key = ev.kv().key();
      out.value = ev.kv().value();
      out.revision = ev.kv().mod_revision();
      batch.push_back(std::move(out));
    }
    if (!batch.empty()) on_events(batch);
  }
  grpc::Status s = stream->Finish();
  if (s.error_code() == grpc::StatusCode::CANCELLED) return absl::CancelledError("watch cancelled");
  Advance(i);
  return Named(s.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "watch stream ended") : s,
               e.url);
}

}  // namespace scd::rpc
