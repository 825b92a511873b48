// The samehost control thread (samehost_watch.h).
#include "transport/samehost/samehost_watch.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "librpc/error.h"

namespace rpc::detail::samehost {

namespace {

constexpr uint64_t kListenerTag = UINT64_MAX;
constexpr uint64_t kWakeTag = UINT64_MAX - 1;
constexpr int kListenBacklog = 64;
constexpr int kTickMs = 100;  // how often waiting clients and regions are checked for age

int open_pidfd(pid_t pid) { return static_cast<int>(syscall(SYS_pidfd_open, pid, 0)); }

void send_refusal(int fd, uint32_t channel_id) {
  Welcome w;
  w.status = WelcomeStatus::kRefused;
  w.channel_id = channel_id;
  std::array<uint8_t, kWelcomeBytes> bytes;
  encode_welcome(w, bytes);
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Sends the Welcome with the region's descriptor.
bool send_region(int fd, const Welcome& w, int memfd) {
  std::array<uint8_t, kWelcomeBytes> bytes;
  encode_welcome(w, bytes);
  iovec iov{bytes.data(), bytes.size()};
  alignas(cmsghdr) uint8_t control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
  return sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(bytes.size());
}

}  // namespace

Watch::Watch(uint64_t nonce) {
  listener_ = Fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!listener_) throw Error("samehost: socket", errno);
  const SocketName name = socket_name(static_cast<uint32_t>(getpid()), nonce);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, name.bytes.data(), name.len);
  const auto addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.len);
  if (bind(listener_.get(), reinterpret_cast<const sockaddr*>(&addr), addr_len) != 0) {
    throw Error("samehost: binding the listener socket", errno);
  }
  if (listen(listener_.get(), kListenBacklog) != 0) throw Error("samehost: listen", errno);
  epoll_ = Fd(epoll_create1(EPOLL_CLOEXEC));
  wake_ = Fd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_ || !wake_) throw Error("samehost: epoll or eventfd", errno);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  ev.data.u64 = kWakeTag;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  thread_ = std::thread([this] { run(); });
}

Watch::~Watch() {
  stop_.store(true);
  const uint64_t one = 1;
  (void)write(wake_.get(), &one, sizeof one);
  thread_.join();
  for (auto& [fd, w] : watched_) close(fd);
  for (auto& [fd, a] : accepted_) close(fd);
}

void Watch::expect_client(Expected expected, Fd memfd) {
  const std::lock_guard lock(mu_);
  const uint64_t key = expected.key;
  waiting_[key] = Waiting{std::move(expected), std::move(memfd), std::chrono::steady_clock::now()};
}

void Watch::watch_server(uint64_t key, Fd socket, pid_t pid) {
  const std::lock_guard lock(mu_);
  // Unwatched, the server's death would be noticed only at the heartbeat
  // timeout: give the channel up instead.
  if (!add_watched(socket.release(), key, false)) return fail(key, SmErr::kPeerExited);
  const int pidfd = open_pidfd(pid);
  if (pidfd >= 0) add_watched(pidfd, key, true);  // the socket alone still notices its death
}

void Watch::forget(uint64_t key) {
  const std::lock_guard lock(mu_);
  waiting_.erase(key);
  close_watched_of(key);
  std::erase_if(failed_, [key](const FailedChannel& f) { return f.key == key; });
  failed_count_.store(failed_.size(), std::memory_order_release);
}

size_t Watch::take_failed(std::span<FailedChannel> out) {
  if (failed_count_.load(std::memory_order_acquire) == 0) return 0;
  const std::lock_guard lock(mu_);
  const size_t n = std::min(out.size(), failed_.size());
  std::copy_n(failed_.begin(), n, out.begin());
  failed_.erase(failed_.begin(), failed_.begin() + static_cast<ptrdiff_t>(n));
  failed_count_.store(failed_.size(), std::memory_order_release);
  return n;
}

size_t Watch::pending_accepts() const {
  const std::lock_guard lock(mu_);
  return accepted_.size();
}

void Watch::run() {
  std::array<epoll_event, 32> events;
  while (!stop_.load()) {
    const int n = epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), kTickMs);
    for (int i = 0; i < n; i++) {
      const uint64_t tag = events[static_cast<size_t>(i)].data.u64;
      if (tag == kWakeTag) continue;
      if (tag == kListenerTag) {
        accept_all();
        continue;
      }
      const int fd = static_cast<int>(tag & 0xffffffff);
      const auto serial = static_cast<uint32_t>(tag >> 32);
      bool is_accepted;
      {
        const std::lock_guard lock(mu_);
        auto it = accepted_.find(fd);
        is_accepted = it != accepted_.end() && it->second.serial == serial;
      }
      if (is_accepted) {
        on_hello(fd);
      } else {
        on_watched(fd, serial, events[static_cast<size_t>(i)].events);
      }
    }
    expire(std::chrono::steady_clock::now());
  }
}

