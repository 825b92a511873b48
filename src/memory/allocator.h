// Buffer allocator for MsgBuffers: power-of-two size classes carved from
// large chunks (2 MiB hugepages when the system has them, normal pages
// otherwise), every chunk registered with the transport once. Blocks larger
// than a chunk get a region of their own, returned to the system on free.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "common/mem_reg.h"
#include "librpc/error.h"
#include "librpc/msg_buffer.h"

namespace rpc::detail {

// A registered memory region (one chunk, or one large allocation).
struct MemRegion {
  uint8_t* base = nullptr;
  size_t len = 0;
  MemReg reg;
  size_t index = 0;  // position in the allocator's region list
};

// Application memory registered with an Rpc (Rpc::register_memory), which
// views (Rpc::app_msg_buffer) send from and receive into. Owned by the Rpc
// (src/rpc/app_memory.cc); the object outlives its registration, so that a
// view or handle of a deregistered one is recognised (gen moved on) rather
// than read freed memory.
struct AppRegion : MemRegion {
  uint32_t gen = 1;   // moves on at each deregistration; never 0 (0 marks "not a view")
  bool live = false;  // registered with the transport now
  // Views of it the engine holds now (Rpc thread only): requests and
  // response buffers from enqueue_request until the continuation, and
  // responses from enqueue_response until the server drops them.
  uint64_t in_flight = 0;
  // RegisterMemoryOptions::on_release, for each view the engine lets go.
  std::function<void(const void*, size_t)> on_release;
};

// Why the last failed alloc() failed.
enum class AllocFailure : uint8_t {
  kNone,                // no alloc has failed yet
  kTooLarge,            // beyond the largest size class
  kOutOfMemory,         // mmap or the allocator's own bookkeeping failed
  kRegistrationFailed,  // the transport refused to register the region
  kOverLimit,           // the regions would exceed the allocator's limit
};
const char* to_string(AllocFailure failure);

// A raw allocation: start, usable length, region and size class.
struct Allocation {
  uint8_t* buf = nullptr;
  size_t len = 0;
  MemRegion* region = nullptr;
  uint32_t size_class = 0;
};

class Allocator {
 public:
  using RegisterFn = std::function<Result<MemReg>(void*, size_t)>;
  using DeregisterFn = std::function<void(const MemReg&)>;

  // thread_safe: take a lock around alloc/free (needed when background
  // handler threads allocate); otherwise single-threaded and lock-free.
  // large_cache_bytes: freed large regions (blocks above kChunkBytes) kept
  // mapped and registered for reuse, up to this many bytes in all; the rest
  // go back to the system at once. 0 keeps none; a few large messages'
  // worth spares each one an mmap, a registration and fresh page faults.
  // limit_bytes: the most bytes of regions mapped at once (bytes_reserved:
  // chunks, whole however few of their blocks are in use, large regions
  // and the cached ones, which are given back first when a new region
  // would pass it); an alloc that needs more fails with kOverLimit.
  Allocator(RegisterFn reg, DeregisterFn dereg, bool thread_safe, size_t large_cache_bytes = 0,
            size_t limit_bytes = SIZE_MAX);
  ~Allocator();  // deregisters and unmaps everything
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // At least len bytes (len > 0), 64-byte aligned. {nullptr...} when the
  // request is too large, out of memory or registration failed; then
  // alloc_failures() counts it and last_failure() says which.
  Allocation alloc(size_t len) noexcept;
  // Small blocks go back to their class's free list (never reallocating);
  // a block larger than kChunkBytes has its region deregistered and
  // unmapped (unless it fits in the large-region cache), so memory a burst
  // of large messages took is given back.
  void free(const Allocation& a) noexcept;

  size_t num_regions() const { return regions_.size(); }
  // Safe to read from any thread.
  size_t bytes_reserved() const { return bytes_reserved_.load(std::memory_order_relaxed); }
  uint64_t alloc_failures() const { return alloc_failures_.load(std::memory_order_relaxed); }
  // Of those, the allocs refused by the limit.
  uint64_t limit_failures() const { return limit_failures_.load(std::memory_order_relaxed); }
  AllocFailure last_failure() const { return last_failure_.load(std::memory_order_relaxed); }
  const char* last_failure_text() const { return to_string(last_failure()); }

  static constexpr size_t kMinClassBytes = 64;
  static constexpr size_t kChunkBytes = 2u << 20;  // classes up to this share chunks
  static constexpr size_t kNumClasses = 32;
  // The bytes an allocation of `len` holds while in use: its size class, or
  // for blocks above a chunk the region of its own (whole hugepages).
  static size_t footprint_bytes(size_t len);

 private:
  Allocation alloc_locked(size_t len) noexcept;
  Allocation alloc_large(uint32_t size_class) noexcept;
  bool grow(uint32_t size_class) noexcept;
  MemRegion* map_region(size_t len) noexcept;
  bool make_room(size_t len) noexcept;
  void unmap_region(MemRegion* region) noexcept;
  void free_large(MemRegion* region) noexcept;
  Allocation fail(AllocFailure why) noexcept;

