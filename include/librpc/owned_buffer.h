// OwnedBuffer: a MsgBuffer that returns itself to its Rpc when destroyed.
// Move-only, so no copy of the handle outlives the free; converts to
// MsgBuffer& wherever the API takes one.
//
//   rpc::OwnedBuffer req(rpc, 64), resp(rpc, 64);
//   if (!req.valid() || !resp.valid()) ...            // out of memory, or too large
//   rpc.enqueue_request(sn, kEcho, req, resp, ...);   // passed as MsgBuffer&
//
// The engine keeps the address of the MsgBuffer it was given until the
// request's continuation runs: until then the OwnedBuffer must not be
// moved, reset or destroyed (keep it where it is: in a coroutine frame, a
// struct that outlives the request, or on the heap). It must be destroyed
// before its Rpc, on the Rpc's thread (or a background handler's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include "librpc/msg_buffer.h"
#include "librpc/rpc.h"

namespace rpc {

class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  // rpc.alloc_msg_buffer(max_size): valid() is false when it failed.
  OwnedBuffer(Rpc& rpc, size_t max_size) : rpc_(&rpc), buf_(rpc.alloc_msg_buffer(max_size)) {}
  ~OwnedBuffer() { reset(); }
  OwnedBuffer(OwnedBuffer&& other) noexcept
      : rpc_(std::exchange(other.rpc_, nullptr)), buf_(std::exchange(other.buf_, MsgBuffer())) {}
  OwnedBuffer& operator=(OwnedBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      rpc_ = std::exchange(other.rpc_, nullptr);
      buf_ = std::exchange(other.buf_, MsgBuffer());
    }
    return *this;
  }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;

  bool valid() const { return buf_.valid(); }
  MsgBuffer& get() { return buf_; }
  const MsgBuffer& get() const { return buf_; }
  operator MsgBuffer&() & { return buf_; }  // NOLINT(implicit): used where MsgBuffer& is taken
  operator const MsgBuffer&() const& { return buf_; }  // NOLINT(implicit)
  // Not from a temporary: it would free the buffer while a request uses it.
  operator MsgBuffer&() && = delete;
  uint8_t* data() { return buf_.data(); }
  const uint8_t* data() const { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  size_t max_size() const { return buf_.max_size(); }
  bool resize(size_t new_size) { return buf_.resize(new_size); }

  // Frees the buffer now; valid() is false after.
  void reset() {
    if (rpc_ != nullptr && buf_.valid()) rpc_->free_msg_buffer(buf_);
    buf_ = MsgBuffer();
  }
  // Gives the buffer up without freeing it, e.g. to Rpc::enqueue_response
  // (which then owns and frees it).
  MsgBuffer release() {
    rpc_ = nullptr;
    return std::exchange(buf_, MsgBuffer());
  }

 private:
  Rpc* rpc_ = nullptr;
  MsgBuffer buf_;
};

}  // namespace rpc
