#include "common/net_addr.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <charconv>

#include <fmt/format.h>

namespace rpc::detail {

std::string NetAddr::ip_string() const {
  return fmt::format("{}.{}.{}.{}", ipv4 >> 24, (ipv4 >> 16) & 0xff, (ipv4 >> 8) & 0xff,
                     ipv4 & 0xff);
}

std::string NetAddr::to_string() const { return fmt::format("{}:{}", ip_string(), port); }

Result<NetAddr> parse_uri(const std::string& uri, bool allow_port_zero) {
  const size_t colon = uri.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == uri.size()) {
    return Failure{fmt::format("malformed URI '{}': expected host:port", uri)};
  }
  const std::string host = uri.substr(0, colon);
  unsigned port = 0;
  const char* port_begin = uri.data() + colon + 1;
  const char* port_end = uri.data() + uri.size();
  auto [ptr, ec] = std::from_chars(port_begin, port_end, port);
  if (ec != std::errc() || ptr != port_end || port > 65535 || (port == 0 && !allow_port_zero)) {
    return Failure{fmt::format("malformed URI '{}': bad port", uri)};
  }
  NetAddr addr;
  addr.port = static_cast<uint16_t>(port);
  in_addr parsed{};
  if (inet_pton(AF_INET, host.c_str(), &parsed) == 1) {
    addr.ipv4 = ntohl(parsed.s_addr);
    return addr;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Failure{
        fmt::format("cannot resolve host '{}' of URI '{}': {}", host, uri, gai_strerror(rc))};
  }
  addr.ipv4 = ntohl(reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr.s_addr);
  freeaddrinfo(res);
  return addr;
}

}  // namespace rpc::detail
