// Session-management message codec: round trips, the byte image, and
// rejection of every malformed datagram.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "transport/registry.h"
#include "wire/sm_msg.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

using Bytes = std::array<uint8_t, kSmMsgBytes>;

// A message with every field set to a distinct, non-default value.
SmMsg full_msg(SmMsgType type) {
  SmMsg m;
  m.type = type;
  m.err = SmErr::kTransportMismatch;
  m.transport = transport_wire_id("verbs");
  m.client_rpc_id = 7;
  m.server_rpc_id = 254;
  m.routing_len = 20;
  m.client_session_num = 0x1234;
  m.server_session_num = 0xfedc;
  m.token = 0x0102030405060708ull;
  m.incarnation = 0xA1B2C3D4E5F6ull;
  m.max_data_per_pkt = 0x11223344;
  m.session_credits = 0xBEEF;
  for (size_t i = 0; i < m.routing_len; i++) m.routing.bytes[i] = static_cast<uint8_t>(0xa0 + i);
  return m;
}

Bytes encode(const SmMsg& m) {
  Bytes b{};
  REQUIRE(encode_sm_msg(m, b) == kSmMsgBytes);
  return b;
}

SmDecodeStatus decode(const Bytes& b, SmMsg& out) {
  return decode_sm_msg(std::span<const uint8_t>(b.data(), b.size()), out);
}

SmDecodeStatus decode(const Bytes& b) {
  SmMsg out;
  return decode(b, out);
}

void require_same(const SmMsg& a, const SmMsg& b) {
  REQUIRE(a.type == b.type);
  REQUIRE(a.err == b.err);
  REQUIRE(a.transport == b.transport);
  REQUIRE(a.client_rpc_id == b.client_rpc_id);
  REQUIRE(a.server_rpc_id == b.server_rpc_id);
  REQUIRE(a.routing_len == b.routing_len);
  REQUIRE(a.client_session_num == b.client_session_num);
  REQUIRE(a.server_session_num == b.server_session_num);
  REQUIRE(a.token == b.token);
  REQUIRE(a.incarnation == b.incarnation);
  REQUIRE(a.routing.bytes == b.routing.bytes);
  REQUIRE(a.max_data_per_pkt == b.max_data_per_pkt);
  REQUIRE(a.session_credits == b.session_credits);
}

uint64_t load_le(const Bytes& b, size_t off, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= uint64_t{b[off + i]} << (8 * i);
  return v;
}

}  // namespace

TEST_CASE("a connect request survives encode and decode") {
  const SmMsg in = full_msg(SmMsgType::kConnectReq);
  SmMsg out;
  REQUIRE(decode(encode(in), out) == SmDecodeStatus::kOk);
  require_same(in, out);
  REQUIRE(out.is_request());
}

TEST_CASE("every message type survives encode and decode with all fields set") {
  for (auto type :
       {SmMsgType::kConnectReq, SmMsgType::kConnectResp, SmMsgType::kDisconnectReq,
        SmMsgType::kDisconnectResp, SmMsgType::kHeartbeat, SmMsgType::kProbeReq,
        SmMsgType::kProbeResp, SmMsgType::kSessionResetReq, SmMsgType::kSessionResetResp}) {
    SmMsg in = full_msg(type);
    in.routing_len = static_cast<uint8_t>(RoutingInfo::kMaxBytes);
    for (size_t i = 0; i < RoutingInfo::kMaxBytes; i++) in.routing.bytes[i] = uint8_t(i * 5 + 1);
    SmMsg out;
    REQUIRE(decode(encode(in), out) == SmDecodeStatus::kOk);
    require_same(in, out);
  }
}

TEST_CASE("extreme field values survive encode and decode") {
  SmMsg in = full_msg(SmMsgType::kConnectResp);
  in.err = SmErr::kInvalidSession;
  in.transport = transport_wire_id("fabric");
  in.client_rpc_id = 255;
  in.server_rpc_id = 0;
  in.client_session_num = 0xffff;
  in.server_session_num = 0;
  in.token = ~0ull;
  in.routing_len = 0;
  in.routing = RoutingInfo{};
  in.max_data_per_pkt = ~0u;
  in.session_credits = 0xffff;
  SmMsg out;
  REQUIRE(decode(encode(in), out) == SmDecodeStatus::kOk);
  require_same(in, out);
}

