// Counters kept by an Rpc and by each of its sessions (plain integers,
// updated on the Rpc's thread only; read them from that thread), and by a
// Nexus's session-management thread (NexusStats: a snapshot, taken from
// any thread).
#pragma once

#include <cstdint>

namespace rpc {

// Why a received datapath packet was dropped.
struct DropCounters {
  uint64_t too_short = 0;        // shorter than a header
  uint64_t bad_magic = 0;        // magic nibble wrong
  uint64_t bad_header = 0;       // impossible field values (size, pkt_num)
  uint64_t unknown_session = 0;  // no such session, or not connected
  uint64_t wrong_source = 0;     // sender is not the session's peer
  uint64_t stale = 0;            // old req_num or duplicate packet
  uint64_t out_of_order = 0;     // ahead of the next expected packet
  uint64_t busy = 0;             // the slot cannot take it now
  uint64_t rx_budget = 0;        // would exceed the session's, host's or Rpc's receive budget
  uint64_t out_of_memory = 0;    // no buffer for the request could be allocated
  uint64_t oversized = 0;        // longer than our packet size (a peer with another MTU)
  // Arrived with every receive buffer full, so never reached the engine
  // (udp: the kernel's drop count for the socket, read at most once a
  // millisecond, which also counts datagrams with a bad checksum and the
  // rare overflow of its byte budget; fake: its inbox; verbs and fabric do
  // not report it). Expected only when sessions were admitted beyond the
  // RX ring (RpcStats::ring_credits_overcommitted).
  uint64_t rx_ring_full = 0;
};

struct SessionStats {
  uint64_t tx_pkts = 0;
  uint64_t rx_pkts = 0;
  uint64_t retransmissions = 0;  // slot rollbacks after an RTO
  // Packets answered twice: sent again although the first copy had
  // arrived (a timeout while the peer was slow, not lost).
  uint64_t spurious_retransmissions = 0;
  uint64_t requests_completed = 0;
  // Client: smoothed round trip of the session's packets (to their credit
  // return or response, handler time included) and the RTO derived from
  // it, in microseconds; 0 before the first sample. Computed by
  // Rpc::session_stats() when called: a kept pointer shows the values of
  // the last call.
  uint64_t srtt_us = 0;
  uint64_t rto_us = 0;
  // Client, with RpcConfig::congestion_control: the session's sending
  // rate (Timely), in Mbit/s; RpcConfig::cc_link_gbps when uncongested.
  // Packets the timing wheel held back to pace the session.
  uint64_t cc_rate_mbps = 0;
  uint64_t cc_paced_pkts = 0;
};

struct RpcStats {
  uint64_t tx_pkts = 0;
  uint64_t rx_pkts = 0;
  uint64_t tx_dropped_injected = 0;  // dropped by drop_tx_fraction
  uint64_t retransmissions = 0;
  uint64_t spurious_retransmissions = 0;  // packets answered twice (see SessionStats)
  uint64_t requests_completed = 0;        // client side
  uint64_t handlers_run = 0;              // server side
  uint64_t duplicate_requests = 0;        // answered from a slot's cache
  uint64_t credit_returns_coalesced = 0;  // server: explicit credit returns folded into a
                                          // later one for the same request (cumulative)
  uint64_t bulk_reads = 0;                // one-sided reads posted (large messages)
  uint64_t bulk_reads_failed = 0;         // completed with an error (the sender retries)
  uint64_t bulk_reads_orphaned = 0;       // whose reader stopped waiting (request failed,
                                          // session ended): finished before buffers were reused
  uint64_t bulk_exposures = 0;            // payloads exposed to a peer for one transfer
  uint64_t bulk_expose_failed = 0;        // exposures refused: sent as datagrams instead
  uint64_t bulk_paths_failed = 0;         // connections (verbs RC QPs, samehost channels) that
                                          // failed under live sessions; those were reset
  // Message payload bytes the engine copied: request and response packets
  // assembled into a buffer from the RX ring (multi-packet messages, and
  // requests kept past their handler). Not counted: what the transport
  // itself moves (the kernel's socket copies, udp's gathering of a
  // segmented send, a one-sided read, samehost's ring), and single-packet
  // requests handed to handlers in place.
  uint64_t payload_bytes_copied = 0;
  uint64_t sessions_created = 0;
  uint64_t sessions_freed = 0;
  uint64_t sessions_reset = 0;       // reset because the remote failed
  uint64_t sm_refused = 0;           // session-management requests this Rpc refused
  uint64_t sm_replays_refused = 0;   // connects of already ended sessions refused
  uint64_t sm_requests_dropped = 0;  // SM requests dropped: too many queued (a flood)
  uint64_t requests_timed_out = 0;   // failed with kTimedOut (request_timeout_ms)
  // Server: requests received in part, stale, dropped to make room for
  // others (their clients are told to start over).
  uint64_t partial_requests_abandoned = 0;
  // Client: requests sent again from their first packet because the
  // server said it dropped the part it had.
  uint64_t requests_restarted = 0;
  uint64_t requests_past_deadline = 0;  // failed with kTimedOut (RequestOptions::timeout)
  uint64_t requests_cancelled = 0;      // ended by Rpc::cancel()
  // Of those two, requests sent by one-sided read whose end waited for the
  // server's answer (it may have been reading them: docs/api.md).
  uint64_t requests_end_deferred = 0;
  uint64_t handler_exceptions = 0;       // handlers that threw (kHandlerFailed sent)
  uint64_t continuation_exceptions = 0;  // continuations that threw (caught, logged)
  uint64_t task_exceptions = 0;          // spawned coroutines that threw (caught, logged)
  uint64_t handlers_unanswered = 0;      // coroutine handlers that ended without answering
  uint64_t callback_exceptions = 0;      // session callbacks that threw (caught, logged)
  // Message buffers (alloc_msg_buffer, and the engine's own) refused
  // because the Rpc held RpcConfig::max_msg_buffer_bytes.
  uint64_t msg_buffer_allocs_over_limit = 0;
  // A level: bytes of registered memory the Rpc holds for message buffers
  // (what max_msg_buffer_bytes bounds).
  uint64_t msg_buffer_bytes = 0;
  // Levels, not counters: RX ring entries the sessions' credits hold, and
  // credits granted beyond the ring's room (docs/design.md, "Sessions and
  // ring room").
  uint64_t ring_entries_reserved = 0;
  uint64_t ring_credits_overcommitted = 0;
  DropCounters drops;
  // Server: cached responses dropped to make room when the receive budget
  // refused a request (their clients get Errc::kResponseDropped should they
  // ask again), and connects refused because the remote host held
  // RpcConfig::max_sessions_per_host sessions.
  uint64_t responses_dropped = 0;
  uint64_t sessions_refused_host_share = 0;
  // Client, with RpcConfig::congestion_control: rate cuts for
  // retransmission timeouts (one per loss event), and those given back
  // because every timeout of the event proved spurious (each slot it
  // resent was answered twice: nothing had been lost).
  uint64_t cc_timeout_cuts = 0;
  uint64_t cc_timeout_cuts_undone = 0;
  // Client: answers to packets a timeout took back, taken before the
  // packets were sent again (their first copies had arrived).
  uint64_t late_answers_accepted = 0;
  // A level: bytes of the Rpc's receive budget held now (requests being
  // received or handled, cached responses).
  uint64_t rx_budget_bytes = 0;
};

// The session-management channel of one Nexus: SM messages, failure
// detection of remote Nexuses, and the checks of claimed restarts.
struct NexusStats {
  uint64_t rx_msgs = 0;
  uint64_t rx_dropped = 0;       // failed decode, unexpected response, incarnation 0
  uint64_t rx_rejected = 0;      // decoded, but a request no Rpc could accept
  uint64_t retransmissions = 0;  // SM requests and probes sent again
  uint64_t timeouts = 0;         // SM requests never answered (sm_timeout_ms)
  uint64_t heartbeats_sent = 0;
  uint64_t remote_failures = 0;  // remote Nexuses declared failed
  // A watched remote's message carried another incarnation: probed before
  // any session is reset (docs/reliability.md).
  uint64_t probes_sent = 0;            // first transmissions, not retries
  uint64_t probes_answered = 0;        // probes from remotes, answered
  uint64_t probe_timeouts = 0;         // no valid answer: nothing changed
  uint64_t incarnation_forgeries = 0;  // the remote answered with the known one
  uint64_t probe_resp_dropped = 0;     // wrong nonce, address, or none outstanding
  uint64_t rx_disputed = 0;            // requests held back while a probe is outstanding
  // Sent by the Nexus on behalf of an Rpc that no longer exists.
  uint64_t session_resets_sent = 0;
  uint64_t orphan_disconnects_sent = 0;  // for connects answered after the Rpc left
};

}  // namespace rpc
