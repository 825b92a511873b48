// How a transport addresses a peer, as an opaque fixed-size blob: each
// transport fills and checks its own layout (transport/), the SM messages
// carry it (wire/), sessions keep the resolved form (session/).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace rpc::detail {

// Opaque, fixed-size routing info each transport fills and checks. It is
// exchanged in session-management messages, then resolved in place into
// whatever the transport needs to address the peer.
struct RoutingInfo {
  static constexpr size_t kMaxBytes = 48;
  std::array<uint8_t, kMaxBytes> bytes{};
};

}  // namespace rpc::detail
