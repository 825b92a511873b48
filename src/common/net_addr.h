// IPv4 "host:port" addresses for the session-management channel and the
// udp transport.
#pragma once

#include <cstdint>
#include <string>

#include "librpc/error.h"

namespace rpc::detail {

struct NetAddr {
  uint32_t ipv4 = 0;  // host byte order
  uint16_t port = 0;  // host byte order

  std::string ip_string() const;
  std::string to_string() const;  // "a.b.c.d:port"
  uint64_t key() const { return uint64_t{ipv4} << 16 | port; }
  bool operator==(const NetAddr&) const = default;
};

// Parses "host:port" where host is a dotted IPv4 address or a name that
// resolves to one (getaddrinfo; control path only). Port 0 is accepted only
// when allow_port_zero.
Result<NetAddr> parse_uri(const std::string& uri, bool allow_port_zero = false);

}  // namespace rpc::detail
