// Names of public enums.
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "librpc/error.h"
#include "librpc/types.h"

namespace rpc {

std::string_view to_string(Errc errc) {
  switch (errc) {
    case Errc::kOk:
      return "ok";
    case Errc::kInvalidSession:
      return "invalid session";
    case Errc::kSessionConnectFailed:
      return "session connect failed";
    case Errc::kSessionDestroyed:
      return "session destroyed";
    case Errc::kSessionReset:
      return "session reset";
    case Errc::kMsgTooLarge:
      return "message too large";
    case Errc::kRespBufferTooSmall:
      return "response buffer too small";
    case Errc::kNoHandler:
      return "no handler for request type";
    case Errc::kInvalidArgument:
      return "invalid argument";
    case Errc::kHandlerFailed:
      return "the server's handler failed (threw an exception)";
    case Errc::kTimedOut:
      return "the request timed out (its deadline passed, or no progress within "
             "request_timeout_ms)";
    case Errc::kCancelled:
      return "the request was cancelled";
    case Errc::kAppError:
      return "the handler answered with an application error";
    case Errc::kResponseDropped:
      return "the handler ran, but the server dropped its response before it arrived (its "
             "receive budget was full)";
  }
  return "unknown error";
}

std::string_view to_string(SessionEvent event) {
  switch (event) {
    case SessionEvent::kConnected:
      return "connected";
    case SessionEvent::kConnectFailed:
      return "connect failed";
    case SessionEvent::kDisconnected:
      return "disconnected";
    case SessionEvent::kReset:
      return "reset";
  }
  return "unknown event";
}

std::string_view to_string(SmErr err) {
  switch (err) {
    case SmErr::kNone:
      return "none";
    case SmErr::kUnknownRpcId:
      return "no Rpc with that rpc_id at the remote";
    case SmErr::kNoRingRoom:
      return "the remote has no RX ring room for another session";
    case SmErr::kTooManySessions:
      return "the remote has too many sessions";
    case SmErr::kTransportMismatch:
      return "the remote Rpc uses another transport";
    case SmErr::kVersionMismatch:
      return "session-management version mismatch";
    case SmErr::kInvalidRoutingInfo:
      return "invalid routing info";
    case SmErr::kTimeout:
      return "no answer from the remote within the timeout";
    case SmErr::kInvalidSession:
      return "no such session at the remote";
    case SmErr::kRemoteFailed:
      return "the remote stopped answering heartbeats or restarted";
    case SmErr::kPktSizeMismatch:
      return "the remote Rpc uses another packet size (mtu_bytes); both ends must use the same";
    case SmErr::kRemoteRpcGone:
      return "the remote Rpc was destroyed";
    case SmErr::kRequestTimeout:
      return "a request made no progress within request_timeout_ms, or 64 requests of one slot "
             "in a row were given up (cancel, deadline) with no answer";
    case SmErr::kOutOfMemory:
      return "the remote could not allocate the session's buffers";
    case SmErr::kBulkPathFailed:
      return "the connection for large-message transfers (RDMA RC) failed: peer gone or "
             "unreachable, or a remote access error";
    case SmErr::kPeerExited:
      return "the same-host peer process exited or closed its end of the channel";
    case SmErr::kPeerMisbehaved:
      return "the same-host peer broke the channel protocol (corrupt ring index or a bad bulk "
             "read)";
  }
  return "unknown reason";
}

}  // namespace rpc
