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
//   10   1   transport           TransportKind of the sender's Rpc
//   11   1   client_rpc_id
//   12   1   server_rpc_id
//   13   1   routing_len         bytes of routing used, <= RoutingInfo::kMaxBytes
//   14   2   client_session_num
//   16   2   server_session_num
//   18   6   incarnation         the sender Nexus's incarnation (48 bits): random,
//                                 drawn at start-up; a new value from the same
//                                 address means the peer process restarted
//   24   8   token               unique per request; echoed by the response
//   32  48   routing             sender's datapath routing info
//   80       (end)
//
// Bytes 0..8 (magic, version, length, type) and the token are the envelope: they keep their place
// in every version, so a peer can refuse a message of another version by token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "rpc/types.h"
#include "transport/transport.h"

namespace rpc::detail {

inline constexpr uint32_t kSmMagic = 0x4350524C;  // "LRPC" in byte order
inline constexpr uint16_t kSmVersion = 1;
inline constexpr size_t kSmMsgBytes = 80;
inline constexpr size_t kSmEnvelopeBytes = 32;  // magic..token
inline constexpr uint64_t kIncarnationMask = (1ull << 48) - 1;

enum class SmMsgType : uint8_t {
  kConnectReq = 1,
  kConnectResp = 2,
  kDisconnectReq = 3,
  kDisconnectResp = 4,
  kHeartbeat = 5,  // one-way "still alive", between Nexuses that share sessions
};

enum class TransportKind : uint8_t {
  kUnknown = 0,
  kUdp = 1,
  kFake = 2,
  kVerbs = 3,
  kFabric = 4,
};

TransportKind transport_kind_from_name(const char* name);

struct SmMsg {
  SmMsgType type = SmMsgType::kConnectReq;
  SmErr err = SmErr::kNone;
  TransportKind transport = TransportKind::kUnknown;
  RpcId client_rpc_id = 0;
  RpcId server_rpc_id = 0;
  uint8_t routing_len = 0;
  SessionNum client_session_num = kInvalidSessionNum;
  SessionNum server_session_num = kInvalidSessionNum;
  uint64_t token = 0;
  uint64_t incarnation = 0;  // set by the sending Nexus
  RoutingInfo routing;

  bool is_request() const {
    return type == SmMsgType::kConnectReq || type == SmMsgType::kDisconnectReq;
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
