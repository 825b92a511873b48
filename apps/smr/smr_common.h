// Shared by librpc-smr-replica and librpc-smr-client: the --peers list
// ("1=HOST:PORT,2=HOST:PORT,...": each replica's raft id and Nexus address).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace smr {

// nullopt when malformed: an entry without '=', an id that is not a
// positive integer, a duplicate id or address, or no ':' in an address.
inline std::optional<std::map<uint64_t, std::string>> parse_peers(const std::string& text) {
  std::map<uint64_t, std::string> peers;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) return std::nullopt;
    uint64_t id = 0;
    for (size_t i = 0; i < eq; i++) {
      if (item[i] < '0' || item[i] > '9' || id > 1'000'000) return std::nullopt;
      id = id * 10 + static_cast<uint64_t>(item[i] - '0');
    }
    const std::string address = item.substr(eq + 1);
    if (id == 0 || address.find(':') == std::string::npos || address.size() > 255 ||
        peers.count(id) != 0) {
      return std::nullopt;
    }
    for (const auto& [other, addr] : peers) {
      if (addr == address) return std::nullopt;
    }
    peers[id] = address;
    pos = end + 1;
  }
  if (peers.empty()) return std::nullopt;
  return peers;
}

}  // namespace smr