void Watch::accept_all() {
  // Bounded per wake-up, so that a flood of connects cannot keep the
  // thread from Hellos and death notices.
  for (size_t i = 0; i < kMaxPendingAccepts; i++) {
    const int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors, the listener stays readable: out of the epoll
      // set until the next tick, or the thread would spin on it.
      if (errno == EMFILE || errno == ENFILE) {
        epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
        listener_paused_ = true;
      }
      return;
    }
    const pid_t pid = socket_peer_pid(fd);
    const std::lock_guard lock(mu_);
    // Only a process a region waits for may wait for its Hello here, and
    // no more of its connections than regions wait for it: any other local
    // process (the socket's name is no secret) is turned away at once, and
    // cannot fill the table and shut the real clients out.
    size_t regions = 0, connections = 0;
    for (const auto& [key, w] : waiting_) regions += w.expected.pid == pid ? 1 : 0;
    for (const auto& [other, a] : accepted_) connections += a.pid == pid ? 1 : 0;
    if (pid == 0 || connections >= regions || accepted_.size() >= kMaxPendingAccepts) {
      close(fd);
      continue;
    }
    uint32_t serial;
    if (register_fd(fd, EPOLLIN | EPOLLRDHUP, serial) == 0) {
      close(fd);
      continue;
    }
    accepted_[fd] = Accepted{std::chrono::steady_clock::now(), serial, pid};
  }
}

void Watch::close_accepted(int fd) {
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  accepted_.erase(fd);
  close(fd);
}

void Watch::on_hello(int fd) {
  // recv without a control buffer: descriptors a client might send are
  // discarded by the kernel, never installed in our table.
  uint8_t buf[kHelloBytes + 1];
  const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  const std::lock_guard lock(mu_);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  const auto hello =
      n > 0 ? decode_hello(std::span<const uint8_t>(buf, static_cast<size_t>(n))) : std::nullopt;
  auto it = hello ? waiting_.find(hello->channel_id | uint64_t{hello->channel_gen} << 32)
                  : waiting_.end();
  // The region goes only to the process that asked for it in its connect
  // request, and only once.
  const bool ok = it != waiting_.end() && it->second.expected.token == hello->token &&
                  socket_peer_pid(fd) == it->second.expected.pid;
  if (!ok) {
    if (hello) send_refusal(fd, hello->channel_id);
    RPC_LOG_WARN(
        "samehost: refused a connection to the channel socket (no such channel, wrong "
        "token, or not the process that asked)");
    close_accepted(fd);
    return;
  }
  Waiting& w = it->second;
  Welcome welcome = w.expected.welcome;
  welcome.status = WelcomeStatus::kAccepted;
  const uint64_t key = w.expected.key;
  // Before the region goes out: once the client has it, its first request
  // may already be answered, with a large response exposed to it.
  w.expected.link->peer_reads_us.store(hello->client_reads_server, std::memory_order_release);
  if (!send_region(fd, welcome, w.memfd.get())) {
    close_accepted(fd);
    fail(key, SmErr::kPeerMisbehaved);
    waiting_.erase(it);
    return;
  }
  const pid_t pid = w.expected.pid;
  waiting_.erase(it);  // closes our copy of the region's descriptor
  accepted_.erase(fd);
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr);
  if (!add_watched(fd, key, false)) return fail(key, SmErr::kPeerExited);
  const int pidfd = open_pidfd(pid);
  if (pidfd >= 0) add_watched(pidfd, key, true);
}

void Watch::on_watched(int fd, uint32_t serial, uint32_t events) {
  const std::lock_guard lock(mu_);
  auto it = watched_.find(fd);
  if (it == watched_.end() || it->second.serial != serial) return;  // forgotten meanwhile
  const uint64_t key = it->second.key;
  if (it->second.is_pidfd) {
    fail(key, SmErr::kPeerExited);
    return;
  }
  if ((events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) {
    fail(key, SmErr::kPeerExited);
    return;
  }
  // Nothing follows the handshake on the socket: anything else is a
  // protocol violation (and would otherwise wake us forever).
  fail(key, SmErr::kPeerMisbehaved);
}

void Watch::expire(std::chrono::steady_clock::time_point now) {
  if (listener_paused_) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenerTag;
    listener_paused_ = epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev) != 0;
  }
  const std::lock_guard lock(mu_);
  std::vector<int> stale;
  for (const auto& [fd, a] : accepted_) {
    if (now - a.since >= kHelloTimeout) stale.push_back(fd);
  }
  for (const int fd : stale) close_accepted(fd);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (now - it->second.since >= kRegionClaimTimeout) {
      fail(it->first, SmErr::kTimeout);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t Watch::register_fd(int fd, uint32_t events, uint32_t& serial) {
  serial = next_serial_++;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = uint64_t{serial} << 32 | static_cast<uint32_t>(fd);
  // 0 is never a valid tag: fds are small, and the listener's and the
  // eventfd's tags are the largest values.
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fd, &ev) != 0) return 0;
  return ev.data.u64 == 0 ? 1 : ev.data.u64;
}

bool Watch::add_watched(int fd, uint64_t key, bool is_pidfd) {
  uint32_t serial;
  if (register_fd(fd, is_pidfd ? EPOLLIN : EPOLLIN | EPOLLRDHUP, serial) == 0) {
    close(fd);
    return false;
  }
  watched_[fd] = Watched{key, is_pidfd, serial};
  return true;
}

void Watch::close_watched_of(uint64_t key) {
  for (auto it = watched_.begin(); it != watched_.end();) {
    if (it->second.key == key) {
      epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->first, nullptr);
      close(it->first);
      it = watched_.erase(it);
    } else {
      ++it;
    }
  }
}

void Watch::fail(uint64_t key, SmErr reason) {
  close_watched_of(key);
  failed_.push_back(FailedChannel{key, reason});
  failed_count_.store(failed_.size(), std::memory_order_release);
}

}  // namespace rpc::detail::samehost
