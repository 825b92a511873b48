// The one transport interface. Burst-granular: the engine makes one virtual
// call per burst of packets, never per packet. Implementations: udp/ and
// fake/ built in, verbs/ and fabric/ as modules (registry.h). Nothing
// third-party appears here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "common/mem_reg.h"
#include "common/routing_info.h"
#include "librpc/config.h"
#include "librpc/error.h"

namespace rpc::detail {

// The packet-size bound every transport takes for RpcConfig::mtu_bytes 0
// where it has no better one: a standard Ethernet link.
inline constexpr size_t kDefaultMtuBytes = 1500;

// One payload peers may read with one-sided operations: exactly
// [addr, addr + len) of registered memory, read-only, under a key drawn for
// this exposure, until revoke_exposure(). The bulk security model
// (docs/reliability.md): nothing else of ours is ever remotely accessible.
struct Exposure {
  uint64_t remote_addr = 0;  // how peers name the first byte
  uint64_t key = 0;          // verbs rkey, libfabric MR key, fake key
  uint32_t handle = kNone;   // the transport's id of the exposure
  static constexpr uint32_t kNone = UINT32_MAX;
  bool active() const { return handle != kNone; }
};

struct TransportCaps {
  size_t max_pkt_bytes = 0;     // header + data of one datagram
  size_t max_data_per_pkt = 0;  // max_pkt_bytes - kPktHeaderBytes
  size_t rx_ring_size = 0;      // RX ring entries
  size_t max_inline_bytes = 0;  // sends up to this size may be inlined
  bool bulk = false;            // post_read available
  // No network between the peers, nothing to congest (samehost: memory):
  // the engine runs no congestion control over it, whatever
  // RpcConfig::congestion_control says. Timely's RTT signal there only
  // measures the peer's scheduling, and pacing by it throttled a 32 B
  // stream to a tenth of its rate.
  bool congestion_free = false;
  // A floor under every session's retransmission timeout, above
  // RpcConfig::rto_us (0: none). For a medium that loses nothing between
  // honest peers (samehost: credits keep the peer's ring from filling), a
  // timeout means a descheduled peer, not a loss, and a 5 ms floor let
  // every longer preemption of a shared machine's core resend a request.
  uint64_t min_rto_us = 0;
};

// One datagram to send: a header and a data slice, both inside registered
// buffers (zero copy), not necessarily the same one: a view of application
// memory (Rpc::app_msg_buffer) has its data in the application's
// registration and its headers in the engine's. The route is a resolved
// RoutingInfo. Control packets (no data) have headers in unregistered
// memory, small enough to be inlined or copied.
struct TxItem {
  const RoutingInfo* route;
  const uint8_t* hdr;   // kPktHeaderBytes bytes
  const uint8_t* data;  // may be nullptr when data_len == 0
  uint32_t data_len;
  uint32_t data_lkey;
  uint32_t hdr_lkey;
};

// One received datagram, in an RX ring buffer owned by the transport. It
// stays valid until the engine returns it with post_recvs(). The engine
// returns every packet of a burst before its next rx_burst, and a
// transport may rely on it: udp with GRO hands out merged packets in its
// staging buffers and reads no more until they are returned.
struct RxPacket {
  uint8_t* buf;
  uint32_t len;
  uint64_t src_key;  // identifies the sender, see src_key_of()
};

// A one-sided operation: copy len bytes between a local registered buffer
// and a remote one.
struct BulkOp {
  const RoutingInfo* route;
  uint8_t* local_addr;
  uint32_t local_lkey;
  void* local_desc;
  uint64_t remote_addr;
  uint64_t remote_key;
  uint32_t len;
  uint64_t cookie;  // returned in the completion
};

struct BulkCompletion {
  uint64_t cookie;
  bool ok;
};

// Datagrams a transport dropped before the engine saw them, by reason.
// Plain counters, updated on the Rpc's thread.
struct TransportRxDrops {
  uint64_t oversized = 0;  // longer than our packet size: a peer with another MTU
  // Arrived when every receive buffer was full (udp: the socket's receive
  // buffer; fake: the inbox), as far as the transport can tell.
  uint64_t ring_full = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Read by the engine into RpcStats::drops.
  TransportRxDrops rx_drops;

  virtual const char* name() const = 0;
  // What the transport picked where it had a choice (fabric: the libfabric
  // provider; verbs: the RDMA device, port and GID, and why that GID);
  // empty where there was none.
  virtual std::string provider() const { return {}; }
  virtual TransportCaps caps() const = 0;
  // Control path (Rpc::stats): brings rx_drops up to date where the count
  // lives outside the transport (udp: the kernel's, per socket).
  virtual void refresh_rx_drops() {}

  // --- datagram path ---
  // Sends every item (or drops it if the network cannot take it now:
  // datagram semantics, loss recovery is the engine's job).
  // Every item is handed to the kernel or the NIC before it returns (there
  // is no separate flush: no transport needed one, and the hot path paid a
  // virtual call per burst for it).
  virtual void tx_burst(std::span<const TxItem> items) = 0;
  // Receives up to out.size() packets into the RX ring; returns how many.
  virtual size_t rx_burst(std::span<RxPacket> out) = 0;
  // Returns the n oldest RX ring buffers handed out by rx_burst.
  virtual void post_recvs(size_t n) = 0;

