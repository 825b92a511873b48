// Control-path pieces of a samehost channel: the memory region (created,
// sealed, mapped), the peer checks (credentials, bulk-read probe) and the
// client's side of the handshake. Everything here runs on the Rpc thread
// or the watch thread (samehost_watch.h), never on the datapath.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "librpc/error.h"
#include "transport/samehost/samehost_ring.h"
#include "transport/samehost/samehost_wire.h"

namespace rpc::detail::samehost {

// A file descriptor, closed with its owner.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// A mapping of a channel's region, unmapped with its owner.
class Mapping {
 public:
  Mapping() = default;
  Mapping(uint8_t* base, size_t bytes) : base_(base), bytes_(bytes) {}
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { reset(); }
  uint8_t* base() const { return base_; }
  size_t bytes() const { return bytes_; }
  void reset();

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
};

// A new region of g's geometry: a memfd sealed against shrinking and
// growing (so neither side can make the other's accesses fault), mapped
// here, header written.
struct NewRegion {
  Fd memfd;
  Mapping mapping;
};
Result<NewRegion> create_region(const Geometry& g);

// Maps the region a server sent: it must be a memfd sealed against
// shrinking and growing, of exactly the size the Welcome says, whose
// header agrees. Takes ownership of memfd (closed on return).
Result<Mapping> map_peer_region(Fd memfd, const Welcome& welcome, uint32_t slot_bytes,
                                Geometry& out);

// Whether we can read the peer's memory with process_vm_readv: reads the
// 8-byte word it named and compares it with the value it said is there.
// The kernel allows this exactly when it would let us ptrace the peer.
bool probe_peer_memory(pid_t pid, uint64_t addr, uint64_t expect);

// The process at the other end of a connected Unix socket; 0 if unknown.
pid_t socket_peer_pid(int fd);

// The client's side of the handshake with the server named in `answer`:
// connects to its listener, checks that the listener belongs to the
// answer's process, presents the offer's token, and receives the region.
struct ClientChannel {
  Fd socket;  // kept: its hang-up is how the server's death is noticed
  Mapping mapping;
  Geometry geometry;
  bool server_reads_client = false;
};
Result<ClientChannel> client_handshake(const Route& answer, const Route& offer,
                                       bool client_reads_server, uint32_t slot_bytes,
                                       std::chrono::milliseconds timeout);

}  // namespace rpc::detail::samehost
