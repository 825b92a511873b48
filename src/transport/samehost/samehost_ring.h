// The shared region of one samehost channel and the SPSC rings in it
// (docs/transports.md, "samehost"). One region per session: a page of
// header and consumer indices, then two rings of fixed-size slots, one per
// direction. The side that accepted the session (the server) creates it;
// both map it read-write.
//
// Everything in the region is input from an untrusted peer, who may
// rewrite any byte at any moment: every index and length is read once
// into a local, bounded, and never used to address anything but the slot
// it names. Our own positions live in RingWriter/RingReader (private
// memory), never in the region.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "librpc/msg_buffer.h"

namespace rpc::detail::samehost {

inline constexpr uint64_t kRegionMagic = 0x314d485343505252ULL;  // "RRPCSHM1"
inline constexpr uint32_t kRegionVersion = 1;
inline constexpr size_t kCacheLineBytes = 64;
inline constexpr size_t kPageBytes = 4096;
// Ring geometry a region may have.
inline constexpr uint32_t kMinRingEntries = 8;
inline constexpr uint32_t kMaxRingEntries = 65536;
inline constexpr uint32_t kMinSlotBytes = kPktHeaderBytes + 64;
inline constexpr uint32_t kMaxSlotBytes = 65536;

// A slot: its sequence word (written last, with release order: the slot
// of ring position p is full when it reads p + 1), the packet's length,
// then the packet (header and data) at kSlotPktOffset. A 32-byte RPC fits
// one cache line with its slot header.
inline constexpr size_t kSlotSeqOffset = 0;
inline constexpr size_t kSlotLenOffset = 8;
inline constexpr size_t kSlotPktOffset = 16;

// The region: header line, one consumer-index line per ring (written by
// that ring's reader), the rings from the second page on.
inline constexpr size_t kHeaderMagicOffset = 0;         // u64
inline constexpr size_t kHeaderVersionOffset = 8;       // u32
inline constexpr size_t kHeaderSlotBytesOffset = 12;    // u32
inline constexpr size_t kHeaderEntriesOffset = 16;      // u32
inline constexpr size_t kHeaderRegionBytesOffset = 24;  // u64
inline constexpr size_t kConsumerIndexOffset[2] = {kCacheLineBytes, 2 * kCacheLineBytes};
// Ring 0 carries the server's packets to the client, ring 1 the client's.
inline constexpr int kServerToClient = 0;
inline constexpr int kClientToServer = 1;

struct Geometry {
  uint32_t entries = 0;     // a power of two in [kMinRingEntries, kMaxRingEntries]
  uint32_t slot_bytes = 0;  // packet bytes a slot holds, in [kMinSlotBytes, kMaxSlotBytes]
  size_t slot_stride() const {
    return (kSlotPktOffset + slot_bytes + kCacheLineBytes - 1) / kCacheLineBytes * kCacheLineBytes;
  }
  size_t ring_offset(int ring) const { return kPageBytes + size_t(ring) * entries * slot_stride(); }
  size_t region_bytes() const {
    return (ring_offset(2) + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  bool valid() const {
    return entries >= kMinRingEntries && entries <= kMaxRingEntries &&
           (entries & (entries - 1)) == 0 && slot_bytes >= kMinSlotBytes &&
           slot_bytes <= kMaxSlotBytes;
  }
};

// Writes a fresh header into a zeroed region of g.region_bytes().
void init_region(uint8_t* base, const Geometry& g);
// Reads the header of a mapped region of region_bytes once; true when it
// describes exactly that region with packets of want_slot_bytes.
bool read_region_header(const uint8_t* base, size_t region_bytes, uint32_t want_slot_bytes,
                        Geometry& out);

// Shared words are read and written with atomic operations: the peer
// writes them concurrently, and a torn or stale value is just one more bad
// value the checks below reject.
inline uint64_t load_shared(const uint8_t* p, std::memory_order order) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(const_cast<uint8_t*>(p)))
      .load(order);
}
inline void store_shared(uint8_t* p, uint64_t v, std::memory_order order) {
  std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(p)).store(v, order);
}