TEST_CASE("the encoded bytes follow the documented layout") {
  const SmMsg in = full_msg(SmMsgType::kDisconnectResp);
  const Bytes b = encode(in);

  // Magic spells "LRPC" in byte order.
  REQUIRE(b[0] == 'L');
  REQUIRE(b[1] == 'R');
  REQUIRE(b[2] == 'P');
  REQUIRE(b[3] == 'C');
  REQUIRE(load_le(b, 0, 4) == kSmMagic);
  REQUIRE(b[4] == kSmVersion);
  REQUIRE(b[5] == 0);
  REQUIRE(b[6] == kSmMsgBytes);
  REQUIRE(b[7] == 0);
  REQUIRE(b[8] == 4);  // kDisconnectResp
  REQUIRE(b[9] == static_cast<uint8_t>(SmErr::kTransportMismatch));
  REQUIRE(b[10] == 3);  // kVerbs
  REQUIRE(b[11] == 7);
  REQUIRE(b[12] == 254);
  REQUIRE(b[13] == 20);
  REQUIRE(b[14] == 0x34);  // client_session_num, little-endian
  REQUIRE(b[15] == 0x12);
  REQUIRE(b[16] == 0xdc);  // server_session_num
  REQUIRE(b[17] == 0xfe);
  // Incarnation 0xA1B2C3D4E5F6 at offset 18, 48 bits little-endian.
  REQUIRE(load_le(b, 18, 6) == 0xA1B2C3D4E5F6ull);
  // Token 0x0102030405060708 at offset 24, least significant byte first.
  const std::array<uint8_t, 8> token_bytes{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  for (size_t i = 0; i < 8; i++) REQUIRE(b[24 + i] == token_bytes[i]);
  for (size_t i = 0; i < 20; i++) REQUIRE(b[32 + i] == 0xa0 + i);
  for (size_t i = 20; i < 48; i++) REQUIRE(b[32 + i] == 0);
  // max_data_per_pkt 0x11223344 after the routing info, little-endian (v2).
  REQUIRE(b[80] == 0x44);
  REQUIRE(b[81] == 0x33);
  REQUIRE(b[82] == 0x22);
  REQUIRE(b[83] == 0x11);
  // session_credits 0xBEEF, then two reserved zero bytes (v3).
  REQUIRE(b[84] == 0xEF);
  REQUIRE(b[85] == 0xBE);
  REQUIRE(b[86] == 0);
  REQUIRE(b[87] == 0);
  REQUIRE(kSmMsgBytes == 88);
  REQUIRE(kSmVersion == 5);
}

TEST_CASE("routing bytes beyond routing_len are sent as zeros") {
  SmMsg in = full_msg(SmMsgType::kConnectReq);
  in.routing.bytes.fill(0xee);  // stale bytes past routing_len must not leak
  in.routing_len = 6;
  Bytes b;
  b.fill(0x55);  // and nothing of the caller's buffer survives either
  encode_sm_msg(in, b);
  for (size_t i = 0; i < 6; i++) REQUIRE(b[32 + i] == 0xee);
  for (size_t i = 32 + 6; i < 80; i++) REQUIRE(b[i] == 0);

  SmMsg out;
  REQUIRE(decode(b, out) == SmDecodeStatus::kOk);
  for (size_t i = 6; i < RoutingInfo::kMaxBytes; i++) REQUIRE(out.routing.bytes[i] == 0);
}

TEST_CASE("every truncated message is rejected without reading past its end") {
  const Bytes full = encode(full_msg(SmMsgType::kConnectReq));
  for (size_t len = 0; len < kSmMsgBytes; len++) {
    CAPTURE(len);
    // An exact-size heap copy, so a sanitizer build catches any overread.
    const std::vector<uint8_t> part(full.begin(), full.begin() + static_cast<ptrdiff_t>(len));
    SmMsg out;
    const auto status = decode_sm_msg(std::span<const uint8_t>(part.data(), part.size()), out);
    REQUIRE(status != SmDecodeStatus::kOk);
    REQUIRE(status ==
            (len < kSmEnvelopeBytes ? SmDecodeStatus::kTooShort : SmDecodeStatus::kBadLength));
  }
}

TEST_CASE("a message with a wrong magic is rejected") {
  Bytes b = encode(full_msg(SmMsgType::kConnectReq));
  for (size_t i = 0; i < 4; i++) {
    Bytes bad = b;
    bad[i] ^= 0x01;
    REQUIRE(decode(bad) == SmDecodeStatus::kBadMagic);
  }
}

TEST_CASE("a message of another version is refused with its type and token") {
  Bytes b = encode(full_msg(SmMsgType::kConnectReq));
  b[4] = static_cast<uint8_t>(kSmVersion + 1);  // the next version
  SmMsg out;
  out.token = 0;
  REQUIRE(decode(b, out) == SmDecodeStatus::kVersionMismatch);
  REQUIRE(out.token == 0x0102030405060708ull);
  REQUIRE(out.type == SmMsgType::kConnectReq);

  // Another version may have another length and body: only the envelope counts.
  std::vector<uint8_t> v2(b.begin(), b.begin() + kSmEnvelopeBytes);
  v2[6] = 200;
  v2.resize(200, 0xff);
  out = SmMsg{};
  REQUIRE(decode_sm_msg(v2, out) == SmDecodeStatus::kVersionMismatch);
  REQUIRE(out.token == 0x0102030405060708ull);

  // Version 0 is not version 2 either, and the envelope alone suffices.
  b[4] = 0;
  REQUIRE(decode_sm_msg(std::span<const uint8_t>(b.data(), kSmEnvelopeBytes), out) ==
          SmDecodeStatus::kVersionMismatch);
}

TEST_CASE("a message whose length field disagrees with its size is rejected") {
  Bytes b = encode(full_msg(SmMsgType::kConnectReq));
  SECTION("length field smaller than the datagram") {
    b[6] = kSmMsgBytes - 1;
    REQUIRE(decode(b) == SmDecodeStatus::kBadLength);
  }
  SECTION("length field larger than the datagram") {
    b[7] = 1;
    REQUIRE(decode(b) == SmDecodeStatus::kBadLength);
  }
  SECTION("datagram longer than the message, length field matching the datagram") {
    std::vector<uint8_t> big(b.begin(), b.end());
    big.resize(kSmMsgBytes + 8, 0);
    big[6] = kSmMsgBytes + 8;
    SmMsg out;
    REQUIRE(decode_sm_msg(big, out) == SmDecodeStatus::kBadLength);
  }
  SECTION("datagram longer than the message, length field saying kSmMsgBytes") {
    std::vector<uint8_t> big(b.begin(), b.end());
    big.push_back(0);
    SmMsg out;
    REQUIRE(decode_sm_msg(big, out) == SmDecodeStatus::kBadLength);
  }
}

TEST_CASE("a message with an unknown type is rejected") {
  Bytes b = encode(full_msg(SmMsgType::kConnectReq));
  for (int type : {0, 10, 255}) {
    b[8] = static_cast<uint8_t>(type);
    REQUIRE(decode(b) == SmDecodeStatus::kBadType);
  }
}

TEST_CASE("a message with an out-of-range field is rejected") {
  const Bytes good = encode(full_msg(SmMsgType::kConnectResp));
  Bytes b = good;
  SECTION("err past the last SmErr") { b[9] = static_cast<uint8_t>(kSmErrMax) + 1; }
  SECTION("routing_len past RoutingInfo::kMaxBytes") {
    b[13] = static_cast<uint8_t>(RoutingInfo::kMaxBytes + 1);
  }
  REQUIRE(decode(b) == SmDecodeStatus::kBadField);
}

TEST_CASE("the sender's 48-bit incarnation sits little-endian at offset 18") {
  SmMsg m = full_msg(SmMsgType::kHeartbeat);
  m.incarnation = 0x0000665544332211ull;
  const Bytes b = encode(m);
  REQUIRE(std::vector<uint8_t>(b.begin() + 18, b.begin() + 24) ==
          std::vector<uint8_t>{0x11, 0x22, 0x33, 0x44, 0x55, 0x66});
  SmMsg out;
  REQUIRE(decode(b, out) == SmDecodeStatus::kOk);
  REQUIRE(out.type == SmMsgType::kHeartbeat);
  REQUIRE(out.incarnation == m.incarnation);
}

TEST_CASE("random and mutated datagrams never crash the decoder") {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_int_distribution<size_t> len_dist(0, 2 * kSmMsgBytes);
  const Bytes valid = encode(full_msg(SmMsgType::kDisconnectReq));
  size_t ok_count = 0;

  for (int iter = 0; iter < 20000; iter++) {
    std::vector<uint8_t> buf;
    if (iter % 2 == 0) {
      // Pure garbage of random length.
      buf.resize(len_dist(rng));
      for (auto& x : buf) x = static_cast<uint8_t>(byte(rng));
    } else {
      // A valid message with a few random bytes replaced: exercises the
      // checks behind the magic, which pure garbage almost never passes.
      buf.assign(valid.begin(), valid.end());
      const int flips = 1 + byte(rng) % 3;
      for (int f = 0; f < flips; f++) {
        buf[static_cast<size_t>(byte(rng)) % kSmMsgBytes] = static_cast<uint8_t>(byte(rng));
      }
    }
    SmMsg out;
    if (decode_sm_msg(buf, out) != SmDecodeStatus::kOk) continue;

    // Whatever decodes as valid re-encodes to the same bytes (routing bytes
    // past routing_len, and the reserved bytes, carry no meaning and
    // re-encode as zeros).
    ok_count++;
    REQUIRE(buf.size() == kSmMsgBytes);
    const Bytes again = encode(out);
    const size_t meaningful = 32 + out.routing_len;
    for (size_t i = 0; i < kSmMsgBytes; i++) {
      CAPTURE(iter, i);
      const bool kept = i < meaningful || (i >= 80 && i < 86);
      REQUIRE(again[i] == (kept ? buf[i] : 0));
    }
    SmMsg out2;
    REQUIRE(decode(again, out2) == SmDecodeStatus::kOk);
    require_same(out, out2);
  }
  REQUIRE(ok_count > 0);  // the mutated half must reach the success path
}

TEST_CASE("transport wire ids are fixed: they are part of the SM wire format") {
  REQUIRE(transport_wire_id("udp") == 1);
  REQUIRE(transport_wire_id("fake") == 2);
  REQUIRE(transport_wire_id("verbs") == 3);
  REQUIRE(transport_wire_id("fabric") == 4);
  REQUIRE(transport_wire_id("UDP") == 0);
  REQUIRE(transport_wire_id("") == 0);
  REQUIRE(transport_wire_id("efa") == 0);
}

TEST_CASE("any transport id decodes: the receiving Rpc refuses one that is not its own") {
  SmMsg m = full_msg(SmMsgType::kConnectReq);
  m.transport = 200;
  SmMsg out;
  REQUIRE(decode(encode(m), out) == SmDecodeStatus::kOk);
  CHECK(out.transport == 200);
}

TEST_CASE("every decode status has a short name") {
  REQUIRE(std::string(to_string(SmDecodeStatus::kOk)) == "ok");
  REQUIRE(std::string(to_string(SmDecodeStatus::kTooShort)) == "too_short");
  REQUIRE(std::string(to_string(SmDecodeStatus::kBadMagic)) == "bad_magic");
  REQUIRE(std::string(to_string(SmDecodeStatus::kVersionMismatch)) == "version_mismatch");
  REQUIRE(std::string(to_string(SmDecodeStatus::kBadLength)) == "bad_length");
  REQUIRE(std::string(to_string(SmDecodeStatus::kBadType)) == "bad_type");
  REQUIRE(std::string(to_string(SmDecodeStatus::kBadField)) == "bad_field");
}

TEST_CASE("a version-1 peer's 80-byte connect request is refused by its token") {
  // Given the exact datagram a v1 Nexus sends (80 bytes, version 1, no
  // max_data_per_pkt), built from the v1 layout by hand
  std::vector<uint8_t> v1(80, 0);
  const Bytes v2 = encode(full_msg(SmMsgType::kConnectReq));
  std::copy(v2.begin(), v2.begin() + 80, v1.begin());
  v1[4] = 1;
  v1[6] = 80;
  // Expect the envelope to be read and the rest not
  SmMsg out;
  REQUIRE(decode_sm_msg(v1, out) == SmDecodeStatus::kVersionMismatch);
  CHECK(out.type == SmMsgType::kConnectReq);
  CHECK(out.token == 0x0102030405060708ull);
}

TEST_CASE("a version-2 peer's 84-byte connect request is refused by its token") {
  // Given the datagram a v2 Nexus sends: 84 bytes, version 2, no credits
  std::vector<uint8_t> v2(84, 0);
  const Bytes v3 = encode(full_msg(SmMsgType::kConnectReq));
  std::copy(v3.begin(), v3.begin() + 84, v2.begin());
  v2[4] = 2;
  v2[6] = 84;
  SmMsg out;
  REQUIRE(decode_sm_msg(v2, out) == SmDecodeStatus::kVersionMismatch);
  CHECK(out.type == SmMsgType::kConnectReq);
  CHECK(out.token == 0x0102030405060708ull);
}

TEST_CASE("max_data_per_pkt sits little-endian after the routing info") {
  SmMsg m = full_msg(SmMsgType::kConnectReq);
  m.max_data_per_pkt = 8192 - 16;
  const Bytes b = encode(m);
  CHECK(load_le(b, 80, 4) == 8192 - 16);
  SmMsg out;
  REQUIRE(decode(b, out) == SmDecodeStatus::kOk);
  CHECK(out.max_data_per_pkt == 8192 - 16);
  // A message that does not set it sends 0.
  CHECK(load_le(encode(SmMsg{}), 80, 4) == 0);
}

TEST_CASE("requests and responses are told apart and paired for routing") {
  struct Row {
    SmMsgType type;
    bool request;
    bool response;
  };
  for (const Row& r :
       {Row{SmMsgType::kConnectReq, true, false}, Row{SmMsgType::kConnectResp, false, true},
        Row{SmMsgType::kDisconnectReq, true, false}, Row{SmMsgType::kDisconnectResp, false, true},
        Row{SmMsgType::kHeartbeat, false, false}, Row{SmMsgType::kProbeReq, true, false},
        Row{SmMsgType::kProbeResp, false, true}, Row{SmMsgType::kSessionResetReq, true, false},
        Row{SmMsgType::kSessionResetResp, false, true}}) {
    CAPTURE(static_cast<int>(r.type));
    SmMsg m;
    m.type = r.type;
    CHECK(m.is_request() == r.request);
    CHECK(m.is_response() == r.response);
  }
  CHECK(sm_response_type(SmMsgType::kConnectReq) == SmMsgType::kConnectResp);
  CHECK(sm_response_type(SmMsgType::kDisconnectReq) == SmMsgType::kDisconnectResp);
  CHECK(sm_response_type(SmMsgType::kProbeReq) == SmMsgType::kProbeResp);
  CHECK(sm_response_type(SmMsgType::kSessionResetReq) == SmMsgType::kSessionResetResp);
  // The new types' numbers are wire format.
  CHECK(static_cast<int>(SmMsgType::kProbeReq) == 6);
  CHECK(static_cast<int>(SmMsgType::kProbeResp) == 7);
  CHECK(static_cast<int>(SmMsgType::kSessionResetReq) == 8);
  CHECK(static_cast<int>(SmMsgType::kSessionResetResp) == 9);
}

// random_u64 draws the connect tokens and probe nonces carried by these
// messages, and the incarnations they are stamped with.
TEST_CASE("random_u64 draws distinct values in which every bit varies") {
  const uint64_t a = random_u64();
  const uint64_t b = random_u64();
  CHECK(a != b);  // equal with probability 2^-64
  uint64_t ones = 0, zeros = 0;
  for (int i = 0; i < 64; i++) {
    const uint64_t v = random_u64();
    ones |= v;
    zeros |= ~v;
  }
  // Each bit was 1 at least once and 0 at least once (fails by chance with
  // probability 2^-57): no bit is stuck or masked off.
  CHECK(ones == ~0ull);
  CHECK(zeros == ~0ull);
}
