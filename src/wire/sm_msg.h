// Session-management messages, exchanged by Nexuses over kernel UDP.
// Fixed layout, explicit little-endian byte order, magic-, version- and
// length-checked. See docs/wire_format.md for the table.
//
//   off size field
//    0   4   magic               kSmMagic
//    4   2   version             kSmVersion
//    6   2   length              total bytes of the message (kSmMsgBytes)
//    8   1   type                SmMsgType
//    9   1   err                 rpc::SmErr (refusal reason in responses)
//   10   1   transport           the wire id of the sender Rpc's transport
//                                 (transport/registry.cc; 0 is never assigned)
//   11   1   client_rpc_id
//   12   1   server_rpc_id
//   13   1   routing_len         bytes of routing used, <= RoutingInfo::kMaxBytes
//   14   2   client_session_num
//   16   2   server_session_num
//   18   6   incarnation         the sender Nexus's incarnation (48 bits): random,
//                                 drawn at start-up; a new value from the same
//                                 address means the peer process may have
//                                 restarted (confirmed by a probe, see below)
//   24   8   token               unique per request; echoed by the response
//                                 (kProbeReq/kProbeResp: the probe's nonce)
//   32  48   routing             sender's datapath routing info
//   80   4   max_data_per_pkt    sender Rpc's data bytes per packet (v2; 0 where
//                                 meaningless: heartbeats, probes, refusals)
//   84   2   session_credits     v3. kConnectReq: the credits the client asks
//                                 for; kConnectResp: the credits granted (at
//                                 most those asked); 0 in every other message
//   86   2   reserved            v3: sent as zero, ignored
//   88       (end)
//
// Bytes 0..8 (magic, version, length, type) and the token are the envelope: they keep their place
// in every version, so a peer can refuse a message of another version by token.
//
// Version history: 1 = 80 bytes, types 1..5. 2 = max_data_per_pkt appended,
// types 6..9 (probes, session reset) added. 3 = 88 bytes: session_credits
// negotiated at connect (RpcConfig::session_credits) and two reserved bytes.
//
// Routing on the receiving Nexus's SM thread (sm_thread.cc; every message
// first proves its sender alive, see "Incarnations" below):
//   kConnectReq, kDisconnectReq  -> the Rpc server_rpc_id (the server end);
//                                   none: answered kUnknownRpcId by the SM thread
//   kSessionResetReq             -> the Rpc client_rpc_id (the client end; the
//                                   server end is gone); none: answered
//                                   kSessionResetResp kUnknownRpcId
//   kProbeReq                    -> answered by the SM thread (kProbeResp, same
//                                   token); never reaches an Rpc
//   kConnectResp, kDisconnectResp, kSessionResetResp
//                                -> only if it answers an outstanding request
//                                   (same token, type and address): to the Rpc
//                                   client_rpc_id that sent it, or consumed by
//                                   the SM thread when the SM thread sent it
//                                   (session resets, disconnects of abandoned
//                                   connects); otherwise dropped
//   kProbeResp                   -> consumed by the SM thread if it carries the
//                                   outstanding nonce of a probe to that address
//   kHeartbeat                   -> consumed by the SM thread
// is_request() is true exactly for the types that expect a response, i.e.
// those sm_response_type() maps.
//
// Incarnations: a message from a watched remote that carries an incarnation
// other than the known one does not, by itself, reset anything (anyone can
// forge a datagram). The SM thread probes that address with a random nonce;
// only a kProbeResp echoing the nonce, from that address, with a new
// incarnation, declares the old process failed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "common/routing_info.h"
#include "librpc/types.h"