// What both ends of one ring know: where its slots and its reader's
// consumer index are, and its geometry (private copies, read once).
class RingView {
 protected:
  RingView() = default;
  RingView(uint8_t* region, const Geometry& g, int ring)
      : slots_(region + g.ring_offset(ring)),
        consumer_index_(region + kConsumerIndexOffset[ring]),
        entries_(g.entries),
        stride_(static_cast<uint32_t>(g.slot_stride())),
        slot_bytes_(g.slot_bytes) {}
  uint8_t* slot(uint64_t position) const { return slots_ + (position & (entries_ - 1)) * stride_; }

  uint8_t* slots_ = nullptr;
  uint8_t* consumer_index_ = nullptr;
  uint32_t entries_ = 0;
  uint32_t stride_ = 0;
  uint32_t slot_bytes_ = 0;
};

// The producer end of one ring.
class RingWriter : public RingView {
 public:
  enum class Push : uint8_t {
    kOk,
    kFull,     // the reader has not released enough slots: datagram lost
    kCorrupt,  // the reader's consumer index is impossible: the peer is broken
  };
  RingWriter() = default;
  RingWriter(uint8_t* region, const Geometry& g, int ring) : RingView(region, g, ring) {}

  // Copies one packet (a header and data_len bytes of data) into the next
  // slot. REQUIRES: kPktHeaderBytes + data_len <= slot_bytes.
  Push push(const uint8_t* hdr, const uint8_t* data, uint32_t data_len) {
    if (tail_ - known_head_ >= entries_) {
      // Read once: the reader may be hostile and rewrite it any time.
      const uint64_t head = load_shared(consumer_index_, std::memory_order_acquire);
      if (head > tail_ || tail_ - head > entries_) return Push::kCorrupt;
      known_head_ = head;
      if (tail_ - head >= entries_) return Push::kFull;
    }
    uint8_t* slot = this->slot(tail_);
    std::memcpy(slot + kSlotPktOffset, hdr, kPktHeaderBytes);
    if (data_len != 0) std::memcpy(slot + kSlotPktOffset + kPktHeaderBytes, data, data_len);
    const uint32_t len = static_cast<uint32_t>(kPktHeaderBytes + data_len);
    std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot + kSlotLenOffset))
        .store(len, std::memory_order_relaxed);
    tail_++;
    store_shared(slot + kSlotSeqOffset, tail_, std::memory_order_release);
    return Push::kOk;
  }
  uint32_t slot_bytes() const { return slot_bytes_; }
  uint64_t tail() const { return tail_; }

 private:
  uint64_t tail_ = 0;        // ring positions written
  uint64_t known_head_ = 0;  // the reader's consumer index when last read
};

// The consumer end of one ring. Packets are read in place: the slot stays
// ours (the writer will not reuse it) until release() passes it.
class RingReader : public RingView {
 public:
  enum class Poll : uint8_t {
    kEmpty,
    kPacket,
    kMalformed,  // a slot with an impossible length: consumed, not handed out
  };
  RingReader() = default;
  RingReader(uint8_t* region, const Geometry& g, int ring) : RingView(region, g, ring) {}

  Poll poll(uint8_t*& pkt, uint32_t& len) {
    uint8_t* slot = this->slot(head_);
    if (load_shared(slot + kSlotSeqOffset, std::memory_order_acquire) != head_ + 1) {
      return Poll::kEmpty;
    }
    head_++;
    // Read once and bounded: what the engine is told is this local.
    const uint32_t l =
        std::atomic_ref<uint32_t>(*reinterpret_cast<uint32_t*>(slot + kSlotLenOffset))
            .load(std::memory_order_relaxed);
    if (l < kPktHeaderBytes || l > slot_bytes_) return Poll::kMalformed;
    pkt = slot + kSlotPktOffset;
    len = l;
    return Poll::kPacket;
  }
  // Hands every ring position before `position` back to the writer.
  // REQUIRES: position <= head().
  void release(uint64_t position) {
    store_shared(consumer_index_, position, std::memory_order_release);
  }
  uint64_t head() const { return head_; }

 private:
  uint64_t head_ = 0;  // ring positions polled
};

}  // namespace rpc::detail::samehost
