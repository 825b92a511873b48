// The `verbs` transport: UD datagrams over libibverbs. See the header.
#include "transport/verbs/verbs_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <span>

#include "common/log.h"
#include "wire/pkt_hdr.h"

namespace rpc::detail {

namespace {

// A datagram smaller than this is a misconfiguration, not a tiny link.
constexpr size_t kMinPktBytes = kPktHeaderBytes + 64;
// Send queue: a signaled send every kSignalEvery; before the next one is
// posted the previous one is reaped, so at most 2 * kSignalEvery + one
// burst are outstanding.
constexpr size_t kSignalEvery = 64;
constexpr size_t kSendQueueDepth = 4 * kSignalEvery;
// How long a burst waits for the previous signaled send before posting
// anyway (a healthy device completes it in microseconds): a stalled device
// costs datagrams, which RTOs recover, never the Rpc's thread.
constexpr std::chrono::milliseconds kReapTimeout{1000};
// Control packets (a bare header) and small messages are copied into the
// work request: no registration needed, and one DMA read fewer.
constexpr uint32_t kWantedInlineBytes = 128;

[[noreturn]] void fail(const std::string& what, int errno_value) {
  throw Error("verbs transport: " + what, errno_value);
}

size_t mtu_enum_to_bytes(ibv_mtu mtu) { return size_t{128} << static_cast<int>(mtu); }

bool gid_is_zero(const ibv_gid& gid) {
  return std::all_of(std::begin(gid.raw), std::end(gid.raw), [](uint8_t b) { return b == 0; });
}

bool gid_is_ipv4_mapped(const ibv_gid& gid) {
  for (int i = 0; i < 10; i++) {
    if (gid.raw[i] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

uint64_t make_src_key(uint32_t qpn, uint32_t addr_tail) { return uint64_t{qpn} << 32 | addr_tail; }

// The GID to address `port` by: the configured index, or (-1) the one
// select_gid picks from the port's valid GID table entries.
GidChoice choose_gid(ibv_context* ctx, uint8_t port, int configured, const std::string& nexus_ip) {
  if (configured >= 0) {
    return {configured, fmt::format("verbs_gid_index {} as configured", configured)};
  }
  ibv_device_attr da{};
  ibv_port_attr pa{};
  if (ibv_query_device(ctx, &da) != 0 || ibv_query_port(ctx, port, &pa) != 0) {
    fail("querying the device for its GID table failed", errno);
  }
  // Room for every port's table: the call fails if the valid entries do not fit.
  std::vector<ibv_gid_entry> entries(std::max<size_t>(
      1,
      static_cast<size_t>(std::max(pa.gid_tbl_len, 0)) * std::max<uint8_t>(da.phys_port_cnt, 1)));
  const ssize_t n = ibv_query_gid_table(ctx, entries.data(), entries.size(), 0);
  if (n < 0) {
    return {0, fmt::format("reading the GID table failed ({}); using GID 0",
                           std::strerror(static_cast<int>(-n)))};
  }
  std::vector<GidEntry> table;
  for (const ibv_gid_entry& e : std::span(entries.data(), static_cast<size_t>(n))) {
    if (e.port_num != port) continue;
    GidEntry& g = table.emplace_back();
    g.index = e.gid_index;
    std::memcpy(g.gid.data(), e.gid.raw, g.gid.size());
    g.type = static_cast<GidType>(e.gid_type);
    g.present = true;
  }
  return select_gid(table, nexus_ip);
}

}  // namespace

VerbsTransport::VerbsTransport(const RpcConfig& config, const std::string& nexus_ip)
    : port_(config.verbs_port) {
  if (config.rx_ring_size == 0) fail("rx_ring_size is 0", EINVAL);
  if (config.verbs_gid_index < -1) fail("verbs_gid_index is below -1 (-1: choose)", EINVAL);
  try {
    int num_devices = 0;
    ibv_device** list = ibv_get_device_list(&num_devices);
    if (list == nullptr || num_devices == 0) {
      if (list != nullptr) ibv_free_device_list(list);
      fail(
          "no RDMA device found (no NIC driver loaded? Soft-RoCE: see scripts/rxe-vm.sh "
          "and docs/transports.md)",
          ENODEV);
    }
    std::string tried;
    ibv_port_attr port_attr{};
    for (int i = 0; i < num_devices && ctx_ == nullptr; i++) {
      const char* name = ibv_get_device_name(list[i]);
      if (!config.verbs_device.empty() && config.verbs_device != name) continue;
      ibv_context* ctx = ibv_open_device(list[i]);
      if (ctx == nullptr) {
        tried += fmt::format(" {} (cannot open)", name);
        continue;
      }
      ibv_port_attr pa{};
      if (ibv_query_port(ctx, port_, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) {
        tried += fmt::format(" {} (port {} not active)", name, port_);
        ibv_close_device(ctx);
        continue;
      }
      ctx_ = ctx;
      port_attr = pa;
      device_name_ = name;
      use_grh_ = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
      local_lid_ = pa.lid;
      // mtu_bytes 0: the port's own MTU.
      const size_t port_mtu = mtu_enum_to_bytes(pa.active_mtu);
      caps_.max_pkt_bytes = config.mtu_bytes == 0 ? port_mtu : std::min(config.mtu_bytes, port_mtu);
    }
    ibv_free_device_list(list);
    if (ctx_ == nullptr) {
      if (!config.verbs_device.empty() && tried.empty()) {
        fail(fmt::format("no RDMA device named '{}'", config.verbs_device), ENODEV);
      }
      fail("no usable RDMA device:" + tried, ENODEV);
    }
    if (caps_.max_pkt_bytes < kMinPktBytes) {
      fail(fmt::format("packet size {} (mtu_bytes or the port's active MTU) is below {}",
                       caps_.max_pkt_bytes, kMinPktBytes),
           EINVAL);
    }
    caps_.max_data_per_pkt = caps_.max_pkt_bytes - kPktHeaderBytes;
    caps_.rx_ring_size = config.rx_ring_size;

    gid_choice_ = choose_gid(ctx_, port_, config.verbs_gid_index, nexus_ip);
    gid_index_ = gid_choice_.index;
    if (ibv_query_gid(ctx_, port_, gid_index_, &local_gid_) != 0) {
      fail(fmt::format("{} port {} has no GID index {}", device_name_, port_, gid_index_), EINVAL);
    }
    if (use_grh_ && gid_is_zero(local_gid_)) {
      fail(fmt::format("{} port {} GID index {} is empty (RoCE needs an address on the netdev; "
                       "pick another verbs_gid_index, see `ibv_devinfo -v`)",
                       device_name_, port_, gid_index_),
           EINVAL);
    }
    ipv4_gid_ = gid_is_ipv4_mapped(local_gid_);

    ibv_device_attr da{};
    if (ibv_query_device(ctx_, &da) != 0) fail("ibv_query_device failed", errno);
    if (config.rx_ring_size > static_cast<size_t>(da.max_qp_wr) ||
        config.rx_ring_size > static_cast<size_t>(da.max_cqe)) {
      fail(fmt::format("rx_ring_size {} exceeds what {} allows (max_qp_wr {}, max_cqe {})",
                       config.rx_ring_size, device_name_, da.max_qp_wr, da.max_cqe),
           EINVAL);
    }
    sq_depth_ = std::min<size_t>(kSendQueueDepth, static_cast<size_t>(da.max_qp_wr));
    if (sq_depth_ < 2 * kSignalEvery + kMaxBatch) fail("the device's queues are too short", EINVAL);

    pd_ = ibv_alloc_pd(ctx_);
    if (pd_ == nullptr) fail("ibv_alloc_pd failed", errno);
    send_cq_ = ibv_create_cq(ctx_, static_cast<int>(sq_depth_), nullptr, nullptr, 0);
    recv_cq_ = ibv_create_cq(ctx_, static_cast<int>(config.rx_ring_size), nullptr, nullptr, 0);
    if (send_cq_ == nullptr || recv_cq_ == nullptr) fail("ibv_create_cq failed", errno);

    ibv_qp_init_attr qa{};
    qa.send_cq = send_cq_;
    qa.recv_cq = recv_cq_;
    qa.qp_type = IBV_QPT_UD;
    qa.sq_sig_all = 0;
    qa.cap.max_send_wr = static_cast<uint32_t>(sq_depth_);
    qa.cap.max_recv_wr = static_cast<uint32_t>(config.rx_ring_size);
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = kWantedInlineBytes;
    qp_ = ibv_create_qp(pd_, &qa);
    if (qp_ == nullptr) fail("ibv_create_qp (UD) failed", errno);
    caps_.max_inline_bytes = qa.cap.max_inline_data;
    if (caps_.max_inline_bytes < kPktHeaderBytes) {
      fail(fmt::format("{} inlines only {} bytes; control packets need {}", device_name_,
                       caps_.max_inline_bytes, kPktHeaderBytes),
           EINVAL);
    }

    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = 0;
    attr.port_num = port_;
    attr.qkey = kQkey;
    if (ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) {
      fail("moving the QP to INIT failed", errno);
    }
    attr = {};
    attr.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp_, &attr, IBV_QP_STATE)) fail("moving the QP to RTR failed", errno);
    attr = {};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;
    if (ibv_modify_qp(qp_, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN)) {
      fail("moving the QP to RTS failed", errno);
    }

    ring_buf_bytes_ = kGrhBytes + caps_.max_pkt_bytes;
    ring_mem_.assign(config.rx_ring_size * ring_buf_bytes_, 0);
    ring_mr_ = ibv_reg_mr(pd_, ring_mem_.data(), ring_mem_.size(), IBV_ACCESS_LOCAL_WRITE);
    if (ring_mr_ == nullptr) fail("registering the RX ring failed", errno);
    recv_wrs_.resize(config.rx_ring_size);
    recv_sges_.resize(config.rx_ring_size);
    for (size_t i = 0; i < config.rx_ring_size; i++) {
      recv_sges_[i] = ibv_sge{reinterpret_cast<uint64_t>(ring_mem_.data() + i * ring_buf_bytes_),
                              static_cast<uint32_t>(ring_buf_bytes_), ring_mr_->lkey};
      recv_wrs_[i] = ibv_recv_wr{};
      recv_wrs_[i].wr_id = i;
      recv_wrs_[i].sg_list = &recv_sges_[i];
      recv_wrs_[i].num_sge = 1;
    }
    post_recv_range(0, config.rx_ring_size);

    init_rc(da, port_attr);
    choose_bulk(config.verbs_bulk);
    for (size_t i = 0; i < kMaxBatch; i++) {
      send_wrs_[i].sg_list = send_sges_[i].data();
      send_wrs_[i].opcode = IBV_WR_SEND;
      send_wrs_[i].wr.ud.remote_qkey = kQkey;
    }
  } catch (...) {
    cleanup();
    throw;
  }
  RPC_LOG_INFO("verbs transport: {} B packets, inline {} B, reads {} at once, on {}; {}",
               caps_.max_pkt_bytes, caps_.max_inline_bytes, local_init_rd_atomic_, provider(),
               bulk_reason_);
}

std::string VerbsTransport::provider() const {
  return fmt::format("{} port {}, GID {}: {}", device_name_, port_, gid_index_, gid_choice_.reason);
}

VerbsTransport::~VerbsTransport() { cleanup(); }

void VerbsTransport::cleanup() noexcept {
  if (qp_ != nullptr) ibv_destroy_qp(qp_);
  qp_ = nullptr;
  cleanup_exposures();
  cleanup_rc();
  for (const AhEntry& entry : ah_entries_) {
    if (entry.ah != nullptr) ibv_destroy_ah(entry.ah);
  }
  ah_entries_.clear();
  ahs_.clear();
  for (const RetiredAh& r : retired_ahs_) ibv_destroy_ah(r.ah);
  retired_ahs_.clear();
  if (ring_mr_ != nullptr) ibv_dereg_mr(ring_mr_);
  ring_mr_ = nullptr;
  if (send_cq_ != nullptr) ibv_destroy_cq(send_cq_);
  if (recv_cq_ != nullptr) ibv_destroy_cq(recv_cq_);
  send_cq_ = recv_cq_ = nullptr;
  if (pd_ != nullptr && ibv_dealloc_pd(pd_) != 0) {
    RPC_LOG_WARN(
        "verbs transport: protection domain still in use at exit (memory not deregistered)");
  }
  pd_ = nullptr;
  if (ctx_ != nullptr) ibv_close_device(ctx_);
  ctx_ = nullptr;
}

// Posts ring buffers [first, first + n) (mod ring size) as one chain.
void VerbsTransport::post_recv_range(size_t first, size_t n) {
  const size_t ring = recv_wrs_.size();
  while (n > 0) {
    const size_t chunk = std::min(n, ring - first);  // do not wrap inside a chain
    for (size_t i = 0; i + 1 < chunk; i++) recv_wrs_[first + i].next = &recv_wrs_[first + i + 1];
    recv_wrs_[first + chunk - 1].next = nullptr;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(qp_, &recv_wrs_[first], &bad) != 0) {
      // Only a QP in error state refuses: nothing the engine could do.
      RPC_LOG_ERROR("verbs transport: ibv_post_recv failed ({})", std::strerror(errno));
    }
    first = (first + chunk) % ring;
    n -= chunk;
  }
  ring_next_post_ = first;
}

void VerbsTransport::post_recvs(size_t n) {
  if (n > 0) post_recv_range(ring_next_post_, n);
}

// Waits for the previous signaled send: its completion also retires every
// unsignaled send posted before it, which bounds the send queue. Each send's
// wr_id is its sequence number, so the signaled one is recognised whatever
// its status: a send that fails (rxe then moves the QP to error and flushes
// every later send with an error too) completes once, with an error, and
// nothing else will come for it. Waiting for a success instead spun here
// forever, with the Rpc's thread, as soon as one send failed.
void VerbsTransport::reap_signaled_send() {
  const auto deadline = std::chrono::steady_clock::now() + kReapTimeout;
  ibv_wc wc{};
  for (;;) {
    const int n = ibv_poll_cq(send_cq_, 1, &wc);
    if (n < 0) {
      RPC_LOG_ERROR("verbs transport: polling the send CQ failed");
      break;
    }
    if (n == 0) {
      if (std::chrono::steady_clock::now() < deadline) continue;
      // Posting more (our caller does next) rings the doorbell again; a
      // late completion is consumed by the next wait, as an older one.
      RPC_LOG_ERROR("verbs transport: a signaled send did not complete within {} ms",
                    kReapTimeout.count());
      signaled_outstanding_ = false;
      return;  // completed_seq_ stays where it was
    }
    if (wc.status != IBV_WC_SUCCESS) {
      // Errors complete even unsignaled sends; that datagram is lost. A QP
      // in error fails every send: the 1st, 2nd, 4th, 8th... are logged.
      if (std::has_single_bit(++tx_errors_)) {
        RPC_LOG_WARN("verbs transport: send {} failed: {} ({} failed so far)", wc.wr_id,
                     ibv_wc_status_str(wc.status), tx_errors_);
      }
    }
    if (wc.wr_id >= signaled_seq_) break;  // our signaled send (completions come in order)
  }
  signaled_outstanding_ = false;
  // Send completions come in order: every send up to the signaled one is done.
  completed_seq_ = signaled_seq_;
  if (!retired_ahs_.empty()) destroy_retired_ahs();
}

void VerbsTransport::destroy_retired_ahs() {
  const auto now = std::chrono::steady_clock::now();
  auto done = [&](const RetiredAh& r) {
    if (r.seq > completed_seq_ && now - r.retired_at < kRetiredAhGrace) return false;
    ibv_destroy_ah(r.ah);
    return true;
  };
  retired_ahs_.erase(std::remove_if(retired_ahs_.begin(), retired_ahs_.end(), done),
                     retired_ahs_.end());
}

void VerbsTransport::tx_burst(std::span<const TxItem> items) {
  while (!items.empty()) {
    const size_t n = std::min(items.size(), kMaxBatch);
    size_t signaled_index = n;  // none in this burst
    for (size_t i = 0; i < n; i++) {
      const TxItem& item = items[i];
      // Copied out: the bytes may not be read as a VerbsRoutingInfo in place.
      const VerbsRoutingInfo route = verbs_info_of(*item.route);
      ibv_send_wr& wr = send_wrs_[i];
      auto& sges = send_sges_[i];
      sges[0] = ibv_sge{reinterpret_cast<uint64_t>(item.hdr), kPktHeaderBytes, item.hdr_lkey};
      wr.num_sge = 1;
      if (item.data_len > 0) {
        sges[1] = ibv_sge{reinterpret_cast<uint64_t>(item.data), item.data_len, item.data_lkey};
        wr.num_sge = 2;
      }
      wr.send_flags =
          kPktHeaderBytes + item.data_len <= caps_.max_inline_bytes ? IBV_SEND_INLINE : 0;
      wr.wr_id = ++sends_posted_;  // the sequence number reap_signaled_send looks for
      if (sends_posted_ % kSignalEvery == 0) {
        if (signaled_outstanding_) reap_signaled_send();
        wr.send_flags |= IBV_SEND_SIGNALED;
        signaled_outstanding_ = true;
        signaled_seq_ = sends_posted_;
        signaled_index = i;
      }
      wr.wr.ud.ah = ah_entries_[route.ah_index].ah;
      wr.wr.ud.remote_qpn = route.wire.qpn;
      wr.next = i + 1 < n ? &send_wrs_[i + 1] : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_, &send_wrs_[0], &bad) != 0) {
      // Datagram semantics: what was not posted is lost; the engine's RTO
      // recovers it.
      tx_errors_++;
      RPC_LOG_WARN("verbs transport: ibv_post_send failed ({})", std::strerror(errno));
      // A signaled send that was not posted never completes: waiting for
      // it would hang the next burst.
      const size_t first_unposted =
          bad != nullptr ? static_cast<size_t>(bad - send_wrs_.data()) : 0;
      if (signaled_index < n && signaled_index >= first_unposted) signaled_outstanding_ = false;
    }
    items = items.subspan(n);
  }
}

uint64_t VerbsTransport::key_from_grh(const uint8_t* grh) const {
  uint32_t tail = 0;
  // RoCEv2/IPv4: the IPv4 header's source address (GRH area bytes 32..36);
  // otherwise the last 4 bytes of the GRH's source GID (bytes 20..24).
  std::memcpy(&tail, grh + (ipv4_gid_ ? 32 : 20), sizeof(tail));
  return tail;
}

size_t VerbsTransport::rx_burst(std::span<RxPacket> out) {
  const int want = static_cast<int>(std::min(out.size(), kMaxBatch));
  const int n = ibv_poll_cq(recv_cq_, want, wcs_.data());
  if (n <= 0) return 0;
  for (int i = 0; i < n; i++) {
    const ibv_wc& wc = wcs_[static_cast<size_t>(i)];
    uint8_t* buf = ring_mem_.data() + wc.wr_id * ring_buf_bytes_;
    RxPacket& pkt = out[static_cast<size_t>(i)];
    pkt.buf = buf + kGrhBytes;
    if (wc.status != IBV_WC_SUCCESS || wc.byte_len < kGrhBytes) {
      pkt.len = 0;  // the engine counts it as too short and returns the buffer
      pkt.src_key = 0;
      continue;
    }
    pkt.len = wc.byte_len - static_cast<uint32_t>(kGrhBytes);
    const uint32_t tail = use_grh_ ? static_cast<uint32_t>(key_from_grh(buf)) : wc.slid;
    pkt.src_key = make_src_key(wc.src_qp, tail);
  }
  return static_cast<size_t>(n);
}

void VerbsTransport::fill_local_routing_info(RoutingInfo& out) const {
  out = RoutingInfo{};
  VerbsRoutingWire w{};
  std::memcpy(w.gid, local_gid_.raw, sizeof(w.gid));
  w.qpn = qp_->qp_num;
  w.lid = local_lid_;
  w.magic = kVerbsRoutingMagic;
  w.layout = kVerbsRoutingLayout;
  std::memcpy(out.bytes.data(), &w, sizeof(w));
}

// The address handle for the port w names: shared by every route to that
// port, counted.
bool VerbsTransport::resolve_ah(const VerbsRoutingWire& w, uint32_t& ah_index) {
  std::array<uint8_t, 18> key{};
  std::memcpy(key.data(), w.gid, 16);
  std::memcpy(key.data() + 16, &w.lid, 2);
  // Created here, on the Rpc thread, when a session connects: a few tens
  // of microseconds on a real NIC (see docs/reliability.md).
  auto it = ahs_.find(key);
  if (it == ahs_.end()) {
    ibv_ah_attr aa{};
    aa.port_num = port_;
    aa.dlid = w.lid;
    aa.sl = 0;
    if (use_grh_) {
      aa.is_global = 1;
      std::memcpy(aa.grh.dgid.raw, w.gid, 16);
      aa.grh.sgid_index = static_cast<uint8_t>(gid_index_);
      aa.grh.hop_limit = 64;
    }
    ibv_ah* ah = ibv_create_ah(pd_, &aa);
    if (ah == nullptr) {
      RPC_LOG_INFO("verbs transport: no address handle for a peer ({})", std::strerror(errno));
      return false;
    }
    uint32_t index;
    if (!free_ah_entries_.empty()) {
      index = free_ah_entries_.back();
      free_ah_entries_.pop_back();
    } else {
      index = static_cast<uint32_t>(ah_entries_.size());
      ah_entries_.emplace_back();
    }
    ah_entries_[index] = AhEntry{ah, 0, key};
    it = ahs_.emplace(key, index).first;
  }
  ah_entries_[it->second].refs++;
  ah_index = it->second;
  return true;
}

bool VerbsTransport::resolve_remote_routing_info(RoutingInfo& info) {
  VerbsRoutingWire w;
  if (!parse_verbs_routing(info, w)) return false;
  VerbsRoutingInfo v{w, 0, kNoRcIndex};
  if (!resolve_ah(w, v.ah_index)) return false;
  // A connect request's bulk offer: the route's bulk path, or datagrams
  // only when we cannot serve it (the response says which).
  v.rc_index = bulk_route_for(w);
  std::memcpy(info.bytes.data(), &v, sizeof(v));
  return true;
}

void VerbsTransport::release_remote_routing_info(const RoutingInfo& resolved) {
  const VerbsRoutingInfo v = verbs_info_of(resolved);
  if (v.wire.magic != kVerbsRoutingMagic || v.ah_index >= ah_entries_.size() ||
      ah_entries_[v.ah_index].ah == nullptr) {
    RPC_LOG_WARN("verbs transport: released routing info that was never resolved");
    return;
  }
  if (v.rc_index != kNoRcIndex) release_rc(v.rc_index);
  release_ah(v.ah_index);
}

void VerbsTransport::release_ah(uint32_t ah_index) {
  AhEntry& entry = ah_entries_[ah_index];
  if (--entry.refs > 0) return;
  ibv_ah* ah = entry.ah;
  ahs_.erase(entry.key);
  entry = AhEntry{nullptr, 0, {}};
  free_ah_entries_.push_back(ah_index);
  if (sends_posted_ == completed_seq_) {
    ibv_destroy_ah(ah);  // no send can still name it
    return;
  }
  // Sends posted since the last completion we saw may still use it.
  if (!retired_ahs_.empty()) destroy_retired_ahs();
  try {
    retired_ahs_.push_back(RetiredAh{ah, sends_posted_, std::chrono::steady_clock::now()});
  } catch (const std::bad_alloc&) {
    ibv_destroy_ah(ah);  // rather than leak it; at worst one datagram fails
  }
}

uint64_t VerbsTransport::src_key_of(const RoutingInfo& resolved) const {
  const VerbsRoutingWire w = verbs_info_of(resolved).wire;
  uint32_t tail = w.lid;
  if (use_grh_) std::memcpy(&tail, w.gid + 12, sizeof(tail));
  return make_src_key(w.qpn, tail);
}

}  // namespace rpc::detail