namespace rpc::detail {

inline constexpr uint32_t kSmMagic = 0x4350524C;  // "LRPC" in byte order
// 4: the datapath changed meaning under the same layout (issue 13): response
// status 3 (an application error) and a server that takes a slot's request
// numbers up to kMaxReqsGivenUp ahead. A v3 peer would take the one for
// success and wedge on the other, so the versions refuse each other.
// 5: 32 request slots per session instead of 8 (kSessionReqWindow): the
// server finds a request's slot by req_num % 32, so a v4 peer would put
// requests in the wrong slots.
inline constexpr uint16_t kSmVersion = 5;
inline constexpr size_t kSmMsgBytes = 88;
inline constexpr size_t kSmEnvelopeBytes = 32;  // magic..token
inline constexpr uint64_t kIncarnationMask = (1ull << 48) - 1;

enum class SmMsgType : uint8_t {
  kConnectReq = 1,
  kConnectResp = 2,
  kDisconnectReq = 3,
  kDisconnectResp = 4,
  kHeartbeat = 5,         // one-way "still alive", between Nexuses that share sessions
  kProbeReq = 6,          // "prove your incarnation": token is a random nonce (v2)
  kProbeResp = 7,         // echoes the nonce, stamped with the responder's incarnation (v2)
  kSessionResetReq = 8,   // server -> client: the server Rpc is gone, reset the session (v2)
  kSessionResetResp = 9,  // client -> server Nexus: acknowledged (v2)
};
inline constexpr uint8_t kSmMsgTypeMax = 9;
// The last SmErr this version sends and accepts; the decoder refuses larger.
inline constexpr SmErr kSmErrMax = SmErr::kOutOfMemory;

// The response type of a request type; `request` must satisfy
// SmMsg{request}.is_request().
constexpr SmMsgType sm_response_type(SmMsgType request) {
  switch (request) {
    case SmMsgType::kConnectReq:
      return SmMsgType::kConnectResp;
    case SmMsgType::kDisconnectReq:
      return SmMsgType::kDisconnectResp;
    case SmMsgType::kProbeReq:
      return SmMsgType::kProbeResp;
    case SmMsgType::kSessionResetReq:
      return SmMsgType::kSessionResetResp;
    default:
      return SmMsgType::kHeartbeat;  // not a request: no response
  }
}

struct SmMsg {
  SmMsgType type = SmMsgType::kConnectReq;
  SmErr err = SmErr::kNone;
  uint8_t transport = 0;  // the transport's wire id (transport/registry.h)
  RpcId client_rpc_id = 0;
  RpcId server_rpc_id = 0;
  uint8_t routing_len = 0;
  SessionNum client_session_num = kInvalidSessionNum;
  SessionNum server_session_num = kInvalidSessionNum;
  uint64_t token = 0;
  uint64_t incarnation = 0;  // set by the sending Nexus
  RoutingInfo routing;
  uint32_t max_data_per_pkt = 0;  // sender Rpc's data bytes per packet; 0 where meaningless
  uint16_t session_credits = 0;   // connect: asked (request) / granted (response); else 0

  // Expects a response (connect, disconnect, session reset, probe).
  bool is_request() const {
    return type == SmMsgType::kConnectReq || type == SmMsgType::kDisconnectReq ||
           type == SmMsgType::kSessionResetReq || type == SmMsgType::kProbeReq;
  }
  // Answers a request.
  bool is_response() const {
    return type == SmMsgType::kConnectResp || type == SmMsgType::kDisconnectResp ||
           type == SmMsgType::kSessionResetResp || type == SmMsgType::kProbeResp;
  }
};

enum class SmDecodeStatus : uint8_t {
  kOk,
  kTooShort,  // shorter than the envelope
  kBadMagic,
  kVersionMismatch,  // envelope valid: out.type and out.token are filled
  kBadLength,        // length field disagrees with the datagram size
  kBadType,
  kBadField,  // err, transport or routing_len out of range
};

// Writes msg into out (kSmMsgBytes). Returns kSmMsgBytes.
size_t encode_sm_msg(const SmMsg& msg, std::span<uint8_t, kSmMsgBytes> out);
// Decodes and validates one datagram. On anything but kOk, out is not to be
// trusted (except as documented for kVersionMismatch).
SmDecodeStatus decode_sm_msg(std::span<const uint8_t> in, SmMsg& out);
const char* to_string(SmDecodeStatus status);

}  // namespace rpc::detail
