// DiskStore; see disk_store.h.
#include "disk_store.h"

#include <stdexcept>

namespace smr {

namespace {

// A raft_uv transport for a raft_io that never uses raft_uv's network: it
// listens to nothing and refuses connections (RpcRaftIo sends over librpc
// and never calls raft_uv's send).
int transport_init(raft_uv_transport*, raft_id, const char*) { return 0; }
int transport_listen(raft_uv_transport*, raft_uv_accept_cb) { return 0; }
int transport_connect(raft_uv_transport*, raft_uv_connect*, raft_id, const char*,
                      raft_uv_connect_cb) {
  return RAFT_NOCONNECTION;
}
void transport_close(raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  if (cb != nullptr) cb(t);
}

}  // namespace

DiskStore::DiskStore(const std::string& dir) {
  if (uv_loop_init(&loop_) != 0) throw std::runtime_error("uv_loop_init failed");
  transport_.init = transport_init;
  transport_.listen = transport_listen;
  transport_.connect = transport_connect;
  transport_.close = transport_close;
  if (const int rv = raft_uv_init(&io_, &loop_, dir.c_str(), &transport_); rv != 0) {
    uv_loop_close(&loop_);
    throw std::runtime_error("raft_uv_init(" + dir + "): " + raft_strerror(rv) + ": " + io_.errmsg);
  }
}

void DiskStore::close() {
  if (closing_) return;
  closing_ = true;
  io_.data = this;
  io_.close(&io_, [](raft_io* io) { static_cast<DiskStore*>(io->data)->closed_ = true; });
}

DiskStore::~DiskStore() {
  if (closing_) {
    // Let raft_uv finish its pending writes and close its handles.
    for (int i = 0; i < 100000 && !closed_; i++) uv_run(&loop_, UV_RUN_NOWAIT);
    raft_uv_close(&io_);
    while (uv_run(&loop_, UV_RUN_NOWAIT) != 0) {
    }
  } else {
    raft_uv_close(&io_);
  }
  uv_loop_close(&loop_);
}

}  // namespace smr
