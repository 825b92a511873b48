// DiskStore: libraft's own disk storage (raft_uv: metadata files, log
// segments, snapshots in a directory) used as RpcRaftIo's store instead of
// MemoryStore, so a replica that is killed can restart under its id. Only
// raft_uv's storage calls are used: its network side is a transport that
// never listens nor connects (messages go over librpc), and its tick is
// ignored (RpcRaftIo ticks). raft_uv runs on a libuv loop of its own, which
// poll() runs without blocking from the replica's main loop; its callbacks
// therefore never run inside the io call that started them.
#pragma once

#include <uv.h>

#include <string>

#include "raft_c.h"

extern "C" {
#include <raft/uv.h>
}

namespace smr {

class DiskStore {
 public:
  // Throws std::runtime_error when the directory is unusable.
  explicit DiskStore(const std::string& dir);
  ~DiskStore();
  DiskStore(const DiskStore&) = delete;
  DiskStore& operator=(const DiskStore&) = delete;

  raft_io* io() { return &io_; }
  // Runs ready libuv callbacks; returns whether any handle is still active.
  bool poll() { return uv_run(&loop_, UV_RUN_NOWAIT) != 0; }
  // Starts closing raft_uv (after raft_close); closed() once done.
  void close();
  bool closed() const { return closed_; }

 private:
  uv_loop_t loop_{};
  raft_uv_transport transport_{};
  raft_io io_{};
  bool closed_ = false;
  bool closing_ = false;
};

}  // namespace smr
