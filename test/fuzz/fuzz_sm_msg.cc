// libFuzzer target: the session-management message codec
// (src/wire/sm_msg.h). decode_sm_msg runs on arbitrary bytes; whatever it
// accepts must re-encode to the same bytes (up to the meaningless routing
// bytes past routing_len) and decode again to the same fields. The input
// is also read as an SmMsg to encode, which must decode back unchanged
// when its fields are in range, and be refused otherwise.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "fuzz_util.h"
#include "wire/sm_msg.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

constexpr size_t kOffMaxDataPerPkt = 80;   // v2: after the 48 routing bytes
constexpr size_t kOffSessionCredits = 84;  // v3, then two reserved bytes

bool same(const SmMsg& a, const SmMsg& b) {
  return a.type == b.type && a.err == b.err && a.transport == b.transport &&
         a.client_rpc_id == b.client_rpc_id && a.server_rpc_id == b.server_rpc_id &&
         a.routing_len == b.routing_len && a.client_session_num == b.client_session_num &&
         a.server_session_num == b.server_session_num && a.token == b.token &&
         a.incarnation == b.incarnation && a.routing.bytes == b.routing.bytes &&
         a.max_data_per_pkt == b.max_data_per_pkt && a.session_credits == b.session_credits;
}

uint64_t read_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void check_decode(const uint8_t* data, size_t size) {
  SmMsg m;
  const SmDecodeStatus status = decode_sm_msg({data, size}, m);
  // The status agrees with a plain reading of the envelope.
  if (size < kSmEnvelopeBytes) {
    FUZZ_CHECK(status == SmDecodeStatus::kTooShort);
    return;
  }
  if (read_le(data, 4) != kSmMagic) {
    FUZZ_CHECK(status == SmDecodeStatus::kBadMagic);
    return;
  }
  if (read_le(data + 4, 2) != kSmVersion) {
    FUZZ_CHECK(status == SmDecodeStatus::kVersionMismatch);
    FUZZ_CHECK(static_cast<uint8_t>(m.type) == data[8]);
    FUZZ_CHECK(m.token == read_le(data + 24, 8));
    return;
  }
  if (size != kSmMsgBytes || read_le(data + 6, 2) != kSmMsgBytes) {
    FUZZ_CHECK(status == SmDecodeStatus::kBadLength);
    return;
  }
  if (status != SmDecodeStatus::kOk) {
    FUZZ_CHECK(status == SmDecodeStatus::kBadType || status == SmDecodeStatus::kBadField);
    return;
  }
  // Accepted: every field in range.
  FUZZ_CHECK(m.type >= SmMsgType::kConnectReq && static_cast<uint8_t>(m.type) <= kSmMsgTypeMax);
  FUZZ_CHECK(static_cast<uint8_t>(m.err) <= static_cast<uint8_t>(kSmErrMax));
  FUZZ_CHECK(m.routing_len <= RoutingInfo::kMaxBytes);
  FUZZ_CHECK(m.incarnation <= kIncarnationMask);
  for (size_t i = m.routing_len; i < RoutingInfo::kMaxBytes; i++) {
    FUZZ_CHECK(m.routing.bytes[i] == 0);  // canonical: unused routing bytes are zero
  }
  FUZZ_CHECK(m.max_data_per_pkt == read_le(data + kOffMaxDataPerPkt, 4));
  FUZZ_CHECK(m.session_credits == read_le(data + kOffSessionCredits, 2));
  // Re-encoding reproduces the datagram, except routing bytes past
  // routing_len and the reserved bytes, which go out as zeros.
  std::array<uint8_t, kSmMsgBytes> out{};
  FUZZ_CHECK(encode_sm_msg(m, out) == kSmMsgBytes);
  const size_t meaningful = kSmEnvelopeBytes + m.routing_len;
  FUZZ_CHECK(std::memcmp(out.data(), data, meaningful) == 0);
  for (size_t i = meaningful; i < kOffMaxDataPerPkt; i++) FUZZ_CHECK(out[i] == 0);
  FUZZ_CHECK(std::memcmp(out.data() + kOffMaxDataPerPkt, data + kOffMaxDataPerPkt, 6) == 0);
  FUZZ_CHECK(out[kOffSessionCredits + 2] == 0 && out[kOffSessionCredits + 3] == 0);
  // ... and decodes to the same message.
  SmMsg again;
  FUZZ_CHECK(decode_sm_msg(out, again) == SmDecodeStatus::kOk);
  FUZZ_CHECK(same(m, again));
}

// The input's first bytes as the fields of a message to send.
void check_encode(const uint8_t* data, size_t size) {
  std::array<uint8_t, 8 + 2 + 2 + 8 + 8 + RoutingInfo::kMaxBytes + 4 + 2> in{};
  std::memcpy(in.data(), data, std::min(size, in.size()));
  SmMsg m;
  m.type = static_cast<SmMsgType>(in[0]);
  m.err = static_cast<SmErr>(in[1]);
  m.transport = in[2];
  m.client_rpc_id = in[3];
  m.server_rpc_id = in[4];
  m.routing_len = in[5];
  m.client_session_num = static_cast<uint16_t>(read_le(&in[8], 2));
  m.server_session_num = static_cast<uint16_t>(read_le(&in[10], 2));
  m.token = read_le(&in[12], 8);
  m.incarnation = read_le(&in[20], 8);
  std::memcpy(m.routing.bytes.data(), &in[28], RoutingInfo::kMaxBytes);
  m.max_data_per_pkt = static_cast<uint32_t>(read_le(&in[28 + RoutingInfo::kMaxBytes], 4));
  m.session_credits = static_cast<uint16_t>(read_le(&in[32 + RoutingInfo::kMaxBytes], 2));

  std::array<uint8_t, kSmMsgBytes> out{};
  FUZZ_CHECK(encode_sm_msg(m, out) == kSmMsgBytes);
  SmMsg back;
  const SmDecodeStatus status = decode_sm_msg(out, back);
  const bool type_ok = in[0] >= 1 && in[0] <= kSmMsgTypeMax;
  // Any transport id decodes (the receiving Rpc refuses one not its own).
  const bool fields_ok =
      in[1] <= static_cast<uint8_t>(kSmErrMax) && in[5] <= RoutingInfo::kMaxBytes;
  if (!type_ok) {
    FUZZ_CHECK(status == SmDecodeStatus::kBadType);
    return;
  }
  if (!fields_ok) {
    FUZZ_CHECK(status == SmDecodeStatus::kBadField);
    return;
  }
  FUZZ_CHECK(status == SmDecodeStatus::kOk);
  // What is expected back: the incarnation cut to 48 bits and only
  // routing_len routing bytes.
  SmMsg expect = m;
  expect.incarnation &= kIncarnationMask;
  std::fill(expect.routing.bytes.begin() + m.routing_len, expect.routing.bytes.end(), 0);
  FUZZ_CHECK(same(back, expect));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  check_decode(data, size);
  check_encode(data, size);
  return 0;
}