  // --- routing ---
  virtual void fill_local_routing_info(RoutingInfo& out) const = 0;
  // Resolves a peer's routing info in place. False when it is malformed.
  // Each successful call takes a reference on whatever per-peer state the
  // transport keeps (address-vector entry, address handle); the caller
  // gives it back with release_remote_routing_info().
  virtual bool resolve_remote_routing_info(RoutingInfo& info) = 0;
  // The session that resolved this routing info has ended: drops the
  // reference its resolve took, and frees the peer's state when no session
  // uses it any more, so peers that come and go do not grow the transport.
  // Call once per successful resolve, with the info it resolved; packets
  // must no longer be sent on that route afterwards.
  virtual void release_remote_routing_info(const RoutingInfo& resolved) { (void)resolved; }
  // The src_key that packets from the peer with this resolved info carry.
  virtual uint64_t src_key_of(const RoutingInfo& resolved) const = 0;

  // --- connection hooks (transports with per-peer connections: verbs RC) ---
  // Session connect is one request and one response; transports that need
  // a connection per pair of Rpcs for bulk transfers set it up inside them.
  // The defaults suit connectionless transports: the local routing info as
  // it is, the remote one resolved as usual.
  //
  // Client, before sending a connect request to the Rpc peer_hint names
  // (any value unique per remote Rpc): turns `offer` (a copy of the local
  // routing info) into what the request carries. False when the transport
  // cannot (out of resources); the session then fails to connect. An offer
  // holds resources until resolve_connect_answer() succeeds with it or
  // cancel_connect() gives it back.
  virtual bool prepare_connect(RoutingInfo& offer, uint64_t peer_hint) {
    (void)offer;
    (void)peer_hint;
    return true;
  }
  // Server: the routing info its connect response carries to the client
  // whose routing info `resolved` is (resolved by resolve_remote_routing_info).
  // Deterministic: a retransmitted request gets the same answer.
  virtual void fill_connect_answer(const RoutingInfo& resolved, RoutingInfo& out) const {
    (void)resolved;
    fill_local_routing_info(out);
  }
  // Client: resolves the server's answer to the request that carried
  // `offer`, like resolve_remote_routing_info (the same reference to give
  // back with release_remote_routing_info). On success the offer is used up
  // (do not cancel it); on failure it is still held.
  virtual bool resolve_connect_answer(RoutingInfo& answer, const RoutingInfo& offer) {
    (void)offer;
    return resolve_remote_routing_info(answer);
  }
  // Client: gives back an offer whose connect failed or was abandoned.
  virtual void cancel_connect(const RoutingInfo& offer) { (void)offer; }

  // --- memory ---
  virtual Result<MemReg> register_memory(void* addr, size_t len) = 0;
  virtual void deregister_memory(const MemReg& reg) = 0;

  // --- bulk path (only where caps().bulk) ---
  // Lets the peer at `reader` (a resolved route) read [addr, addr + len)
  // of the registered memory `reg` until revoke_exposure(): read-only,
  // under a fresh key. Where the transport can bind an exposure to one
  // peer (verbs: a memory window on the pair's RC QP), no other peer can
  // use it even with the key; elsewhere the key is what protects it. Once
  // per bulk message sent; allocation-free in steady state. False when the
  // transport cannot (out of resources, no working connection to the
  // reader): the message then travels as datagrams.
  virtual bool expose_for_read(const RoutingInfo& reader, const void* addr, size_t len,
                               const MemReg& reg, Exposure& out) {
    (void)reader;
    (void)addr;
    (void)len;
    (void)reg;
    (void)out;
    return false;
  }
  // Ends an exposure (a no-op on an inactive one) and marks it inactive.
  // After it returns, a peer's read of it fails, and one in flight may
  // fail; it never sees bytes written later. samehost and fabric over shm
  // are the exception: their reads are the kernel's (process_vm_readv),
  // and one already under way may still see them (docs/transports.md,
  // "samehost", "Bulk on shm").
  virtual void revoke_exposure(Exposure& exposure) { exposure = Exposure{}; }
  // Reads op.len bytes from the remote buffer into the local one. False
  // when the op could not be posted (try again later). The local buffer
  // belongs to the transport until poll_bulk() reports the cookie.
  virtual bool post_read(const BulkOp& op) = 0;
  // Collects finished one-sided operations (successful or failed).
  virtual size_t poll_bulk(std::span<BulkCompletion> out) = 0;
  // The connection bulk operations on this resolved route travel on (0:
  // none, or the transport has no connections). Routes of sessions to the
  // same peer Rpc may share one.
  virtual uint64_t bulk_path_of(const RoutingInfo& resolved) const {
    (void)resolved;
    return 0;
  }
  // Connections that failed since the last call (the peer died, retries
  // ran out, a remote access error): no bulk operation on them will
  // succeed again, so the engine ends every session whose bulk_path_of()
  // is one of them; a new connect builds a new connection. Their
  // operations are still reported by poll_bulk() (as failed) first.
  virtual size_t poll_failed_bulk_paths(std::span<uint64_t> out) {
    (void)out;
    return 0;
  }
  // Why a path poll_failed_bulk_paths() just reported failed, as its
  // sessions' callbacks are told (samehost: the peer process exited).
  virtual SmErr bulk_path_failure_reason(uint64_t path) const {
    (void)path;
    return SmErr::kBulkPathFailed;
  }
  // Ends every one-sided operation still outstanding: when it returns, none
  // of them touches local memory any more, and poll_bulk() reports none of
  // them. Used by ~Rpc when reads do not finish in time; the transport
  // need not carry traffic afterwards.
  virtual void quiesce_bulk() {}
};

// Creates the transport named in config.transport. bind_ip is the IPv4
// address of the Nexus (the udp transport binds its socket there).
Result<std::unique_ptr<Transport>> make_transport(const RpcConfig& config,
                                                  const std::string& bind_ip);

}  // namespace rpc::detail
