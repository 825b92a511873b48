// MsgBuffer: a message buffer allocated from an Rpc and registered with its
// transport. Layout (zero-copy TX: every packet is sent straight from here):
//
//   [hdr 0][data ........................ max_size][hdr 1][hdr 2]...[hdr N-1]
//
// Packet 0's header sits right before the data; the headers of later packets
// follow the data area. A MsgBuffer is a small handle: copying it copies the
// handle, not the memory. Free it with Rpc::free_msg_buffer().
//
// A view of application memory (Rpc::app_msg_buffer) has its data in memory
// the application registered (Rpc::register_memory) and its packet headers
// in a small block of their own:
//
//   header block: [hdr 0][hdr 1]...[hdr N-1]      data: the application's bytes
#pragma once

#include <cstddef>
#include <cstdint>

#include "librpc/export.h"

namespace rpc {

// Size of the packet header every datagram starts with.
inline constexpr size_t kPktHeaderBytes = 16;

namespace detail {
struct MemRegion;
struct AppRegion;
struct MsgBufferAccess;
struct AppMemoryAccess;

// Packets a message of `size` bytes takes with `data_per_pkt` bytes of data
// per packet: at least 1, since an empty message still travels as one
// header-only packet (and a default MsgBuffer's data_per_pkt of 0 must not
// divide). The one place this is computed.
constexpr size_t pkts_for_size(size_t size, size_t data_per_pkt) {
  return size <= data_per_pkt || data_per_pkt == 0 ? 1 : (size + data_per_pkt - 1) / data_per_pkt;
}
}  // namespace detail

class RPC_EXPORT MsgBuffer {
 public:
  MsgBuffer() = default;

  // True once allocated by an Rpc (and until freed).
  bool valid() const { return buf_ != nullptr; }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  // True for a view of registered application memory (Rpc::app_msg_buffer).
  bool is_app_view() const { return app_gen_ != 0; }
  // Current message size in bytes (what will be sent).
  size_t size() const { return data_size_; }
  // Capacity fixed at allocation.
  size_t max_size() const { return max_data_size_; }
  // Packets the current size takes on the wire (at least 1).
  size_t num_pkts() const { return num_pkts_; }

  // Sets the message size. Returns false (and changes nothing) when
  // new_size > max_size(). Never reallocates. Inline: it is on the path of
  // every request and response.
  bool resize(size_t new_size) {
    if (new_size > max_data_size_) return false;
    data_size_ = static_cast<uint32_t>(new_size);
    num_pkts_ = static_cast<uint32_t>(detail::pkts_for_size(new_size, data_per_pkt_));
    return true;
  }

 private:
  friend struct detail::MsgBufferAccess;

  uint8_t* buf_ = nullptr;   // header 0 (and the allocation freed with the buffer)
  uint8_t* data_ = nullptr;  // buf_ + kPktHeaderBytes, or application memory (a view)
  uint32_t max_data_size_ = 0;
  uint32_t data_size_ = 0;
  uint32_t data_per_pkt_ = 0;
  uint32_t num_pkts_ = 0;
  uint32_t tail_hdr_offset_ = 0;  // offset of header 1 from buf_
  uint32_t size_class_ = 0;
  detail::MemRegion* region_ = nullptr;       // where buf_ lies: the headers' registration
  detail::MemRegion* data_region_ = nullptr;  // where data_ lies: region_, or the application's
  uint32_t app_gen_ = 0;  // a view: the generation of its registration; 0 otherwise
  uint32_t lkey_ = 0;     // data_region_'s local key, read per packet sent
};

// A range of application memory registered with one Rpc
// (Rpc::register_memory): the application's own pool, from which it makes
// MsgBuffer views (Rpc::app_msg_buffer) that the engine sends from and
// receives into without copying. A small handle: copies name the same
// registration. Invalid once Rpc::deregister_memory() was called with it
// (or any copy of it).
class RPC_EXPORT AppMemory {
 public:
  AppMemory() = default;
  // True once returned by register_memory (it says nothing about a later
  // deregister_memory of a copy).
  bool valid() const { return region_ != nullptr; }
  uint8_t* addr() const { return addr_; }
  size_t len() const { return len_; }

 private:
  friend struct detail::AppMemoryAccess;

  detail::AppRegion* region_ = nullptr;
  uint8_t* addr_ = nullptr;
  size_t len_ = 0;
  uint32_t gen_ = 0;  // the registration's generation when it was made
};

}  // namespace rpc
