// Basic identifiers and enums shared by the whole public API.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "librpc/callback.h"
#include "librpc/error.h"
#include "librpc/export.h"

namespace rpc {

// Request type: selects the handler on the server. 0..255.
using ReqType = uint8_t;
// Identifies an Rpc endpoint within its Nexus. 0..254 (255 is reserved).
using RpcId = uint8_t;
// Identifies a session within one Rpc.
using SessionNum = uint16_t;

inline constexpr RpcId kInvalidRpcId = 255;
inline constexpr SessionNum kInvalidSessionNum = 0xffff;

// How a request handler runs.
enum class HandlerMode : uint8_t {
  kForeground,  // in the owning Rpc's event loop; must not block
  kBackground,  // on a Nexus background thread; may block
};

// What a session-event callback is told.
enum class SessionEvent : uint8_t {
  kConnected,
  kConnectFailed,  // see the SmErr reason
  kDisconnected,   // after destroy_session() or the remote's disconnect
  kReset,          // the remote failed; outstanding requests were failed
};

// Reasons carried by session-management refusals and failures.
enum class SmErr : uint8_t {
  kNone = 0,
  kUnknownRpcId,        // no Rpc with that rpc_id at the remote Nexus
  kNoRingRoom,          // no longer sent: sessions are admitted beyond the RX ring
  kTooManySessions,     // the remote's session table is full
  kTransportMismatch,   // the two Rpcs use different transports
  kVersionMismatch,     // incompatible session-management protocol versions
  kInvalidRoutingInfo,  // the peer's routing info could not be resolved
  kTimeout,             // no answer within the configured timeout
  kInvalidSession,      // the session named in the message does not exist
  kRemoteFailed,        // the remote stopped answering heartbeats, or restarted
  kPktSizeMismatch,     // the two Rpcs use different packet sizes (RpcConfig::mtu_bytes)
  kRemoteRpcGone,       // the remote Rpc was destroyed (its process lives on)
  kRequestTimeout,      // a request made no progress for RpcConfig::request_timeout_ms, or
                        // 64 requests of one slot in a row were given up with no answer
  kOutOfMemory,         // the remote could not allocate the session's buffers
  kBulkPathFailed,      // the connection one-sided transfers use failed (verbs RC QP in error:
                        // the peer died, retries ran out, a remote access error)
  kPeerExited,          // samehost: the peer process exited or closed its end of the channel
                        // (noticed by socket hang-up or pidfd, within milliseconds)
  kPeerMisbehaved,      // samehost: the peer broke the channel protocol (an impossible ring
                        // index, a bulk read of memory it did not offer)
};

RPC_EXPORT std::string_view to_string(SessionEvent event);
RPC_EXPORT std::string_view to_string(SmErr err);

class MsgBuffer;
class Rpc;

// What a continuation is told about a finished request.
struct Completion {
  Errc errc;         // kOk, or why the request failed
  MsgBuffer* resp;   // the response buffer given to enqueue_request
  size_t resp_size;  // bytes of response (resp->size() too); 0 on error
  void* tag;         // the tag given to enqueue_request (nullptr for a Callback)
  // With Errc::kAppError: the code the handler gave enqueue_error_response
  // (its meaning is the application's). 0 otherwise.
  uint32_t app_error = 0;
};

// A continuation runs on the Rpc's thread, exactly once per accepted
// request: when the response arrives, the request fails, times out, is
// cancelled, its session ends, or the Rpc is destroyed (then from ~Rpc).
// It may enqueue requests, cancel them, destroy sessions and free
// buffers, but must not run the event loop (not re-entrant: aborts). It
// should not throw; if it does, the Rpc catches the exception, logs it,
// counts it in RpcStats::continuation_exceptions and carries on (the
// request is complete either way).
//
// Two forms: a function pointer with a void* tag (eRPC's), or any callable
// (a lambda with captures), held in a Callback until it runs and then
// destroyed. A callable of up to three pointers' size is stored without
// allocating (Callback::kStoredInline); what it captures must stay valid
// until it runs.
using Continuation = void (*)(Rpc& rpc, const Completion& completion);
using ContinuationFn = Callback<void(Rpc& rpc, const Completion& completion)>;

// Names one request of an Rpc, for Rpc::cancel(). Never reused within the
// Rpc's life (a 48-bit count per Rpc); the default value names no request.
struct RequestId {
  uint64_t value = 0;
  friend bool operator==(RequestId, RequestId) = default;
};

// The outcome of a request for `co_await rpc.call(...)` and call_sync().
struct CallResult {
  Errc errc{};             // Errc::kOk (0), or why the request failed
  size_t resp_size = 0;    // bytes written into the response buffer
  uint32_t app_error = 0;  // with Errc::kAppError: the handler's code
  bool ok() const { return errc == Errc{}; }
};

// Per-request settings (Rpc::enqueue_request).
struct RequestOptions {
  // The request fails with Errc::kTimedOut when it has not completed this
  // long after it was enqueued (0: no deadline of its own; the request is
  // then bounded only by RpcConfig::request_timeout_ms, which resets the
  // session). Checked every half RTO, so it fires up to about rto_us / 2
  // late. Unlike request_timeout_ms, the session stays up: see
  // Rpc::cancel() for what happens to a request that ends early (a large
  // request sent by one-sided read may end only when the server answers).
  std::chrono::microseconds timeout{0};
};

}  // namespace rpc
