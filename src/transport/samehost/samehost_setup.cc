// Regions, peer checks and the client's handshake (samehost_setup.h).
#include "transport/samehost/samehost_setup.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

namespace rpc::detail::samehost {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
  }
  return *this;
}

void Mapping::reset() {
  if (base_ != nullptr) munmap(base_, bytes_);
  base_ = nullptr;
}

namespace {

constexpr unsigned kRequiredSeals = F_SEAL_SHRINK | F_SEAL_GROW;

std::string errno_text(const char* what) {
  return fmt::format("{}: {}", what, std::strerror(errno));
}

}  // namespace

Result<NewRegion> create_region(const Geometry& g) {
  Fd fd(memfd_create("librpc-samehost", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return Failure{errno_text("memfd_create")};
  if (ftruncate(fd.get(), static_cast<off_t>(g.region_bytes())) != 0) {
    return Failure{errno_text("ftruncate of the channel region")};
  }
  if (fcntl(fd.get(), F_ADD_SEALS, kRequiredSeals | F_SEAL_SEAL) != 0) {
    return Failure{errno_text("sealing the channel region")};
  }
  void* base = mmap(nullptr, g.region_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (base == MAP_FAILED) return Failure{errno_text("mmap of the channel region")};
  Mapping mapping(static_cast<uint8_t*>(base), g.region_bytes());
  init_region(mapping.base(), g);
  return NewRegion{std::move(fd), std::move(mapping)};
}

Result<Mapping> map_peer_region(Fd memfd, const Welcome& welcome, uint32_t slot_bytes,
                                Geometry& out) {
  // Unsealed, the peer could shrink the file under our mapping and every
  // access past the new end would kill us with SIGBUS.
  // Plain shared memory only: a hugetlbfs file is sealable too, but a
  // hole the peer punched in it could not be refilled, and touching it
  // would kill us with SIGBUS.
  struct statfs fs {};
  if (fstatfs(memfd.get(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    return Failure{"the server's region is not plain shared memory (tmpfs)"};
  }
  const int seals = fcntl(memfd.get(), F_GET_SEALS);
  if (seals < 0 || (static_cast<unsigned>(seals) & kRequiredSeals) != kRequiredSeals) {
    return Failure{"the server's region is not a memfd sealed against resizing"};
  }
  struct stat st {};
  if (fstat(memfd.get(), &st) != 0 || st.st_size < 0 ||
      static_cast<uint64_t>(st.st_size) != welcome.region_bytes) {
    return Failure{"the server's region is not the size it announced"};
  }
  const Geometry want{welcome.entries, welcome.slot_bytes};
  if (!want.valid() || want.region_bytes() != welcome.region_bytes ||
      welcome.slot_bytes != slot_bytes) {
    return Failure{fmt::format("the server's region geometry is unusable ({} entries of {} bytes)",
                               welcome.entries, welcome.slot_bytes)};
  }
  void* base =
      mmap(nullptr, welcome.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd.get(), 0);
  if (base == MAP_FAILED) return Failure{errno_text("mmap of the server's region")};
  Mapping mapping(static_cast<uint8_t*>(base), welcome.region_bytes);
  Geometry g;
  if (!read_region_header(mapping.base(), mapping.bytes(), slot_bytes, g) ||
      g.entries != want.entries) {
    return Failure{"the server's region header disagrees with its Welcome"};
  }
  out = g;
  return mapping;
}

bool probe_peer_memory(pid_t pid, uint64_t addr, uint64_t expect) {
  uint64_t value = 0;
  iovec local{&value, sizeof value};
  iovec remote{reinterpret_cast<void*>(addr), sizeof value};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == sizeof value && value == expect;
}

pid_t socket_peer_pid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

namespace {

// Waits until fd is ready for `events` or the deadline passes.
bool wait_for(int fd, short events, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

// Receives the Welcome and at most one descriptor with it; any other
// descriptor the server sent is closed, never kept.
Result<Welcome> receive_welcome(int fd, Fd& memfd) {
  uint8_t buf[kWelcomeBytes + 1];
  iovec iov{buf, sizeof buf};
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(4 * sizeof(int))];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (n < 0) return Failure{errno_text("receiving the server's Welcome")};
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++) {
      int received;
      std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof received);
      if (!memfd) {
        memfd = Fd(received);
      } else {
        close(received);
      }
    }
  }
  const auto welcome = decode_welcome(std::span<const uint8_t>(buf, static_cast<size_t>(n)));
  if (!welcome) return Failure{"the server's Welcome is malformed"};
  return *welcome;
}

}  // namespace

Result<ClientChannel> client_handshake(const Route& answer, const Route& offer,
                                       bool client_reads_server, uint32_t slot_bytes,
                                       std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Fd sock(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!sock) return Failure{errno_text("socket")};
  const SocketName name = socket_name(answer.pid, answer.listener_nonce);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.bytes.data(), name.len);
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.len);
  // A Unix socket connects at once or not at all; EAGAIN means the
  // listener's backlog is full for now, and the socket is still
  // unconnected: try again until the deadline.
  while (connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
    if (errno != EAGAIN && errno != EINTR) {
      return Failure{
          errno_text("connecting to the server's samehost socket (is it on this host, "
                     "in this network namespace?)")};
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return Failure{"the server's samehost socket accepted no connection in time"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Only the process that answered the connect request may hand us a
  // region: anyone else listening under that name is refused.
  if (socket_peer_pid(sock.get()) != static_cast<pid_t>(answer.pid)) {
    return Failure{"the samehost socket does not belong to the answering process"};
  }
  Hello hello;
  hello.channel_id = answer.channel_id;
  hello.channel_gen = answer.channel_gen;
  hello.token = offer.token;
  hello.client_reads_server = client_reads_server;
  std::array<uint8_t, kHelloBytes> bytes;
  encode_hello(hello, bytes);
  if (send(sock.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(bytes.size())) {
    return Failure{errno_text("sending Hello")};
  }
  if (!wait_for(sock.get(), POLLIN, deadline)) return Failure{"the server sent no Welcome in time"};
  Fd memfd;
  auto welcome = receive_welcome(sock.get(), memfd);
  if (!welcome) return Failure{welcome.error()};
  if (welcome->status != WelcomeStatus::kAccepted || welcome->channel_id != answer.channel_id) {
    return Failure{"the server refused the channel"};
  }
  if (!memfd) return Failure{"the server's Welcome carried no region"};
  ClientChannel out;
  auto mapping = map_peer_region(std::move(memfd), *welcome, slot_bytes, out.geometry);
  if (!mapping) return Failure{mapping.error()};
  out.socket = std::move(sock);
  out.mapping = std::move(*mapping);
  out.server_reads_client = welcome->server_reads_client;
  return out;
}

}  // namespace rpc::detail::samehost
