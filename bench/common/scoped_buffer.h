// A MsgBuffer that frees itself: allocated from an Rpc, returned to it when
// the scope ends, so that an exception cannot leak it.
#pragma once

#include <fmt/core.h>

#include <cstddef>

#include "common/args.h"
#include "librpc/rpc_all.h"

namespace bench {

class ScopedBuffer {
 public:
  // Throws RunError when the Rpc cannot allocate max_size bytes.
  ScopedBuffer(rpc::Rpc& rpc, std::size_t max_size)
      : rpc_(rpc), buf_(rpc.alloc_msg_buffer(max_size)) {
    if (!buf_.valid()) {
      throw RunError(fmt::format("cannot allocate a {}-byte message buffer (largest: {} B)",
                                 max_size, rpc.max_msg_size()));
    }
  }
  // REQUIRES: the Rpc does not own the buffer (no request outstanding on it).
  ~ScopedBuffer() { rpc_.free_msg_buffer(buf_); }
  ScopedBuffer(const ScopedBuffer&) = delete;
  ScopedBuffer& operator=(const ScopedBuffer&) = delete;

  rpc::MsgBuffer& get() { return buf_; }

 private:
  rpc::Rpc& rpc_;
  rpc::MsgBuffer buf_;
};

}  // namespace bench
