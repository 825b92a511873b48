// The in-process `fake` transport. See fake_transport.h for the contract.
#include "transport/fake/fake_transport.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "common/log.h"
#include "common/random.h"
#include "librpc/msg_buffer.h"

namespace rpc::detail {
namespace {

// "FAKE" in ASCII: marks routing info filled by this transport, so info from
// another transport (or garbage) is rejected instead of misrouted.
constexpr uint32_t kRoutingMagic = 0x46414B45;
constexpr size_t kRoutingEndpointOffset = 0;
constexpr size_t kRoutingMagicOffset = 4;
static_assert(kRoutingMagicOffset + sizeof(uint32_t) <= RoutingInfo::kMaxBytes);

// Smallest MTU worth testing with: a header plus a useful amount of data.
constexpr size_t kMinMtuBytes = kPktHeaderBytes + 64;
constexpr size_t kMaxMtuBytes = 65535;

uint32_t read_u32(const RoutingInfo& info, size_t offset) {
  uint32_t value;
  std::memcpy(&value, info.bytes.data() + offset, sizeof(value));
  return value;
}

void write_u32(RoutingInfo& info, size_t offset, uint32_t value) {
  std::memcpy(info.bytes.data() + offset, &value, sizeof(value));
}

}  // namespace

// --- FakeNetwork ---

FakeNetwork& FakeNetwork::instance() {
  static FakeNetwork network;
  return network;
}

void FakeNetwork::set_filter(Filter filter) {
  std::lock_guard lock(mutex_);
  filter_ = std::move(filter);
}

void FakeNetwork::reset() {
  std::lock_guard lock(mutex_);
  // Inboxes and regions belong to live transports; only test scripting goes.
  filter_ = nullptr;
  capture_ = false;
  captured_.clear();
  held_.clear();
  hold_bulk_ = false;
  refuse_exposures_ = false;
}

void FakeNetwork::set_capture(bool enabled) {
  std::lock_guard lock(mutex_);
  capture_ = enabled;
}

std::vector<FakePacket> FakeNetwork::captured() {
  std::lock_guard lock(mutex_);
  return captured_;
}

void FakeNetwork::clear_captured() {
  std::lock_guard lock(mutex_);
  captured_.clear();
}

size_t FakeNetwork::num_held() {
  std::lock_guard lock(mutex_);
  return held_.size();
}

void FakeNetwork::release_held(bool reverse) {
  std::lock_guard lock(mutex_);
  if (reverse) std::reverse(held_.begin(), held_.end());
  for (FakePacket& packet : held_) deliver_locked(std::move(packet));
  held_.clear();
}

uint32_t FakeNetwork::attach(size_t ring_size) {
  std::lock_guard lock(mutex_);
  // Endpoint 0 means "no endpoint" in routing info, so skip it on wrap.
  if (next_endpoint_ == 0) next_endpoint_ = 1;
  const uint32_t endpoint = next_endpoint_++;
  inboxes_[endpoint].capacity = ring_size;
  return endpoint;
}

void FakeNetwork::detach(uint32_t endpoint) {
  std::lock_guard lock(mutex_);
  inboxes_.erase(endpoint);
}

void FakeNetwork::send(FakePacket packet) {
  std::lock_guard lock(mutex_);
  if (capture_) captured_.push_back(packet);
  const FakeVerdict verdict = filter_ ? filter_(packet) : FakeVerdict::kDeliver;
  switch (verdict) {
    case FakeVerdict::kDeliver:
      deliver_locked(std::move(packet));
      break;
    case FakeVerdict::kDrop:
      break;
    case FakeVerdict::kHold:
      held_.push_back(std::move(packet));
      break;
    case FakeVerdict::kDuplicate:
      deliver_locked(packet);
      deliver_locked(std::move(packet));
      break;
  }
}

size_t FakeNetwork::receive(uint32_t endpoint, size_t max, std::vector<FakePacket>& out,
                            uint64_t& ring_full_drops) {
  std::lock_guard lock(mutex_);
  out.clear();
  auto it = inboxes_.find(endpoint);
  if (it == inboxes_.end()) return 0;
  ring_full_drops = it->second.ring_full_drops;
  std::deque<FakePacket>& inbox = it->second.packets;
  while (out.size() < max && !inbox.empty()) {
    out.push_back(std::move(inbox.front()));
    inbox.pop_front();
  }
  return out.size();
}

uint64_t FakeNetwork::ring_full_drops(uint32_t endpoint) {
  std::lock_guard lock(mutex_);
  auto it = inboxes_.find(endpoint);
  return it == inboxes_.end() ? 0 : it->second.ring_full_drops;
}

uint32_t FakeNetwork::register_region() {
  std::lock_guard lock(mutex_);
  if (next_region_id_ == 0) next_region_id_ = 1;
  return next_region_id_++;
}

uint64_t FakeNetwork::expose(const uint8_t* base, size_t len) {
  std::lock_guard lock(mutex_);
  if (refuse_exposures_) return 0;
  uint64_t key = 0;
  while (key == 0 || exposures_.count(key) != 0) key = random_u64();
  exposures_[key] = Region{base, len};
  return key;
}

void FakeNetwork::revoke(uint64_t key) {
  std::lock_guard lock(mutex_);
  exposures_.erase(key);
}

size_t FakeNetwork::num_exposures() {
  std::lock_guard lock(mutex_);
  return exposures_.size();
}

void FakeNetwork::set_hold_bulk(bool hold) {
  std::lock_guard lock(mutex_);
  hold_bulk_ = hold;
}

void FakeNetwork::set_refuse_exposures(bool refuse) {
  std::lock_guard lock(mutex_);
  refuse_exposures_ = refuse;
}

bool FakeNetwork::hold_bulk() {
  std::lock_guard lock(mutex_);
  return hold_bulk_;
}

bool FakeNetwork::copy_remote(uint64_t key, uint64_t remote_addr, uint8_t* local, size_t len,
                              bool read) {
  std::lock_guard lock(mutex_);
  if (!read) return false;
  auto it = exposures_.find(key);
  if (it == exposures_.end()) return false;
  const Region& region = it->second;
  const auto base = reinterpret_cast<uintptr_t>(region.base);
  // Compare offsets rather than end addresses, so a huge remote_addr or len
  // cannot wrap around and pass.
  if (remote_addr < base) return false;
  const uint64_t offset = remote_addr - base;
  if (offset > region.len || len > region.len - offset) return false;
  if (len == 0) return true;
  std::memmove(local, region.base + offset, len);
  return true;
}

void FakeNetwork::deliver_locked(FakePacket packet) {
  auto it = inboxes_.find(packet.dst);
  // Datagram semantics: nobody listening means the packet is lost.
  if (it == inboxes_.end()) return;
  Inbox& inbox = it->second;
  if (inbox.packets.size() >= inbox.capacity) {  // every receive buffer full
    inbox.ring_full_drops++;
    return;
  }
  inbox.packets.push_back(std::move(packet));
}

// --- FakeTransport ---

FakeTransport::FakeTransport(const RpcConfig& config) {
  const size_t mtu_bytes = config.mtu_bytes == 0 ? kDefaultMtuBytes : config.mtu_bytes;
  if (mtu_bytes < kMinMtuBytes || mtu_bytes > kMaxMtuBytes) {
    throw Error("fake transport: mtu_bytes " + std::to_string(mtu_bytes) + " outside [" +
                std::to_string(kMinMtuBytes) + ", " + std::to_string(kMaxMtuBytes) + "]");
  }
  if (config.rx_ring_size == 0) throw Error("fake transport: rx_ring_size must be nonzero");
  caps_.max_pkt_bytes = mtu_bytes;
  caps_.max_data_per_pkt = caps_.max_pkt_bytes - kPktHeaderBytes;
  caps_.rx_ring_size = config.rx_ring_size;
  caps_.max_inline_bytes = 0;
  caps_.bulk = true;
  ring_.assign(caps_.rx_ring_size, std::vector<uint8_t>(caps_.max_pkt_bytes));
  scratch_.reserve(caps_.rx_ring_size);
  // Attach last: nothing above can throw after we own an endpoint.
  endpoint_ = FakeNetwork::instance().attach(caps_.rx_ring_size);
}

FakeTransport::~FakeTransport() {
  for (const auto& [handle, key] : exposure_keys_) FakeNetwork::instance().revoke(key);
  FakeNetwork::instance().detach(endpoint_);
}

void FakeTransport::tx_burst(std::span<const TxItem> items) {
  largest_tx_burst_ = std::max(largest_tx_burst_, items.size());
  FakeNetwork& network = FakeNetwork::instance();
  for (const TxItem& item : items) {
    FakePacket packet;
    packet.src = endpoint_;
    packet.dst = read_u32(*item.route, kRoutingEndpointOffset);
    packet.bytes.resize(kPktHeaderBytes + item.data_len);
    std::memcpy(packet.bytes.data(), item.hdr, kPktHeaderBytes);
    // data may be nullptr when data_len == 0, and memcpy from nullptr is UB.
    if (item.data_len > 0) {
      std::memcpy(packet.bytes.data() + kPktHeaderBytes, item.data, item.data_len);
    }
    network.send(std::move(packet));
  }
}

void FakeTransport::refresh_rx_drops() {
  rx_drops.ring_full = FakeNetwork::instance().ring_full_drops(endpoint_);
}

size_t FakeTransport::rx_burst(std::span<RxPacket> out) {
  const size_t n = std::min(out.size(), caps_.rx_ring_size - ring_in_use_);
  if (n == 0) return 0;
  FakeNetwork::instance().receive(endpoint_, n, scratch_, rx_drops.ring_full);
  size_t count = 0;
  for (const FakePacket& packet : scratch_) {
    // Larger than a ring buffer: a real NIC would drop it too.
    if (packet.bytes.size() > caps_.max_pkt_bytes) continue;
    std::vector<uint8_t>& buf = ring_[ring_head_];
    // An empty datagram has no data pointer, and memcpy from nullptr is UB.
    if (!packet.bytes.empty()) std::memcpy(buf.data(), packet.bytes.data(), packet.bytes.size());
    out[count] = RxPacket{buf.data(), static_cast<uint32_t>(packet.bytes.size()), packet.src};
    ring_head_ = (ring_head_ + 1) % caps_.rx_ring_size;
    count++;
  }
  scratch_.clear();
  ring_in_use_ += count;
  return count;
}

void FakeTransport::post_recvs(size_t n) {
  RPC_ASSERT(n <= ring_in_use_, "post_recvs returns more buffers than are in use");
  ring_in_use_ -= n;
}

void FakeTransport::fill_local_routing_info(RoutingInfo& out) const {
  out.bytes.fill(0);
  write_u32(out, kRoutingEndpointOffset, endpoint_);
  write_u32(out, kRoutingMagicOffset, kRoutingMagic);
}

bool FakeTransport::resolve_remote_routing_info(RoutingInfo& info) {
  // Already in its resolved form: the endpoint id is the address.
  const bool ok = read_u32(info, kRoutingMagicOffset) == kRoutingMagic &&
                  read_u32(info, kRoutingEndpointOffset) != 0;
  if (ok) live_resolutions_++;
  return ok;
}

void FakeTransport::release_remote_routing_info(const RoutingInfo& resolved) {
  const bool valid = read_u32(resolved, kRoutingMagicOffset) == kRoutingMagic &&
                     read_u32(resolved, kRoutingEndpointOffset) != 0;
  if (!valid || live_resolutions_ == 0) {
    unmatched_releases_++;
    return;
  }
  live_resolutions_--;
}

uint64_t FakeTransport::src_key_of(const RoutingInfo& resolved) const {
  return read_u32(resolved, kRoutingEndpointOffset);
}

Result<MemReg> FakeTransport::register_memory(void* addr, size_t len) {
  (void)addr;
  (void)len;
  // Local use only: peers reach nothing of it (expose_for_read does that).
  return MemReg{FakeNetwork::instance().register_region(), nullptr};
}

void FakeTransport::deregister_memory(const MemReg& reg) { (void)reg; }

bool FakeTransport::expose_for_read(const RoutingInfo& reader, const void* addr, size_t len,
                                    const MemReg& reg, Exposure& out) {
  (void)reader;  // anyone with the key may read it: the fake has no connections
  (void)reg;
  const uint64_t key = FakeNetwork::instance().expose(static_cast<const uint8_t*>(addr), len);
  if (key == 0) return false;
  uint32_t handle = next_exposure_handle_++;
  if (handle == Exposure::kNone) handle = next_exposure_handle_++;
  exposure_keys_[handle] = key;
  out = Exposure{reinterpret_cast<uint64_t>(addr), key, handle};
  return true;
}

void FakeTransport::revoke_exposure(Exposure& exposure) {
  if (!exposure.active()) return;
  auto it = exposure_keys_.find(exposure.handle);
  RPC_ASSERT(it != exposure_keys_.end() && it->second == exposure.key,
             "revoke_exposure of an exposure this transport did not make");
  FakeNetwork::instance().revoke(it->second);
  exposure_keys_.erase(it);
  exposure = Exposure{};
}

bool FakeTransport::post_read(const BulkOp& op) {
  posted_reads_.push_back(op);
  return true;
}

bool FakeTransport::post_write(const BulkOp& op) {
  const bool ok =
      FakeNetwork::instance().copy_remote(op.remote_key, op.remote_addr, op.local_addr, op.len,
                                          /*read=*/false);
  bulk_done_.push_back(BulkCompletion{op.cookie, ok});
  return true;
}

size_t FakeTransport::poll_bulk(std::span<BulkCompletion> out) {
  // Reads copy when they complete, like a NIC's DMA: a buffer handed back
  // before the completion would be written after.
  if (!posted_reads_.empty() && !FakeNetwork::instance().hold_bulk()) {
    for (const BulkOp& op : posted_reads_) {
      const bool ok = FakeNetwork::instance().copy_remote(op.remote_key, op.remote_addr,
                                                          op.local_addr, op.len, /*read=*/true);
      bulk_done_.push_back(BulkCompletion{op.cookie, ok});
    }
    posted_reads_.clear();
  }
  const size_t count = std::min(out.size(), bulk_done_.size());
  std::copy_n(bulk_done_.begin(), count, out.begin());
  bulk_done_.erase(bulk_done_.begin(), bulk_done_.begin() + static_cast<ptrdiff_t>(count));
  return count;
}

}  // namespace rpc::detail
