// The samehost transport's control thread: listens on the transport's Unix
// socket, answers clients' Hellos with their regions, and watches every
// peer for death (socket hang-up, pidfd) so that its sessions end within
// milliseconds, not at the heartbeat timeout. It sleeps in epoll, waking
// every 100 ms to expire stale connections and regions: it never
// busy-polls, and never touches the datapath.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

#include "librpc/types.h"
#include "transport/samehost/samehost_setup.h"

namespace rpc::detail::samehost {

// What a channel's datapath owner and the watch thread share.
struct ChannelLink {
  // The peer said its probe of our memory worked: it can read our bulk
  // payloads with process_vm_readv (server side: learnt from the Hello).
  std::atomic<bool> peer_reads_us{false};
};

// A channel the watch thread gave up on, and why (SmErr::kPeerExited:
// hang-up or exit; kPeerMisbehaved: a protocol violation on the socket;
// kTimeout: the client never came for its region).
struct FailedChannel {
  uint64_t key;
  SmErr reason;
};

class Watch {
 public:
  // Binds the listener under socket_name(getpid(), nonce) and starts the
  // thread. Throws rpc::Error.
  explicit Watch(uint64_t nonce);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Server: a client with this token, in process `pid`, will come for
  // channel `key`'s region (memfd), and is sent `welcome` with it.
  struct Expected {
    uint64_t key = 0;
    Token token{};
    pid_t pid = 0;
    Welcome welcome;
    std::shared_ptr<ChannelLink> link;
  };
  void expect_client(Expected expected, Fd memfd);
  // Client: the handshake is done; watch the server through `socket` and
  // its pidfd.
  void watch_server(uint64_t key, Fd socket, pid_t pid);
  // The channel is gone: stop watching it, close its descriptors, and
  // drop any failure not yet taken.
  void forget(uint64_t key);
  // Failures since the last call. Cheap when there are none.
  size_t take_failed(std::span<FailedChannel> out);
  // Connections accepted and waiting for their Hello (for tests).
  size_t pending_accepts() const;

  static constexpr size_t kMaxPendingAccepts = 64;
  static constexpr std::chrono::milliseconds kHelloTimeout{1000};
  static constexpr std::chrono::milliseconds kRegionClaimTimeout{30000};

 private:
  struct Waiting {  // a region waiting for its client
    Expected expected;
    Fd memfd;
    std::chrono::steady_clock::time_point since;
  };
  // Descriptors are registered with epoll under a tag of their number and
  // a serial, so that an event for one closed meanwhile is never taken for
  // a later descriptor that reuses the number.
  struct Watched {  // a descriptor whose readiness means the peer is gone
    uint64_t key;
    bool is_pidfd;
    uint32_t serial;
  };
  struct Accepted {  // a connection that has not said Hello yet
    std::chrono::steady_clock::time_point since;
    uint32_t serial;
    pid_t pid;  // SO_PEERCRED at accept
  };

  void run();
  void accept_all();
  void on_hello(int fd);
  void on_watched(int fd, uint32_t serial, uint32_t events);
  uint64_t register_fd(int fd, uint32_t events, uint32_t& serial);  // 0: epoll refused it
  void expire(std::chrono::steady_clock::time_point now);
  // False (fd closed) when epoll refuses it.
  bool add_watched(int fd, uint64_t key, bool is_pidfd);
  void close_accepted(int fd);
  void fail(uint64_t key, SmErr reason);  // REQUIRES: mu_ held
  void close_watched_of(uint64_t key);    // REQUIRES: mu_ held

  Fd listener_;
  Fd epoll_;
  Fd wake_;  // eventfd: stop
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, Waiting> waiting_;
  std::unordered_map<int, Watched> watched_;
  std::unordered_map<int, Accepted> accepted_;
  std::vector<FailedChannel> failed_;
  std::atomic<size_t> failed_count_{0};
  uint32_t next_serial_ = 0;
  bool listener_paused_ = false;  // out of descriptors: retried each tick (watch thread only)
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace rpc::detail::samehost