  RegisterFn register_fn_;
  DeregisterFn deregister_fn_;
  bool thread_safe_;
  std::mutex mutex_;
  // By size class (chunk-sized and smaller): free blocks and the region
  // each lies in, and how many blocks were ever carved for the class (each
  // free list's capacity stays at least that, so free() never allocates).
  std::vector<std::vector<std::pair<uint8_t*, MemRegion*>>> free_lists_;
  std::vector<size_t> carved_;
  std::vector<MemRegion*> regions_;
  // Written under the lock (when thread-safe), read from any thread.
  std::atomic<size_t> bytes_reserved_{0};
  size_t limit_bytes_;
  // Freed large regions kept for reuse, and their total length.
  size_t large_cache_limit_bytes_;
  std::vector<MemRegion*> large_cache_;
  size_t large_cache_bytes_ = 0;
  std::atomic<uint64_t> alloc_failures_{0};
  std::atomic<uint64_t> limit_failures_{0};
  std::atomic<AllocFailure> last_failure_{AllocFailure::kNone};
};

// Builds MsgBuffers on top of the allocator (layout in librpc/msg_buffer.h).
struct MsgBufferAccess {
  // Bytes needed for a buffer of max_data bytes split into data_per_pkt.
  static size_t alloc_bytes(size_t max_data, size_t data_per_pkt);
  // Bytes of the header block of a view of application memory of max_data
  // bytes: one header per packet.
  static size_t view_hdr_bytes(size_t max_data, size_t data_per_pkt) {
    return pkts_for_size(max_data, data_per_pkt) * kPktHeaderBytes;
  }
  static MsgBuffer make(const Allocation& a, size_t max_data, size_t data_per_pkt);
  // A view of [data, data + size) of the application memory `app`, with
  // its headers in `hdrs` (view_hdr_bytes(size, data_per_pkt) bytes).
  // Freeing it frees the header block only.
  static MsgBuffer make_app_view(const Allocation& hdrs, AppRegion& app, uint8_t* data, size_t size,
                                 size_t data_per_pkt);
  // A view of packet data that lives elsewhere: buf points at the packet
  // header, data follows. Not freeable.
  static MsgBuffer make_view(uint8_t* hdr_and_data, size_t data_size, size_t data_per_pkt) {
    MsgBuffer m;
    set_view(m, hdr_and_data, data_size, data_per_pkt);
    return m;
  }
  // make_view written in place over whatever `m` held (every field): the
  // server's zero-copy request goes straight into its handle, once per
  // small RPC.
  static void set_view(MsgBuffer& m, uint8_t* hdr_and_data, size_t data_size, size_t data_per_pkt) {
    m.buf_ = hdr_and_data;
    m.data_ = hdr_and_data + kPktHeaderBytes;
    m.max_data_size_ = static_cast<uint32_t>(data_size);
    m.data_size_ = static_cast<uint32_t>(data_size);
    m.data_per_pkt_ = static_cast<uint32_t>(data_per_pkt);
    m.num_pkts_ = static_cast<uint32_t>(pkts_for_size(data_size, data_per_pkt));
    m.tail_hdr_offset_ = static_cast<uint32_t>(tail_hdr_offset_for(data_size));
    m.size_class_ = 0;
    m.region_ = nullptr;
    m.data_region_ = nullptr;
    m.app_gen_ = 0;
    m.lkey_ = 0;
  }
  // Offset of header 1 from header 0 in a buffer of max_data bytes: after
  // the data, padded to 8 bytes so that the headers stay aligned.
  static size_t tail_hdr_offset_for(size_t max_data) {
    return kPktHeaderBytes + (max_data + 7) / 8 * 8;
  }
  static Allocation allocation_of(const MsgBuffer& m);
  // Header of packet pkt_num. Inline, like the three below: per packet.
  static uint8_t* hdr(MsgBuffer& m, size_t pkt_num) {
    if (pkt_num == 0) return m.buf_;
    return m.buf_ + m.tail_hdr_offset_ + (pkt_num - 1) * kPktHeaderBytes;
  }
  static const uint8_t* pkt_data(const MsgBuffer& m, size_t pkt_num) {
    return m.data() + pkt_num * m.data_per_pkt_;
  }
  static size_t pkt_data_len(const MsgBuffer& m, size_t pkt_num) {
    const size_t offset = pkt_num * m.data_per_pkt_;
    if (offset >= m.data_size_) return 0;  // e.g. packet 0 of an empty message
    const size_t left = m.data_size_ - offset;
    return left < m.data_per_pkt_ ? left : m.data_per_pkt_;
  }
  // The local key of the data (the application's registration for a view).
  static uint32_t lkey(const MsgBuffer& m) { return m.lkey_; }
  // The local key of the headers: the data's, but for a view.
  static uint32_t hdr_lkey(const MsgBuffer& m) {
    if (m.app_gen_ == 0) [[likely]]
      return m.lkey_;
    return m.region_ != nullptr ? m.region_->reg.lkey : 0;
  }
  // Where the headers (and the allocation) lie.
  static MemRegion* region(const MsgBuffer& m) { return m.region_; }
  // Where the data lies: region(), or the application's registration.
  static MemRegion* data_region(const MsgBuffer& m) { return m.data_region_; }
  // REQUIRES: m.is_app_view().
  static AppRegion& app_region(const MsgBuffer& m) {
    return *static_cast<AppRegion*>(m.data_region_);
  }
  static uint32_t app_gen(const MsgBuffer& m) { return m.app_gen_; }
  static uint8_t* raw(const MsgBuffer& m) { return m.buf_; }
  static size_t data_per_pkt(const MsgBuffer& m) { return m.data_per_pkt_; }
  static void invalidate(MsgBuffer& m) { m = MsgBuffer(); }
};

// Builds and reads AppMemory handles (src/rpc/app_memory.cc).
struct AppMemoryAccess {
  static AppMemory make(AppRegion& region) {
    AppMemory m;
    m.region_ = &region;
    m.addr_ = region.base;
    m.len_ = region.len;
    m.gen_ = region.gen;
    return m;
  }
  static AppRegion* region(const AppMemory& m) { return m.region_; }
  static uint32_t gen(const AppMemory& m) { return m.gen_; }
};

}  // namespace rpc::detail
