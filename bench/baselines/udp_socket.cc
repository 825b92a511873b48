#include "udp_socket.h"

#include <fmt/core.h>
#include <netinet/udp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "scaffold.h"

namespace baseline {

namespace {

// Sets a socket buffer size, beyond net.core.*mem_max when we may (root).
void set_buffer_bytes(int fd, int force_opt, int opt, int bytes) {
  if (::setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof bytes) == 0) return;
  (void)::setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof bytes);
}

}  // namespace

bool is_transient(int err) {
  return err == EAGAIN || err == EWOULDBLOCK || err == EINTR || err == ENOBUFS;
}

UdpSocket::UdpSocket(int buffer_bytes) {
  fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw_errno("socket");
  set_buffer_bytes(fd_, SO_RCVBUFFORCE, SO_RCVBUF, buffer_bytes);
  set_buffer_bytes(fd_, SO_SNDBUFFORCE, SO_SNDBUF, buffer_bytes);
}

UdpSocket::~UdpSocket() {
  if (fd_ >= 0) ::close(fd_);
}

void UdpSocket::bind(const sockaddr_in& addr) {
  if (::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    throw_errno(fmt::format("bind {}", format_addr(addr)));
  }
}

sockaddr_in UdpSocket::local_addr() const {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw_errno("getsockname");
  }
  return addr;
}

void UdpSocket::require_udp_option(int option, int value, std::string_view name,
                                   std::string_view since) {
  if (::setsockopt(fd_, SOL_UDP, option, &value, sizeof value) != 0) {
    throw RunError(
        fmt::format("--offload on, but the kernel refuses {} (setsockopt SOL_UDP {}: {}; it needs "
                    "Linux {} or later); rerun with --offload off",
                    name, name, std::strerror(errno), since));
  }
}

}  // namespace baseline
