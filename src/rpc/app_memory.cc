// Application memory: ranges of the application's own memory registered
// with the Rpc's transport, and MsgBuffer views of them that travel as
// requests and responses without a copy by the engine (docs/api.md,
// "Application memory"). A view's data is the application's; its packet
// headers are a small block from the Rpc's allocator.
//
// The engine counts the views it holds per registration (hold_view /
// release_view): deregistering memory it still uses, or using a view of
// memory deregistered, aborts with a message, since either would let the
// NIC or a peer touch memory the application has taken back.
#include <fmt/format.h>

#include <mutex>

#include "common/log.h"
#include "rpc/rpc_impl.h"

namespace rpc {

Result<AppMemory> Rpc::register_memory(void* addr, size_t len, AppMemoryOptions options) {
  return impl_->register_memory(addr, len, std::move(options));
}
Result<void> Rpc::deregister_memory(const AppMemory& mem) { return impl_->deregister_memory(mem); }
MsgBuffer Rpc::app_msg_buffer(const AppMemory& mem, void* data, size_t size) noexcept {
  impl_->check_owner_or_background("app_msg_buffer");
  return impl_->app_msg_buffer(mem, data, size);
}
size_t Rpc::app_memory_in_flight(const AppMemory& mem) const {
  return impl_->app_memory_in_flight(mem);
}

namespace detail {

namespace {

// The lock of the registration table, taken only when background threads
// may read it (app_msg_buffer from a background handler).
std::unique_lock<std::mutex> maybe_lock(std::mutex& m, bool locking) {
  return locking ? std::unique_lock<std::mutex>(m) : std::unique_lock<std::mutex>();
}

}  // namespace

Result<AppMemory> RpcImpl::register_memory(void* addr, size_t len, AppMemoryOptions options) {
  RPC_CHECK_OWNER("register_memory");
  if (addr == nullptr || len == 0) {
    return Failure{"register_memory: the range is empty (null address or length 0)"};
  }
  auto reg = transport_->register_memory(addr, len);
  if (!reg) {
    return Failure{fmt::format("register_memory: the {} transport refused [{}, +{}): {}",
                               transport_name_, addr, len, reg.error())};
  }
  const auto lock = maybe_lock(app_mutex_, app_locking_);
  AppRegion* region;
  if (!free_app_regions_.empty()) {
    region = app_regions_[free_app_regions_.back()].get();
    free_app_regions_.pop_back();
  } else {
    app_regions_.push_back(std::make_unique<AppRegion>());
    region = app_regions_.back().get();
    region->index = app_regions_.size() - 1;
  }
  region->base = static_cast<uint8_t*>(addr);
  region->len = len;
  region->reg = *reg;
  region->live = true;
  region->in_flight = 0;
  region->on_release = std::move(options.on_release);
  return AppMemoryAccess::make(*region);
}

// The registration a handle names, if it is a live one of this Rpc.
AppRegion* RpcImpl::own_app_region(const AppMemory& mem) const {
  AppRegion* region = AppMemoryAccess::region(mem);
  if (region == nullptr || region->index >= app_regions_.size() ||
      app_regions_[region->index].get() != region || !region->live ||
      region->gen != AppMemoryAccess::gen(mem)) {
    return nullptr;
  }
  return region;
}

Result<void> RpcImpl::deregister_memory(const AppMemory& mem) {
  RPC_CHECK_OWNER("deregister_memory");
  AppRegion* region = own_app_region(mem);
  if (region == nullptr) {
    return Failure{
        "deregister_memory: not a live registration of this Rpc (deregistered "
        "already, or another Rpc's)"};
  }
  RPC_CHECK_USAGE(region->in_flight == 0,
                  "Rpc {}: deregister_memory of application memory [{}, +{}) while the engine "
                  "still holds {} view(s) of it: a request or response buffer of a request "
                  "whose continuation has not run, or a response the server keeps until the "
                  "client's next request in its slot (or the session's end), which a peer may "
                  "be reading. Wait until app_memory_in_flight() is 0 (or on_release)",
                  config_.rpc_id, static_cast<const void*>(region->base), region->len,
                  region->in_flight);
  transport_->deregister_memory(region->reg);
  const auto lock = maybe_lock(app_mutex_, app_locking_);
  region->live = false;
  // Views and handles made under the old generation are stale from now
  // on, also once the entry is reused (0 is kept for "not a view").
  if (++region->gen == 0) region->gen = 1;
  region->on_release = nullptr;
  free_app_regions_.push_back(region->index);
  return {};
}

MsgBuffer RpcImpl::app_msg_buffer(const AppMemory& mem, void* data, size_t size) noexcept {
  AppRegion* region;
  {
    const auto lock = maybe_lock(app_mutex_, app_locking_);
    region = own_app_region(mem);
    RPC_CHECK_USAGE(region != nullptr,
                    "Rpc {}: app_msg_buffer on application memory that is not a live "
                    "registration of this Rpc (deregistered, or another Rpc's)",
                    config_.rpc_id);
    const auto* p = static_cast<const uint8_t*>(data);
    RPC_CHECK_USAGE(p >= region->base && p <= region->base + region->len &&
                        size <= static_cast<size_t>(region->base + region->len - p),
                    "Rpc {}: app_msg_buffer of [{}, +{}) outside its registered memory [{}, +{})",
                    config_.rpc_id, data, size, static_cast<const void*>(region->base),
                    region->len);
  }
  if (size > max_msg_size_) {
    RPC_LOG_ERROR("Rpc {}: app_msg_buffer of {} bytes: above max_msg_size() ({})", config_.rpc_id,
                  size, max_msg_size_);
    return MsgBuffer();
  }
  const Allocation hdrs =
      allocator_->alloc(MsgBufferAccess::view_hdr_bytes(size, caps_.max_data_per_pkt));
  if (hdrs.buf == nullptr) [[unlikely]] {
    RPC_LOG_ERROR("Rpc {}: app_msg_buffer: no memory for the view's packet headers ({})",
                  config_.rpc_id, allocator_->last_failure_text());
    return MsgBuffer();
  }
  return MsgBufferAccess::make_app_view(hdrs, *region, static_cast<uint8_t*>(data), size,
                                        caps_.max_data_per_pkt);
}

size_t RpcImpl::app_memory_in_flight(const AppMemory& mem) const {
  RPC_CHECK_OWNER("app_memory_in_flight");
  const AppRegion* region = own_app_region(mem);
  return region != nullptr ? region->in_flight : 0;
}

void RpcImpl::hold_view(const MsgBuffer& m, const char* what) {
  AppRegion& region = MsgBufferAccess::app_region(m);
  RPC_CHECK_USAGE(region.index < app_regions_.size() &&
                      app_regions_[region.index].get() == &region && region.live &&
                      region.gen == MsgBufferAccess::app_gen(m),
                  "Rpc {}: {} with a view of application memory that is not registered with "
                  "this Rpc any more (deregister_memory ended it) or never was (another Rpc's)",
                  config_.rpc_id, what);
  region.in_flight++;
}

void RpcImpl::release_view(const MsgBuffer& m) {
  AppRegion& region = MsgBufferAccess::app_region(m);
  RPC_ASSERT(region.in_flight > 0 && region.gen == MsgBufferAccess::app_gen(m),
             "a view the engine gives back was held, under a live registration");
  region.in_flight--;
  if (region.on_release) region.on_release(m.data(), m.max_size());
}

void RpcImpl::free_dyn_resp_slow(ServerSlot& slot) {
  if (slot.resp_budget_bytes != 0) {  // the response's charge (apply_response)
    slot.session->host->budget_bytes -= slot.resp_budget_bytes;
    rx_budget_used_bytes_ -= slot.resp_budget_bytes;
    slot.resp_budget_bytes = 0;
  }
  if (!slot.dyn_resp.valid()) return;
  if (slot.dyn_resp.is_app_view()) release_view(slot.dyn_resp);
  free_msg_buffer(slot.dyn_resp);
}

// ~Rpc, once no session holds a view: what the application left registered.
void RpcImpl::deregister_all_app_memory() {
  for (auto& region : app_regions_) {
    if (!region->live) continue;
    RPC_ASSERT(region->in_flight == 0, "~Rpc gives back every view before deregistering");
    transport_->deregister_memory(region->reg);
    region->live = false;
  }
}

}  // namespace detail
}  // namespace rpc
