// Encode and decode of samehost routing info and handshake messages.
#include "transport/samehost/samehost_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "wire/le.h"

namespace rpc::detail::samehost {

namespace {

// Routing info layout (48 bytes).
constexpr size_t kOffMagic = 0;    // u16
constexpr size_t kOffKind = 2;     // u8
constexpr size_t kOffVersion = 3;  // u8
constexpr size_t kOffPid = 4;      // u32
constexpr size_t kOffNonce = 8;    // u64
constexpr size_t kOffProbe = 16;   // u64
constexpr size_t kOffToken = 24;   // 16 bytes
constexpr size_t kOffChannel = kRouteChannelOffset;
constexpr size_t kOffGen = kRouteGenOffset;
static_assert(kOffGen + 4 == RoutingInfo::kMaxBytes);

constexpr uint32_t kHelloMagic = 0x31484853;    // "SHH1"
constexpr uint32_t kWelcomeMagic = 0x31574853;  // "SHW1"
constexpr uint16_t kHandshakeVersion = 1;

bool token_is_zero(const Token& t) {
  return std::all_of(t.begin(), t.end(), [](uint8_t b) { return b == 0; });
}

}  // namespace

void encode_route(const Route& r, RoutingInfo& out) {
  uint8_t* p = out.bytes.data();
  out.bytes.fill(0);
  put_le16(p + kOffMagic, kRoutingMagic);
  p[kOffKind] = static_cast<uint8_t>(r.kind);
  p[kOffVersion] = kRoutingVersion;
  put_le32(p + kOffPid, r.pid);
  put_le64(p + kOffNonce, r.listener_nonce);
  put_le64(p + kOffProbe, r.probe_addr);
  std::memcpy(p + kOffToken, r.token.data(), r.token.size());
  put_le32(p + kOffChannel, r.channel_id);
  put_le32(p + kOffGen, r.channel_gen);
}

std::optional<Route> decode_route(const RoutingInfo& in, RouteKind want) {
  const uint8_t* p = in.bytes.data();
  if (get_le16(p + kOffMagic) != kRoutingMagic || p[kOffVersion] != kRoutingVersion) return {};
  if (p[kOffKind] != static_cast<uint8_t>(want)) return {};
  Route r;
  r.kind = want;
  r.pid = get_le32(p + kOffPid);
  r.listener_nonce = get_le64(p + kOffNonce);
  r.probe_addr = get_le64(p + kOffProbe);
  std::memcpy(r.token.data(), p + kOffToken, r.token.size());
  r.channel_id = get_le32(p + kOffChannel);
  r.channel_gen = get_le32(p + kOffGen);
  // Who an endpoint is: a process and a listener. An offer must carry a
  // token (all zero would be guessable).
  if (want != RouteKind::kResolved && (r.pid == 0 || r.listener_nonce == 0)) return {};
  if (want == RouteKind::kOffer && token_is_zero(r.token)) return {};
  return r;
}

SocketName socket_name(uint32_t pid, uint64_t nonce) {
  SocketName name;
  // bytes[0] stays '\0': the abstract namespace, no file to leave behind.
  const auto end = fmt::format_to_n(name.bytes.data() + 1, name.bytes.size() - 1,
                                    "librpc-samehost-{}-{:016x}", pid, nonce);
  name.len = 1 + end.size;
  return name;
}

void encode_hello(const Hello& h, std::span<uint8_t, kHelloBytes> out) {
  uint8_t* p = out.data();
  std::fill(out.begin(), out.end(), uint8_t{0});
  put_le32(p, kHelloMagic);
  put_le16(p + 4, kHandshakeVersion);
  put_le16(p + 6, h.client_reads_server ? kHelloFlagClientReadsServer : 0);
  put_le32(p + 8, h.channel_id);
  put_le32(p + 12, h.channel_gen);
  std::memcpy(p + 16, h.token.data(), h.token.size());
}

std::optional<Hello> decode_hello(std::span<const uint8_t> in) {
  if (in.size() != kHelloBytes) return {};
  const uint8_t* p = in.data();
  if (get_le32(p) != kHelloMagic || get_le16(p + 4) != kHandshakeVersion) return {};
  const uint16_t flags = get_le16(p + 6);
  if ((flags & ~kHelloFlagClientReadsServer) != 0) return {};
  Hello h;
  h.client_reads_server = (flags & kHelloFlagClientReadsServer) != 0;
  h.channel_id = get_le32(p + 8);
  h.channel_gen = get_le32(p + 12);
  std::memcpy(h.token.data(), p + 16, h.token.size());
  if (token_is_zero(h.token)) return {};
  return h;
}

void encode_welcome(const Welcome& w, std::span<uint8_t, kWelcomeBytes> out) {
  uint8_t* p = out.data();
  std::fill(out.begin(), out.end(), uint8_t{0});
  put_le32(p, kWelcomeMagic);
  put_le16(p + 4, kHandshakeVersion);
  p[6] = static_cast<uint8_t>(w.status);
  p[7] = w.server_reads_client ? 1 : 0;
  put_le32(p + 8, w.channel_id);
  put_le32(p + 12, w.entries);
  put_le32(p + 16, w.slot_bytes);
  put_le64(p + 24, w.region_bytes);
}

std::optional<Welcome> decode_welcome(std::span<const uint8_t> in) {
  if (in.size() != kWelcomeBytes) return {};
  const uint8_t* p = in.data();
  if (get_le32(p) != kWelcomeMagic || get_le16(p + 4) != kHandshakeVersion) return {};
  if (p[6] > static_cast<uint8_t>(WelcomeStatus::kRefused) || p[7] > 1) return {};
  Welcome w;
  w.status = static_cast<WelcomeStatus>(p[6]);
  w.server_reads_client = p[7] == 1;
  w.channel_id = get_le32(p + 8);
  w.entries = get_le32(p + 12);
  w.slot_bytes = get_le32(p + 16);
  w.region_bytes = get_le64(p + 24);
  return w;
}

}  // namespace rpc::detail::samehost
