#include <fmt/format.h>

#include <string>

#include "common/log.h"
#include "common/random.h"
#include "nexus/bg_threads.h"
#include "nexus/nexus_impl.h"
#include "nexus/rpc_endpoint.h"
#include "nexus/sm_thread.h"

namespace rpc {

Nexus::Nexus(const NexusConfig& config) : impl_(std::make_unique<detail::NexusImpl>(config)) {}
Nexus::~Nexus() = default;

Result<void> Nexus::register_handler(ReqType req_type, ReqHandler handler, HandlerMode mode) {
  return impl_->register_handler(req_type, std::move(handler), mode);
}
Result<void> Nexus::register_coroutine_handler(ReqType req_type, ReqHandler spawner) {
  return impl_->register_handler(req_type, std::move(spawner), HandlerMode::kForeground,
                                 /*keeps_request=*/true);
}

const std::string& Nexus::uri() const { return impl_->uri(); }

NexusStats Nexus::stats() const { return impl_->sm_stats().snapshot(); }

namespace detail {

NexusImpl::NexusImpl(const NexusConfig& config) : config_(config) {
  auto addr = parse_uri(config.uri, /*allow_port_zero=*/true);
  if (!addr) throw Error("Nexus: " + addr.error());
  if (addr->ipv4 == 0) {
    throw Error(
        fmt::format("Nexus: URI '{}' names no host; give the IPv4 address peers reach "
                    "this process at (it is also the datapath address)",
                    config.uri));
  }
  if (config.sm_retry_ms == 0 || config.sm_timeout_ms < config.sm_retry_ms) {
    throw Error("Nexus: need 0 < sm_retry_ms <= sm_timeout_ms");
  }
  if (config.heartbeat_interval_ms == 0 ||
      config.failure_timeout_ms < 2 * config.heartbeat_interval_ms) {
    throw Error("Nexus: need 0 < 2 * heartbeat_interval_ms <= failure_timeout_ms");
  }
  addr_ = *addr;
  do {
    incarnation_ = random_u64() & kIncarnationMask;
  } while (incarnation_ == 0);
  sm_thread_ = std::make_unique<SmThread>(
      *this, addr_,
      SmThreadConfig{config.sm_retry_ms, config.sm_timeout_ms, config.heartbeat_interval_ms,
                     config.failure_timeout_ms, incarnation_});
  addr_.port = sm_thread_->bound_port();
  uri_ = addr_.to_string();
  if (config.num_bg_threads > 0) bg_threads_ = std::make_unique<BgThreads>(config.num_bg_threads);
}

NexusImpl::~NexusImpl() {
  // A live Rpc holds a reference to this Nexus and would use it after it is
  // freed (its destructor unregisters, its SM calls post to our thread).
  // Fail here, loudly, rather than somewhere far away later.
  std::string live;
  {
    std::lock_guard lock(registry_mutex_);
    for (size_t id = 0; id < rpcs_.size(); id++) {
      if (rpcs_[id] != nullptr) live += (live.empty() ? "" : ", ") + std::to_string(id);
    }
  }
  RPC_CHECK_USAGE(live.empty(),
                  "rpc::Nexus destroyed while Rpc(s) {} still exist; destroy every Rpc before "
                  "its Nexus",
                  live);
  // Stop the SM thread first: it calls into the registry.
  sm_thread_.reset();
  bg_threads_.reset();
}

Result<void> NexusImpl::register_handler(ReqType req_type, ReqHandler handler, HandlerMode mode,
                                         bool keeps_request) {
  if (handlers_frozen_.load()) {
    return Failure{"register_handler: handlers must be registered before any Rpc is created"};
  }
  if (!handler) return Failure{"register_handler: empty handler"};
  if (handlers_[req_type].registered) {
    return Failure{
        fmt::format("register_handler: request type {} already has a handler", req_type)};
  }
  if (mode == HandlerMode::kBackground && config_.num_bg_threads == 0) {
    return Failure{"register_handler: background mode needs NexusConfig::num_bg_threads > 0"};
  }
  handlers_[req_type] = HandlerEntry{std::move(handler), mode, true, keeps_request};
  return {};
}

const std::array<HandlerEntry, 256>& NexusImpl::freeze_handlers() {
  handlers_frozen_.store(true);
  return handlers_;
}

Result<void> NexusImpl::register_rpc(RpcId id, RpcEndpoint* rpc) {
  if (id == kInvalidRpcId) return Failure{"rpc_id 255 is reserved"};
  std::lock_guard lock(registry_mutex_);
  if (rpcs_[id] != nullptr) return Failure{fmt::format("rpc_id {} is already in use", id)};
  rpcs_[id] = rpc;
  return {};
}

void NexusImpl::unregister_rpc(RpcId id) {
  std::lock_guard lock(registry_mutex_);
  rpcs_[id] = nullptr;
}

bool NexusImpl::deliver_to_rpc(RpcId id, const SmMsg& msg, const NetAddr& from) {
  std::lock_guard lock(registry_mutex_);
  RpcEndpoint* rpc = rpcs_[id];
  if (rpc == nullptr) return false;
  rpc->sm_deliver(msg, from);
  return true;
}

void NexusImpl::broadcast_remote_failure(const NetAddr& addr, uint64_t incarnation) {
  std::lock_guard lock(registry_mutex_);
  for (RpcEndpoint* rpc : rpcs_) {
    if (rpc != nullptr) rpc->remote_failed(addr, incarnation);
  }
}

void NexusImpl::add_remote(const NetAddr& remote, uint64_t incarnation) {
  sm_thread_->add_remote(remote, incarnation);
}
void NexusImpl::release_remote(const NetAddr& remote) { sm_thread_->release_remote(remote); }

void NexusImpl::sm_send_request(const SmMsg& msg, const NetAddr& to) {
  sm_thread_->send_request(msg, to);
}

void NexusImpl::sm_send_response(const SmMsg& msg, const NetAddr& to) {
  sm_thread_->send_response(msg, to);
}

void NexusImpl::sm_send_session_reset(const SmMsg& msg, const NetAddr& to) {
  sm_thread_->send_owned_request(msg, to);
}

void NexusImpl::sm_abandon_connect(uint64_t token) { sm_thread_->abandon_connect(token); }

const SmThreadStats& NexusImpl::sm_stats() const { return sm_thread_->stats(); }

void NexusImpl::submit_background(const BgWork& work) { bg_threads_->submit(work); }

}  // namespace detail
}  // namespace rpc
