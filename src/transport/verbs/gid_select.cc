// GID auto-selection for the verbs transport. See the header.
#include "transport/verbs/gid_select.h"

#include <arpa/inet.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace rpc::detail {

namespace {

using Gid = std::array<uint8_t, 16>;

bool is_zero(const Gid& gid) {
  return std::all_of(gid.begin(), gid.end(), [](uint8_t b) { return b == 0; });
}

bool is_link_local(const Gid& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

// nexus_ip as the GID a RoCEv2 port with that address has: IPv4 addresses
// appear IPv4-mapped (::ffff:a.b.c.d).
std::optional<Gid> gid_of_ip(std::string_view ip) {
  const std::string s(ip);
  Gid gid{};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    gid[10] = gid[11] = 0xff;
    std::memcpy(gid.data() + 12, &v4, 4);
    return gid;
  }
  if (inet_pton(AF_INET6, s.c_str(), gid.data()) == 1) return gid;
  return std::nullopt;
}

bool usable_roce_v2(const GidEntry& e) { return e.present && e.type == GidType::kRoceV2; }

}  // namespace

std::string gid_to_string(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
  return buf;
}

GidChoice select_gid(std::span<const GidEntry> table, std::string_view nexus_ip) {
  const std::optional<Gid> wanted = gid_of_ip(nexus_ip);
  if (wanted) {
    for (const GidEntry& e : table) {
      if (usable_roce_v2(e) && e.gid == *wanted) {
        return {static_cast<int>(e.index),
                fmt::format("RoCEv2 GID {} is {}, the Nexus's IP", e.index, gid_to_string(e.gid))};
      }
    }
  }
  const std::string no_match =
      wanted ? fmt::format("no RoCEv2 GID is the Nexus's IP {}", nexus_ip)
             : fmt::format("the Nexus's IP '{}' is not an IP address", nexus_ip);
  const GidEntry* best = nullptr;
  for (const GidEntry& e : table) {
    if (usable_roce_v2(e) && !is_zero(e.gid) && !is_link_local(e.gid) &&
        (best == nullptr || e.index < best->index)) {
      best = &e;
    }
  }
  if (best != nullptr) {
    return {static_cast<int>(best->index),
            fmt::format("{}; RoCEv2 GID {} has an address, {}", no_match, best->index,
                        gid_to_string(best->gid))};
  }
  const bool any_present = std::any_of(
      table.begin(), table.end(), [](const GidEntry& e) { return e.present && !is_zero(e.gid); });
  const bool any_roce_v2 = std::any_of(table.begin(), table.end(), usable_roce_v2);
  const char* why = !any_present   ? "the GID table is empty"
                    : !any_roce_v2 ? "no RoCEv2 GIDs (InfiniBand or RoCEv1)"
                                   : "the RoCEv2 GIDs are link-local only, which does not route "
                                     "between hosts (no IP address on the netdev?)";
  return {0, fmt::format("{}; using GID 0", why)};
}

}  // namespace rpc::detail
