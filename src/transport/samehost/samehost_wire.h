// What samehost endpoints tell each other: the routing info that rides in
// session-management messages, and the two handshake messages on the Unix
// socket that hands the client its channel's region (docs/wire_format.md,
// "samehost"). Little-endian, fixed size, every field checked on decode.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "common/routing_info.h"

namespace rpc::detail::samehost {

inline constexpr uint16_t kRoutingMagic = 0x4853;  // "SH"
inline constexpr uint8_t kRoutingVersion = 1;
using Token = std::array<uint8_t, 16>;

// Routing info, one layout for every kind:
//   kLocal    fill_local_routing_info: who we are (token zero)
//   kOffer    a client's connect request: who it is, and the token only
//             the process that asked may present on the socket
//   kAnswer   a server's connect response: who it is, and the channel made
//             for the client
//   kResolved our own handle of a channel (never on the wire)
enum class RouteKind : uint8_t { kLocal = 1, kOffer = 2, kAnswer = 3, kResolved = 4 };
struct Route {
  RouteKind kind = RouteKind::kLocal;
  uint32_t pid = 0;             // the endpoint's process (in our pid namespace)
  uint64_t listener_nonce = 0;  // names its Unix socket, and is its probe word's value
  uint64_t probe_addr = 0;      // where that word is, for the bulk-read probe
  Token token{};
  uint32_t channel_id = 0;   // kAnswer, kResolved: the channel's slot
  uint32_t channel_gen = 0;  // and generation (slots are reused)
};
void encode_route(const Route& r, RoutingInfo& out);
// Where a route keeps its channel (read per packet from resolved routes).
inline constexpr size_t kRouteChannelOffset = 40;  // u32
inline constexpr size_t kRouteGenOffset = 44;      // u32
// Empty when the bytes are not a samehost route of the expected kind.
std::optional<Route> decode_route(const RoutingInfo& in, RouteKind want);

// The abstract Unix socket name of a listener ("\0librpc-samehost-PID-NONCE").
struct SocketName {
  std::array<char, 64> bytes{};
  size_t len = 0;
};
SocketName socket_name(uint32_t pid, uint64_t nonce);

// Client -> server, first and only message: which channel, and the token
// of the offer that asked for it.
inline constexpr size_t kHelloBytes = 32;
inline constexpr uint16_t kHelloFlagClientReadsServer = 1;  // its bulk-read probe of us worked
struct Hello {
  uint32_t channel_id = 0;
  uint32_t channel_gen = 0;
  Token token{};
  bool client_reads_server = false;
};
void encode_hello(const Hello& h, std::span<uint8_t, kHelloBytes> out);
std::optional<Hello> decode_hello(std::span<const uint8_t> in);

// Server -> client, with the region's descriptor (SCM_RIGHTS) when accepted.
inline constexpr size_t kWelcomeBytes = 32;
enum class WelcomeStatus : uint8_t { kAccepted = 0, kRefused = 1 };
struct Welcome {
  WelcomeStatus status = WelcomeStatus::kRefused;
  bool server_reads_client = false;
  uint32_t channel_id = 0;
  uint32_t entries = 0;
  uint32_t slot_bytes = 0;
  uint64_t region_bytes = 0;
};
void encode_welcome(const Welcome& w, std::span<uint8_t, kWelcomeBytes> out);
std::optional<Welcome> decode_welcome(std::span<const uint8_t> in);

}  // namespace rpc::detail::samehost
