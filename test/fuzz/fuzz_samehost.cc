// libFuzzer target: everything the samehost transport reads from a peer
// (src/transport/samehost/): the shared region's header, both rings' slots
// and consumer indices as a hostile peer could write them, and the
// handshake messages and routing info it sends.
//
// Input: bytes laid over a small region (8 entries of 80-byte slots): the
// first 64 over the header line, the next 16 over the two consumer
// indices, the rest over the slots of both rings; then the same bytes are
// decoded as a Hello, a Welcome and routing info. Every packet the reader
// hands out must lie inside its ring's slot, with a length it can hold;
// every push must stay inside the ring it writes; nothing may loop.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_util.h"
#include "transport/samehost/samehost_ring.h"
#include "transport/samehost/samehost_wire.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::detail::samehost;

namespace {

constexpr Geometry kGeometry{8, kMinSlotBytes};

void check_reader(uint8_t* region, int ring) {
  RingReader reader(region, kGeometry, ring);
  const uint8_t* ring_begin = region + kGeometry.ring_offset(ring);
  const uint8_t* ring_end = ring_begin + kGeometry.entries * kGeometry.slot_stride();
  // At most one lap and a bit: each poll either consumes a slot or stops.
  for (uint32_t i = 0; i < 3 * kGeometry.entries; i++) {
    uint8_t* pkt = nullptr;
    uint32_t len = 0;
    const RingReader::Poll got = reader.poll(pkt, len);
    if (got == RingReader::Poll::kEmpty) break;
    FUZZ_CHECK(reader.head() == i + 1);
    if (got == RingReader::Poll::kMalformed) continue;
    FUZZ_CHECK(len >= kPktHeaderBytes && len <= kGeometry.slot_bytes);
    FUZZ_CHECK(pkt >= ring_begin && pkt + len <= ring_end);
    // The slot holds the whole packet (ASan also watches the read).
    const size_t slot = static_cast<size_t>(pkt - ring_begin) / kGeometry.slot_stride();
    FUZZ_CHECK(pkt + len <= ring_begin + (slot + 1) * kGeometry.slot_stride());
    volatile uint8_t sink = pkt[len - 1];
    (void)sink;
    reader.release(reader.head());
  }
}

void check_writer(uint8_t* region, int ring, const uint8_t* data, size_t size) {
  RingWriter writer(region, kGeometry, ring);
  uint8_t hdr[kPktHeaderBytes] = {};
  std::vector<uint8_t> payload(kGeometry.slot_bytes - kPktHeaderBytes, 0xab);
  for (uint32_t i = 0; i < 2 * kGeometry.entries; i++) {
    const uint32_t len = size == 0 ? 0 : data[i % size] % (payload.size() + 1);
    const RingWriter::Push got = writer.push(hdr, payload.data(), len);
    if (got != RingWriter::Push::kOk) {
      FUZZ_CHECK(writer.tail() == i);
      break;
    }
    FUZZ_CHECK(writer.tail() == i + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<uint8_t> region_bytes(kGeometry.region_bytes() + kCacheLineBytes);
  // 64-byte aligned, as a mapping is.
  auto* region = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(region_bytes.data()) + kCacheLineBytes - 1) &
      ~uintptr_t{kCacheLineBytes - 1});
  const size_t header = std::min<size_t>(size, kCacheLineBytes);
  std::memcpy(region, data, header);
  for (int ring = 0; ring < 2; ring++) {
    const size_t at = kCacheLineBytes + 8 * static_cast<size_t>(ring);
    if (size >= at + 8) std::memcpy(region + kConsumerIndexOffset[ring], data + at, 8);
  }
  const size_t slots_at = kCacheLineBytes + 16;
  const size_t slot_bytes = 2 * kGeometry.entries * kGeometry.slot_stride();
  if (size > slots_at) {
    std::memcpy(region + kGeometry.ring_offset(0), data + slots_at,
                std::min(size - slots_at, slot_bytes));
  }

  Geometry g;
  if (read_region_header(region, kGeometry.region_bytes(), kGeometry.slot_bytes, g)) {
    FUZZ_CHECK(g.valid() && g.region_bytes() == kGeometry.region_bytes());
  }
  check_reader(region, kServerToClient);
  check_reader(region, kClientToServer);
  check_writer(region, kServerToClient, data, size);
  check_writer(region, kClientToServer, data, size);

  const std::span<const uint8_t> in(data, size);
  if (auto hello = decode_hello(in)) {
    std::array<uint8_t, kHelloBytes> again;
    encode_hello(*hello, again);
    FUZZ_CHECK(decode_hello(again).has_value());
  }
  if (auto welcome = decode_welcome(in)) {
    std::array<uint8_t, kWelcomeBytes> again;
    encode_welcome(*welcome, again);
    FUZZ_CHECK(decode_welcome(again).has_value());
  }
  RoutingInfo info{};
  std::memcpy(info.bytes.data(), data, std::min(size, RoutingInfo::kMaxBytes));
  for (const RouteKind kind :
       {RouteKind::kLocal, RouteKind::kOffer, RouteKind::kAnswer, RouteKind::kResolved}) {
    if (auto route = decode_route(info, kind)) {
      FUZZ_CHECK(route->kind == kind);
      RoutingInfo again{};
      encode_route(*route, again);
      const auto back = decode_route(again, kind);
      FUZZ_CHECK(back && back->pid == route->pid && back->token == route->token &&
                 back->channel_id == route->channel_id);
    }
  }
  return 0;
}
