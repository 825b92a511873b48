// Session-management message codec. Every field is written and read byte by
// byte at the offset documented in sm_msg.h, so the encoding does not depend
// on struct layout or host byte order.
#include "wire/sm_msg.h"

#include "wire/le.h"

#include <cstring>

namespace rpc::detail {

namespace {

// Field offsets; the table in sm_msg.h is the reference.
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 4;
constexpr size_t kOffLength = 6;
constexpr size_t kOffType = 8;
constexpr size_t kOffErr = 9;
constexpr size_t kOffTransport = 10;
constexpr size_t kOffClientRpcId = 11;
constexpr size_t kOffServerRpcId = 12;
constexpr size_t kOffRoutingLen = 13;
constexpr size_t kOffClientSessionNum = 14;
constexpr size_t kOffServerSessionNum = 16;
constexpr size_t kOffIncarnation = 18;
constexpr size_t kIncarnationBytes = 6;  // 18..23: 48-bit little-endian
constexpr size_t kOffToken = 24;
constexpr size_t kOffRouting = 32;
constexpr size_t kOffMaxDataPerPkt = 80;   // v2
constexpr size_t kOffSessionCredits = 84;  // v3
constexpr size_t kOffReserved = 86;        // v3: zero on the wire, ignored

static_assert(kOffToken + 8 == kSmEnvelopeBytes, "the envelope ends with the token");
static_assert(kOffIncarnation + kIncarnationBytes == kOffToken, "incarnation fills 18..23");
static_assert(kOffRouting + RoutingInfo::kMaxBytes == kOffMaxDataPerPkt,
              "max_data_per_pkt follows the routing info");
static_assert(kOffMaxDataPerPkt + 4 == kOffSessionCredits, "credits follow max_data_per_pkt");
static_assert(kOffReserved + 2 == kSmMsgBytes, "two reserved bytes end the message");
static_assert(kSmMsgBytes <= 0xffff, "length must fit its u16 field");

bool type_ok(uint8_t type) {
  return type >= static_cast<uint8_t>(SmMsgType::kConnectReq) && type <= kSmMsgTypeMax;
}

bool fields_ok(const uint8_t* p) {
  if (p[kOffErr] > static_cast<uint8_t>(kSmErrMax)) return false;
  if (p[kOffRoutingLen] > RoutingInfo::kMaxBytes) return false;
  return true;
}

}  // namespace

size_t encode_sm_msg(const SmMsg& msg, std::span<uint8_t, kSmMsgBytes> out) {
  uint8_t* p = out.data();
  put_le32(p + kOffMagic, kSmMagic);
  put_le16(p + kOffVersion, kSmVersion);
  put_le16(p + kOffLength, static_cast<uint16_t>(kSmMsgBytes));
  p[kOffType] = static_cast<uint8_t>(msg.type);
  p[kOffErr] = static_cast<uint8_t>(msg.err);
  p[kOffTransport] = msg.transport;
  p[kOffClientRpcId] = msg.client_rpc_id;
  p[kOffServerRpcId] = msg.server_rpc_id;
  p[kOffRoutingLen] = msg.routing_len;
  put_le16(p + kOffClientSessionNum, msg.client_session_num);
  put_le16(p + kOffServerSessionNum, msg.server_session_num);
  for (size_t i = 0; i < kIncarnationBytes; i++) {
    p[kOffIncarnation + i] = static_cast<uint8_t>(msg.incarnation >> (8 * i));
  }
  put_le64(p + kOffToken, msg.token);

  // Only routing_len bytes are meaningful; the rest go out as zeros so no
  // stale memory leaks onto the wire. An oversized routing_len is clamped
  // here and left for the peer's decoder to refuse.
  const size_t used =
      msg.routing_len < RoutingInfo::kMaxBytes ? msg.routing_len : RoutingInfo::kMaxBytes;
  std::memcpy(p + kOffRouting, msg.routing.bytes.data(), used);
  std::memset(p + kOffRouting + used, 0, RoutingInfo::kMaxBytes - used);
  put_le32(p + kOffMaxDataPerPkt, msg.max_data_per_pkt);
  put_le16(p + kOffSessionCredits, msg.session_credits);
  put_le16(p + kOffReserved, 0);
  return kSmMsgBytes;
}

SmDecodeStatus decode_sm_msg(std::span<const uint8_t> in, SmMsg& out) {
  if (in.size() < kSmEnvelopeBytes) return SmDecodeStatus::kTooShort;
  const uint8_t* p = in.data();
  if (get_le32(p + kOffMagic) != kSmMagic) return SmDecodeStatus::kBadMagic;

  if (get_le16(p + kOffVersion) != kSmVersion) {
    // The magic, version, type and token keep their place in every version:
    // enough to refuse a request of another version by its token.
    out.type = static_cast<SmMsgType>(p[kOffType]);
    out.token = get_le64(p + kOffToken);
    return SmDecodeStatus::kVersionMismatch;
  }

  const uint16_t length = get_le16(p + kOffLength);
  if (length != in.size() || length != kSmMsgBytes) return SmDecodeStatus::kBadLength;
  if (!type_ok(p[kOffType])) return SmDecodeStatus::kBadType;
  if (!fields_ok(p)) return SmDecodeStatus::kBadField;

  out.type = static_cast<SmMsgType>(p[kOffType]);
  out.err = static_cast<SmErr>(p[kOffErr]);
  out.transport = p[kOffTransport];
  out.client_rpc_id = p[kOffClientRpcId];
  out.server_rpc_id = p[kOffServerRpcId];
  out.routing_len = p[kOffRoutingLen];
  out.client_session_num = get_le16(p + kOffClientSessionNum);
  out.server_session_num = get_le16(p + kOffServerSessionNum);
  out.token = get_le64(p + kOffToken);
  out.incarnation = 0;
  for (size_t i = 0; i < kIncarnationBytes; i++) {
    out.incarnation |= uint64_t{p[kOffIncarnation + i]} << (8 * i);
  }
  // Bytes past routing_len carry no meaning; keep the decoded copy canonical.
  out.routing = RoutingInfo{};
  std::memcpy(out.routing.bytes.data(), p + kOffRouting, out.routing_len);
  out.max_data_per_pkt = get_le32(p + kOffMaxDataPerPkt);
  out.session_credits = get_le16(p + kOffSessionCredits);
  return SmDecodeStatus::kOk;
}

const char* to_string(SmDecodeStatus status) {
  switch (status) {
    case SmDecodeStatus::kOk:
      return "ok";
    case SmDecodeStatus::kTooShort:
      return "too_short";
    case SmDecodeStatus::kBadMagic:
      return "bad_magic";
    case SmDecodeStatus::kVersionMismatch:
      return "version_mismatch";
    case SmDecodeStatus::kBadLength:
      return "bad_length";
    case SmDecodeStatus::kBadType:
      return "bad_type";
    case SmDecodeStatus::kBadField:
      return "bad_field";
  }
  return "unknown";
}

}  // namespace rpc::detail
