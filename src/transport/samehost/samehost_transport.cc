// The samehost transport (samehost_transport.h): channels, the datapath
// over their rings, and bulk reads with process_vm_readv.
#include "transport/samehost/samehost_transport.h"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/random.h"
#include "wire/le.h"

namespace rpc::detail {

using namespace samehost;

namespace {

constexpr size_t kDefaultPktBytes = 4096;

Geometry geometry_for(const RpcConfig& config, size_t pkt_bytes) {
  // Room for every packet a session's credits allow in one direction
  // (requests and credit returns, or responses), twice over.
  const size_t want = std::max<size_t>(64, 2 * config.session_credits);
  Geometry g;
  g.entries = static_cast<uint32_t>(std::min<size_t>(std::bit_ceil(want), kMaxRingEntries));
  g.slot_bytes = static_cast<uint32_t>(pkt_bytes);
  return g;
}

}  // namespace

SamehostTransport::SamehostTransport(const RpcConfig& config)
    : pid_(getpid()), nonce_(random_u64() | 1), probe_word_(nonce_) {
  const size_t pkt_bytes = config.mtu_bytes == 0 ? kDefaultPktBytes : config.mtu_bytes;
  if (pkt_bytes < kMinSlotBytes || pkt_bytes > kMaxSlotBytes) {
    throw Error(fmt::format("samehost transport: mtu_bytes {} outside [{}, {}]", pkt_bytes,
                            kMinSlotBytes, kMaxSlotBytes));
  }
  if (config.rx_ring_size == 0) throw Error("samehost transport: rx_ring_size must be nonzero");
  caps_.max_pkt_bytes = pkt_bytes;
  caps_.max_data_per_pkt = pkt_bytes - kPktHeaderBytes;
  // Each session has rings of its own; this only bounds how many sessions
  // the engine admits (rx_ring_size / session_credits), as for udp.
  caps_.rx_ring_size = config.rx_ring_size;
  caps_.bulk = true;
  caps_.congestion_free = true;
  caps_.min_rto_us = kMinRtoUs;
  geometry_ = geometry_for(config, pkt_bytes);
  handed_.resize(kMaxHandedOut);
  copy_rx_ = config.samehost_copy_rx;
  if (copy_rx_) rx_copies_.resize(kMaxHandedOut * pkt_bytes);
  reads_.reserve(64);
  watch_ = std::make_unique<Watch>(nonce_);
}

SamehostTransport::~SamehostTransport() {
  watch_.reset();  // no more handshakes or failure reports
}

// --- channels ---

SamehostTransport::Channel* SamehostTransport::channel_by_key(uint64_t key) const {
  const auto index = static_cast<uint32_t>(key);
  if (index >= channels_.size()) return nullptr;
  Channel* c = channels_[index].get();
  return c->live && c->gen == static_cast<uint32_t>(key >> 32) ? c : nullptr;
}

SamehostTransport::Channel* SamehostTransport::channel_of(const RoutingInfo& resolved) const {
  const uint8_t* p = resolved.bytes.data();
  return channel_by_key(key_of(get_le32(p + kRouteChannelOffset), get_le32(p + kRouteGenOffset)));
}

uint32_t SamehostTransport::new_channel() {
  uint32_t index;
  if (!free_channels_.empty()) {
    index = free_channels_.back();
    free_channels_.pop_back();
  } else {
    index = static_cast<uint32_t>(channels_.size());
    channels_.push_back(std::make_unique<Channel>());
  }
  Channel& c = *channels_[index];
  c.live = true;
  c.failed = false;
  c.fail_reason = SmErr::kNone;
  c.handed_out = 0;
  c.link = std::make_shared<ChannelLink>();
  live_channels_++;
  return index;
}

void SamehostTransport::start_polling(uint32_t index) {
  channels_[index]->polled = true;
  polled_.push_back(index);
}

void SamehostTransport::stop_polling(uint32_t index) {
  Channel& c = *channels_[index];
  if (!c.polled) return;
  c.polled = false;
  std::erase(polled_, index);
}

// Our own finding (a corrupt consumer index, a bad read): reported with
// the watch thread's findings by poll_failed_bulk_paths.
void SamehostTransport::fail_channel(uint32_t index, SmErr reason, bool keep_polled) {
  Channel& c = *channels_[index];
  if (c.failed) return;
  c.failed = true;
  c.fail_reason = reason;
  if (!keep_polled) stop_polling(index);
  local_failed_.push_back(FailedChannel{key_of(index, c.gen), reason});
}

void SamehostTransport::free_channel(uint32_t index) {
  Channel& c = *channels_[index];
  c.mapping.reset();
  c.link.reset();
  c.gen++;  // routes and packets that still name it are stale now
  free_channels_.push_back(index);
}

// The channel is ready: polled from now on, and named by `out` (our own
// resolved route to it).
void SamehostTransport::activate(uint32_t index, uint32_t peer_pid, RoutingInfo& out) {
  start_polling(index);
  Route resolved;
  resolved.kind = RouteKind::kResolved;
  resolved.pid = peer_pid;
  resolved.channel_id = index;
  resolved.channel_gen = channels_[index]->gen;
  encode_route(resolved, out);
}

void SamehostTransport::fill_local_routing_info(RoutingInfo& out) const {
  Route r;
  r.kind = RouteKind::kLocal;
  r.pid = static_cast<uint32_t>(pid_);
  r.listener_nonce = nonce_;
  r.probe_addr = reinterpret_cast<uint64_t>(&probe_word_);
  encode_route(r, out);
}

bool SamehostTransport::prepare_connect(RoutingInfo& offer, uint64_t) {
  auto r = decode_route(offer, RouteKind::kLocal);
  if (!r) return false;
  r->kind = RouteKind::kOffer;
  const uint64_t a = random_u64();
  const uint64_t b = random_u64() | 1;  // never all zero
  std::memcpy(r->token.data(), &a, 8);
  std::memcpy(r->token.data() + 8, &b, 8);
  encode_route(*r, offer);
  return true;
}

// Server: a client asks for a session. Its region is made now and waits
// for it on the socket.
bool SamehostTransport::resolve_remote_routing_info(RoutingInfo& info) {
  const auto offer = decode_route(info, RouteKind::kOffer);
  if (!offer) return false;
  auto region = create_region(geometry_);
  if (!region) {
    RPC_LOG_WARN("samehost: cannot create a channel region: {}", region.error());
    return false;
  }
  const uint32_t index = new_channel();
  Channel& c = *channels_[index];
  c.peer_pid = static_cast<pid_t>(offer->pid);
  c.we_read_peer = probe_peer_memory(c.peer_pid, offer->probe_addr, offer->listener_nonce);
  c.mapping = std::move(region->mapping);
  c.tx = RingWriter(c.mapping.base(), geometry_, kServerToClient);
  c.rx = RingReader(c.mapping.base(), geometry_, kClientToServer);
  Watch::Expected expected;
  expected.key = key_of(index, c.gen);
  expected.token = offer->token;
  expected.pid = c.peer_pid;
  expected.welcome.channel_id = index;
  expected.welcome.entries = geometry_.entries;
  expected.welcome.slot_bytes = geometry_.slot_bytes;
  expected.welcome.region_bytes = geometry_.region_bytes();
  expected.welcome.server_reads_client = c.we_read_peer;
  expected.link = c.link;
  watch_->expect_client(std::move(expected), std::move(region->memfd));
  activate(index, offer->pid, info);
  return true;
}

void SamehostTransport::fill_connect_answer(const RoutingInfo& resolved, RoutingInfo& out) const {
  const uint8_t* p = resolved.bytes.data();
  Route r;
  r.kind = RouteKind::kAnswer;
  r.pid = static_cast<uint32_t>(pid_);
  r.listener_nonce = nonce_;
  r.probe_addr = reinterpret_cast<uint64_t>(&probe_word_);
  r.channel_id = get_le32(p + kRouteChannelOffset);
  r.channel_gen = get_le32(p + kRouteGenOffset);
  encode_route(r, out);
}

// Client: the server made our channel; fetch its region.
bool SamehostTransport::resolve_connect_answer(RoutingInfo& answer, const RoutingInfo& offer) {
  const auto server = decode_route(answer, RouteKind::kAnswer);
  const auto ours = decode_route(offer, RouteKind::kOffer);
  if (!server || !ours) return false;
  const bool we_read = probe_peer_memory(static_cast<pid_t>(server->pid), server->probe_addr,
                                         server->listener_nonce);
  auto ch = client_handshake(*server, *ours, we_read, geometry_.slot_bytes, kHandshakeTimeout);
  if (!ch) {
    RPC_LOG_WARN("samehost: cannot open the channel to process {}: {}", server->pid, ch.error());
    return false;
  }
  const uint32_t index = new_channel();
  Channel& c = *channels_[index];
  c.peer_pid = static_cast<pid_t>(server->pid);
  c.we_read_peer = we_read;
  c.mapping = std::move(ch->mapping);
  c.tx = RingWriter(c.mapping.base(), ch->geometry, kClientToServer);
  c.rx = RingReader(c.mapping.base(), ch->geometry, kServerToClient);
  c.link->peer_reads_us.store(ch->server_reads_client, std::memory_order_relaxed);
  watch_->watch_server(key_of(index, c.gen), std::move(ch->socket), c.peer_pid);
  activate(index, server->pid, answer);
  return true;
}

void SamehostTransport::release_remote_routing_info(const RoutingInfo& resolved) {
  Channel* c = channel_of(resolved);
  if (c == nullptr) return;
  const uint32_t index = get_le32(resolved.bytes.data() + kRouteChannelOffset);
  watch_->forget(key_of(index, c->gen));  // closing our end tells the peer
  std::erase_if(local_failed_,
                [&](const FailedChannel& f) { return f.key == key_of(index, c->gen); });
  stop_polling(index);
  c->live = false;
  live_channels_--;
  // Packets the engine still holds point into the mapping: it stays until
  // post_recvs gives the last one back.
  if (c->handed_out == 0) free_channel(index);
}

uint64_t SamehostTransport::src_key_of(const RoutingInfo& resolved) const {
  const uint8_t* p = resolved.bytes.data();
  return key_of(get_le32(p + kRouteChannelOffset), get_le32(p + kRouteGenOffset));
}

// --- datapath ---

void SamehostTransport::tx_burst(std::span<const TxItem> items) {
  for (const TxItem& item : items) {
    Channel* c = channel_of(*item.route);
    if (c == nullptr || c->failed) [[unlikely]] {
      continue;  // the session is ending; datagram semantics
    }
    switch (c->tx.push(item.hdr, item.data, item.data_len)) {
      case RingWriter::Push::kOk:
        break;
      case RingWriter::Push::kFull:
        tx_ring_full_++;
        break;
      case RingWriter::Push::kCorrupt:
        fail_channel(get_le32(item.route->bytes.data() + kRouteChannelOffset),
                     SmErr::kPeerMisbehaved);
        break;
    }
  }
}

size_t SamehostTransport::rx_burst(std::span<RxPacket> out) {
  const size_t limit = std::min(out.size(), kMaxHandedOut - handed_count_);
  const size_t num_polled = polled_.size();
  if (num_polled == 0 || limit == 0) return 0;
  // A fair share per channel and pass, so that a peer that keeps its ring
  // full (ignoring its credits) cannot take every burst.
  const size_t share = std::max<size_t>(1, limit / num_polled);
  size_t n = 0;
  bool any_failed = false;
  for (size_t k = 0; k < num_polled && n < limit; k++) {
    const uint32_t index = polled_[(poll_start_ + k) % num_polled];
    Channel& c = *channels_[index];
    if (c.failed) continue;
    const uint64_t key = key_of(index, c.gen);
    for (size_t taken = 0; taken < share && n < limit; taken++) {
      uint8_t* pkt;
      uint32_t len;
      const RingReader::Poll got = c.rx.poll(pkt, len);
      if (got == RingReader::Poll::kEmpty) break;
      if (got == RingReader::Poll::kMalformed) [[unlikely]] {
        // An honest writer never leaves one: the peer is broken or
        // hostile, and polling on would let it keep us here forever.
        malformed_slots_++;
        rx_drops.oversized++;
        fail_channel(index, SmErr::kPeerMisbehaved, /*keep_polled=*/true);
        any_failed = true;
        break;
      }
      const size_t entry = (handed_head_ + handed_count_) % kMaxHandedOut;
      if (copy_rx_) {
        uint8_t* copy = rx_copies_.data() + entry * caps_.max_pkt_bytes;
        std::memcpy(copy, pkt, len);
        pkt = copy;
      }
      out[n++] = RxPacket{pkt, len, key};
      handed_[entry] = HandedOut{index, c.rx.head()};
      handed_count_++;
      c.handed_out++;
    }
  }
  if (any_failed) [[unlikely]] {  // not while walking polled_
    std::erase_if(polled_, [this](uint32_t index) {
      Channel& c = *channels_[index];
      if (c.failed) c.polled = false;
      return c.failed;
    });
  }
  if (!polled_.empty()) poll_start_ = (poll_start_ + 1) % polled_.size();
  return n;
}

void SamehostTransport::post_recvs(size_t n) {
  for (size_t i = 0; i < n && handed_count_ > 0; i++) {
    const HandedOut h = handed_[handed_head_];
    handed_head_ = (handed_head_ + 1) % kMaxHandedOut;
    handed_count_--;
    Channel& c = *channels_[h.channel];
    c.handed_out--;
    if (!c.live) {
      if (c.handed_out == 0) free_channel(h.channel);
      continue;
    }
    // With none left out, malformed slots polled after this one go back too.
    c.rx.release(c.handed_out == 0 ? c.rx.head() : h.position);
  }
}

// --- bulk ---

bool SamehostTransport::expose_for_read(const RoutingInfo& reader, const void* addr, size_t,
                                        const MemReg&, Exposure& out) {
  Channel* c = channel_of(reader);
  // Only a reader whose probe of us worked can read: to any other, the
  // message goes as packets.
  if (c == nullptr || c->failed || !c->link->peer_reads_us.load(std::memory_order_acquire)) {
    return false;
  }
  // Nothing to register or revoke: the kernel checks the reader's right
  // to our memory on every read. The key is not used.
  out.remote_addr = reinterpret_cast<uint64_t>(addr);
  out.key = 0;
  out.handle = 0;
  return true;
}

bool SamehostTransport::post_read(const BulkOp& op) {
  Channel* c = channel_of(*op.route);
  const uint64_t key = src_key_of(*op.route);
  reads_.push_back(Read{c != nullptr ? c->peer_pid : 0, key, op.local_addr, op.remote_addr, op.len,
                        0, op.cookie});
  if (c != nullptr && !c->we_read_peer) {
    // We told the peer its memory is out of our reach, and it sent a bulk
    // control packet anyway.
    fail_channel(static_cast<uint32_t>(key), SmErr::kPeerMisbehaved);
  }
  return true;
}

void SamehostTransport::finish_read(size_t i, bool ok, std::span<BulkCompletion> out, size_t& n) {
  out[n++] = BulkCompletion{reads_[i].cookie, ok};
  reads_.erase(reads_.begin() + static_cast<ptrdiff_t>(i));
}

size_t SamehostTransport::poll_bulk(std::span<BulkCompletion> out) {
  size_t n = 0;
  size_t budget = kReadBytesPerPoll;
  while (!reads_.empty() && n < out.size()) {
    Read& r = reads_.front();
    Channel* c = channel_by_key(r.key);
    if (c == nullptr || c->failed || r.pid == 0) {
      finish_read(0, false, out, n);
      continue;
    }
    if (budget == 0) break;
    const size_t chunk = std::min(r.len - r.done, budget);
    iovec local{r.local + r.done, chunk};
    iovec remote{reinterpret_cast<void*>(r.remote + r.done), chunk};
    const ssize_t got = process_vm_readv(r.pid, &local, 1, &remote, 1, 0);
    if (got != static_cast<ssize_t>(chunk)) {
      // Not the payload it announced (unmapped, or not its memory), or
      // the process is gone.
      fail_channel(static_cast<uint32_t>(r.key),
                   got < 0 && errno == ESRCH ? SmErr::kPeerExited : SmErr::kPeerMisbehaved);
      finish_read(0, false, out, n);
      continue;
    }
    budget -= chunk;
    r.done += chunk;
    if (r.done == r.len) finish_read(0, true, out, n);
  }
  return n;
}

size_t SamehostTransport::poll_failed_bulk_paths(std::span<uint64_t> out) {
  size_t n = 0;
  while (n < out.size() && !local_failed_.empty()) {
    out[n++] = local_failed_.front().key;
    local_failed_.erase(local_failed_.begin());
  }
  std::array<FailedChannel, 8> found;
  const size_t got =
      watch_->take_failed(std::span(found).first(std::min(found.size(), out.size() - n)));
  for (size_t i = 0; i < got; i++) {
    const auto index = static_cast<uint32_t>(found[i].key);
    Channel* c = channel_by_key(found[i].key);
    if (c == nullptr || c->failed) continue;  // released meanwhile, or reported already
    c->failed = true;
    c->fail_reason = found[i].reason;
    stop_polling(index);
    out[n++] = found[i].key;
  }
  return n;
}

SmErr SamehostTransport::bulk_path_failure_reason(uint64_t path) const {
  const Channel* c = channel_by_key(path);
  return c != nullptr && c->failed ? c->fail_reason : SmErr::kBulkPathFailed;
}

}  // namespace rpc::detail
