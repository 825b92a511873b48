// Which GID a verbs port is addressed by when the user names none
// (RpcConfig::verbs_gid_index = -1): the choice RoCE users make by hand.
// Pure logic over a copy of the port's GID table, with no ibverbs types,
// so tests can feed it synthetic tables; verbs_transport.cc reads the real
// one.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rpc::detail {

// ibv_gid_type's values, in its order.
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };

// One entry of a port's GID table. `present` is false for an index the
// table has but that holds no GID (the device reports it as unset).
struct GidEntry {
  uint32_t index = 0;
  std::array<uint8_t, 16> gid{};
  GidType type = GidType::kIb;
  bool present = false;
};

struct GidChoice {
  int index = 0;
  std::string reason;  // for people: which GID and why, e.g. for the log
};

// In order of preference:
// 1. a RoCEv2 GID that is the Nexus's IP (IPv4-mapped ::ffff:a.b.c.d for
//    an IPv4 nexus_ip, the address itself for an IPv6 one);
// 2. else the lowest-index RoCEv2 GID with an address (neither zero nor
//    link-local fe80::/10): it routes, the link-local one does not;
// 3. else index 0 (InfiniBand, RoCEv1 only, or no address on the netdev).
// RoCEv1 entries are never chosen over index 0: RoCEv1 does not route over
// IP. nexus_ip that is empty or not an IP address skips step 1.
GidChoice select_gid(std::span<const GidEntry> table, std::string_view nexus_ip);

// The GID as an IPv6 address ("fe80::1", "::ffff:10.0.0.1").
std::string gid_to_string(const std::array<uint8_t, 16>& gid);

}  // namespace rpc::detail
