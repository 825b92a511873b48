// Configuration of a Nexus (one per process) and of an Rpc (one per thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "librpc/types.h"

namespace rpc {

struct NexusConfig {
  // "host:port" of this process's session-management UDP socket. The host
  // must be an IPv4 address or a name that resolves to one; datapath
  // sockets of the udp transport bind to the same address.
  std::string uri = {};
  // Threads that run HandlerMode::kBackground handlers.
  size_t num_bg_threads = 1;
  // A session-management request is retransmitted every sm_retry_ms until
  // answered, and fails with SmErr::kTimeout after sm_timeout_ms.
  uint32_t sm_retry_ms = 50;
  uint32_t sm_timeout_ms = 1000;
  // Failure detection: Nexuses that share sessions send each other a
  // heartbeat every heartbeat_interval_ms; a remote silent for
  // failure_timeout_ms (or one that restarted) is declared failed, and every
  // session to it is reset.
  uint32_t heartbeat_interval_ms = 100;
  uint32_t failure_timeout_ms = 1000;
};

// Told about connect / connect-failure / disconnect / reset of a session.
// Runs on the Rpc's thread, inside the event loop: it must not run the loop
// itself (aborts). An exception from it is caught, logged and counted in
// RpcStats::callback_exceptions.
using SessionCallback = std::function<void(SessionNum, SessionEvent, SmErr)>;

// What a server Rpc is told about a session a client opened to it.
struct ServerSessionEvent {
  SessionNum session_num;  // the server end's number
  SessionEvent event;      // kConnected, kDisconnected (by its client), kReset
  SmErr reason;            // with kReset: kRemoteFailed (the client's process failed or
                           // restarted) or kBulkPathFailed; kNone otherwise
  RpcId client_rpc_id;     // the client Rpc's id at its Nexus
  std::string client_uri;  // "host:port" of the client's Nexus
};
// Same rules as SessionCallback (the Rpc's thread, inside the event loop).
using ServerSessionCallback = std::function<void(const ServerSessionEvent&)>;

// verbs: how large messages travel (RpcConfig::verbs_bulk).
enum class VerbsBulk : uint8_t {
  // DC where the device offers it (an mlx5 NIC, librpc built with mlx5dv),
  // else RC.
  kAuto,
  // RDMA READ over RC queue pairs, one per pair of Rpcs.
  kRc,
  // RDMA READ over mlx5 Dynamically Connected transport: one initiator
  // (DCI) and one target (DCT) per Rpc reach every peer. The Rpc
  // constructor throws where it is not available. Never run on hardware
  // by the project's tests (docs/transports.md).
  kDc,
  // No one-sided path: large messages go as multi-packet datagrams.
  kOff,
};

struct RpcConfig {
  RpcId rpc_id = 0;
  // "udp" (default), "fake" (in-process, for tests), "samehost" (two
  // processes on one host, through shared memory; docs/transports.md),
  // "verbs" (RDMA UD datagrams; where the library was built with
  // libibverbs), "fabric" (libfabric RDM endpoints, e.g. AWS EFA; where
  // built with libfabric).
  std::string transport = "udp";
  // Packet size bounds, in bytes; both ends of a session must end up with
  // the same packet size. 0 (default): the transport's own choice — udp
  // 1500 (a standard Ethernet link), verbs the port's active MTU, fabric
  // the provider's inject size where it is at least 1500 (shm: 4096,
  // copied through its shared queue with no rendezvous), tcp;ofi_rxm 9000
  // (it sends up to 16 KiB eagerly), else 1500.
  // Otherwise the link MTU as configured on the interface: udp subtracts
  // IP and UDP headers (1500 gives 1472-byte datagrams), verbs and fabric
  // take the smaller of it and the port's MTU or the provider's largest
  // message. Loopback and jumbo-frame networks may use up to 65535.
  size_t mtu_bytes = 0;
  // udp: hand runs of equal-size datagrams to one destination to the kernel
  // as one send (UDP GSO, UDP_SEGMENT), and let it hand them back merged
  // (UDP GRO), where the kernel has them (Linux >= 5.0); each falls back
  // to one datagram per message at run time where it is missing or fails.
  // false: never (sendmmsg/recvmmsg of single datagrams).
  bool udp_offload = true;
  // verbs: the RDMA device (as `ibv_devices` names it; empty: the first
  // device whose port is active), its port, and the GID index to address
  // it by. -1 (default): choose as RoCE users do: the RoCEv2 GID that is
  // the Nexus's IP (::ffff:a.b.c.d), else the first RoCEv2 GID with a
  // routable address, else 0 (InfiniBand; link-local only); Rpc's
  // transport_provider() says which and why. >= 0: that index (see
  // `ibv_devinfo -v`); below -1: the Rpc constructor throws. The packet
  // size is the smaller of mtu_bytes and the port's active MTU.
  std::string verbs_device = {};
  uint8_t verbs_port = 1;
  int verbs_gid_index = -1;
  // verbs: the bulk path for messages above bulk_threshold_bytes (see
  // VerbsBulk). A peer whose path differs is read over RC where both have
  // it, else by datagrams; the path chosen, and why, is logged at start-up.
  VerbsBulk verbs_bulk = VerbsBulk::kAuto;
  // fabric: the libfabric provider, as `fi_info -l` names it ("efa",
  // "tcp;ofi_rxm", "shm"); empty: the first that offers RDM endpoints.
  std::string fabric_provider = {};
  // samehost: copy each received packet out of the shared ring before the
  // engine sees it. false (default): packets are read in place, and a
  // foreground handler of a one-packet request reads it straight from the
  // ring slot, which the peer process can still rewrite while the handler
  // runs: the engine reads each header once and is not affected, but the
  // handler may see the bytes change under it, so it must read each field
  // it relies on once (into a local) before it checks and uses it. true:
  // handlers see a private copy the peer cannot touch, for one memcpy per
  // packet (docs/transports.md, "samehost"). Multi-packet and bulk
  // requests are always copied into buffers of ours.
  bool samehost_copy_rx = false;
  // RX ring entries. Each session reserves its credits' worth of them at
  // both ends, so this bounds the number of sessions (rx_ring_size /
  // session_credits with every session at the default).
  size_t rx_ring_size = 4096;
  // Packets a client may have in flight on one session (its window), within
  // [8, rx_ring_size] and at most 65535. A client asks for this many at
  // connect and gets min(its own, the server's): the bandwidth of one
  // session over datagrams is about credits x packet size per round trip,
  // so messages larger than bulk_threshold_bytes on a transport without a
  // bulk path (udp) move faster with more, at the cost of ring
  // room (fewer sessions per Rpc). docs/benchmarks.md has the measurements.
  size_t session_credits = 64;
  // Most sessions (client and server ends) this Rpc keeps at once.
  size_t max_sessions = 1024;
  // Most server sessions one remote host (an IPv4 address: every process
  // on it, samehost clients included) may hold open with this Rpc, so that
  // one client cannot take every session and shut out the others; its
  // connects beyond it are refused with SmErr::kTooManySessions. 0: half of
  // max_sessions (at least 1). A server made for many sessions from one
  // client host (bench/sessions) raises it to max_sessions.
  size_t max_sessions_per_host = 0;
  // Retransmission timeout floor: a slot that made no progress for the
  // session's RTO rolls back and resends (go-back-N). The RTO is measured
  // as TCP does (RFC 6298: smoothed round trip + 4 x its variation, from
  // packets sent once), never below this; a slot's doubles for each of its
  // timeouts in a row (at most 64x, and never past 1 s unless this floor
  // is higher); SessionStats has srtt_us, rto_us. samehost sessions use
  // at least 50 ms: nothing is lost there between honest peers, so a
  // timeout is a descheduled peer (docs/transports.md).
  uint64_t rto_us = 5000;
  // Upper bound on waiting: a request that gets no further for this long
  // (server silent, its Rpc gone, or a handler that never responds) fails
  // with Errc::kTimedOut, and its session is reset (the others fail with
  // kSessionReset; SessionEvent::kReset, SmErr::kRequestTimeout). 0: never.
  uint32_t request_timeout_ms = 30000;
  // Server: a request received in part is kept for as long as its session
  // lives, however slowly it arrives. Only when the receive budget below
  // refuses another request may one that has been silent this long (or
  // arrives slower than 16 KB/s overall) be dropped to make room; its
  // client is told and sends it again from its first packet
  // (RpcStats::partial_requests_abandoned, requests_restarted).
  // docs/reliability.md, "Requests received in part".
  uint32_t partial_request_timeout_ms = 1000;
  // Server receive budget: bytes a peer makes this Rpc hold. Requests being
  // received or handled (multi-packet and bulk requests, and copies for
  // background handlers; single-packet foreground requests cost nothing)
  // count per session, per remote host and per Rpc; responses a handler
  // allocated, kept until the slot's next request in case the client asks
  // again, count per host and per Rpc. A request beyond a budget is dropped
  // and counted (RpcStats::drops.rx_budget), and the client retransmits; a
  // new request is also refused while its host or the Rpc is at or over its
  // budget (a response cannot be refused: its request was taken). What a
  // refusal may then drop to make room, so that nobody waits forever: a
  // stale request received in part (partial_request_timeout_ms), and a
  // response sent in full at least that long ago, whose client, if it asks
  // again, gets Errc::kResponseDropped (docs/reliability.md, "Budgets").
  // Per session, 0 means two of the largest messages (2 x max_msg_size()),
  // or the per-Rpc budget if that is smaller, but never less than one
  // (max_msg_size(): 16 MiB - 1 over udp); a per-Rpc budget below one
  // largest message therefore needs rx_budget_per_session_bytes set too
  // (requests larger than it are then never taken; the constructor throws
  // otherwise). Per host, 0 means half the per-Rpc budget, at least the
  // per-session one; per Rpc, at least the per-host budget.
  size_t rx_budget_per_session_bytes = 0;
  size_t rx_budget_per_host_bytes = 0;
  size_t rx_budget_per_rpc_bytes = size_t{64} << 20;
  // Registered memory this Rpc holds for message buffers, the
  // application's and its own (requests being received, responses, each
  // slot's buffers), in bytes: the 2 MiB chunks that buffers up to 2 MiB
  // are carved from (a chunk counts whole, and stays mapped once mapped),
  // the regions of larger buffers, and the regions kept for reuse (given
  // back first when a new region would pass the limit). Past it,
  // alloc_msg_buffer returns an invalid buffer, counted in
  // RpcStats::msg_buffer_allocs_over_limit and logged once (as an error);
  // a request the engine has no buffer for is dropped
  // (drops.out_of_memory) and its client retransmits. Freeing buffers
  // makes room again: a large buffer's region at once, a small one for
  // buffers of its size class. RpcStats::msg_buffer_bytes is what the Rpc
  // holds now. At least rx_budget_per_rpc_bytes and 2 MiB (the constructor
  // throws otherwise); SIZE_MAX: no limit.
  size_t max_msg_buffer_bytes = size_t{4} << 30;
  // Messages larger than this use the transport's one-sided bulk path when
  // it has one (verbs, fabric, fake). Ignored by udp.
  size_t bulk_threshold_bytes = 16384;
  // Congestion control: Timely (a per-session rate from the gradient of its
  // round-trip times) and a timing wheel that paces the packets of sessions
  // below the full rate; an uncongested session is never paced (eRPC's
  // bypasses), and costs about one comparison per packet. On by default
  // (docs/benchmarks.md, "Incast" and "Cost of congestion control"); it
  // acts on the sending side, so a client's setting governs its sessions.
  // cc_link_gbps is the rate of an uncongested session: the link's speed.
  // The rate grows while a session's RTT is within cc_t_low_us of the
  // smallest it has seen, and falls in proportion once it is more than
  // cc_t_high_us above it; in between it follows the RTT's gradient. A
  // retransmission timeout halves it. The defaults suit kernel UDP paths,
  // whose samples carry hundreds of microseconds of host delays; eRPC uses
  // 50 and 1000 on RDMA NICs. samehost has no network to congest and
  // ignores it.
  bool congestion_control = true;
  double cc_link_gbps = 10.0;
  uint32_t cc_t_low_us = 300;
  uint32_t cc_t_high_us = 800;
  // Fault injection: fraction of datapath TX packets silently dropped.
  double drop_tx_fraction = 0.0;
  // Client sessions' events (create_session's sessions).
  SessionCallback session_callback = {};
  // Opt-in: server sessions' events, with the client's address (eRPC
  // issue #69). Not told when the server Rpc itself is destroyed.
  ServerSessionCallback server_session_callback = {};
  // Opaque pointer handed to handlers via ReqHandle::context().
  void* context = nullptr;
};

}  // namespace rpc
