// The samehost transport's pieces: the rings (as a hostile peer could
// leave them), the wire formats, the sealed region, and two transports of
// one process connected through the real handshake.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "transport/samehost/samehost_ring.h"
#include "transport/samehost/samehost_setup.h"
#include "transport/samehost/samehost_transport.h"
#include "transport/samehost/samehost_wire.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::detail::samehost;

namespace {

constexpr Geometry kSmall{8, 256};

// A zeroed, page-aligned region of g's size, as a fresh memfd maps.
struct PrivateRegion {
  explicit PrivateRegion(const Geometry& g) : bytes(g.region_bytes()) {
    base = static_cast<uint8_t*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    REQUIRE(base != MAP_FAILED);
    init_region(base, g);
  }
  ~PrivateRegion() { munmap(base, bytes); }
  uint8_t* base;
  size_t bytes;
};

std::array<uint8_t, kPktHeaderBytes> header_with(uint8_t fill) {
  std::array<uint8_t, kPktHeaderBytes> h;
  h.fill(fill);
  return h;
}

}  // namespace

TEST_CASE("samehost ring: packets go through in order, read in place", "[unit][samehost]") {
  PrivateRegion region(kSmall);
  RingWriter writer(region.base, kSmall, kClientToServer);
  RingReader reader(region.base, kSmall, kClientToServer);
  std::vector<uint8_t> data(100);
  for (uint32_t round = 0; round < 3 * kSmall.entries; round++) {
    const auto hdr = header_with(static_cast<uint8_t>(round));
    std::fill(data.begin(), data.end(), static_cast<uint8_t>(round + 1));
    const auto len = static_cast<uint32_t>(round % data.size());
    REQUIRE(writer.push(hdr.data(), data.data(), len) == RingWriter::Push::kOk);
    uint8_t* pkt;
    uint32_t got_len;
    REQUIRE(reader.poll(pkt, got_len) == RingReader::Poll::kPacket);
    CHECK(got_len == kPktHeaderBytes + len);
    CHECK(pkt[0] == static_cast<uint8_t>(round));
    if (len > 0) CHECK(pkt[kPktHeaderBytes + len - 1] == static_cast<uint8_t>(round + 1));
    // The packet sits in its slot of the shared ring: no copy on receive.
    CHECK(pkt >= region.base + kSmall.ring_offset(kClientToServer));
    CHECK(pkt < region.base + kSmall.ring_offset(kClientToServer + 1));
    reader.release(reader.head());
    uint8_t* none;
    CHECK(reader.poll(none, got_len) == RingReader::Poll::kEmpty);
  }
}

TEST_CASE("samehost ring: a writer stops at a full ring until the reader releases",
          "[unit][samehost]") {
  PrivateRegion region(kSmall);
  RingWriter writer(region.base, kSmall, kServerToClient);
  RingReader reader(region.base, kSmall, kServerToClient);
  const auto hdr = header_with(7);
  for (uint32_t i = 0; i < kSmall.entries; i++) {
    REQUIRE(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kOk);
  }
  CHECK(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kFull);
  uint8_t* pkt;
  uint32_t len;
  REQUIRE(reader.poll(pkt, len) == RingReader::Poll::kPacket);
  CHECK(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kFull);  // polled, not released
  reader.release(reader.head());
  CHECK(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kOk);
}

TEST_CASE("samehost ring: an impossible consumer index from the peer is reported, not used",
          "[unit][samehost]") {
  PrivateRegion region(kSmall);
  RingWriter writer(region.base, kSmall, kServerToClient);
  const auto hdr = header_with(1);
  for (uint32_t i = 0; i < kSmall.entries; i++) {
    REQUIRE(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kOk);
  }
  // Given a reader that claims to have consumed more than was ever written
  store_shared(region.base + kConsumerIndexOffset[kServerToClient], 1000,
               std::memory_order_relaxed);
  // Expect the writer to refuse rather than overwrite slots still unread
  CHECK(writer.push(hdr.data(), nullptr, 0) == RingWriter::Push::kCorrupt);
  CHECK(writer.tail() == kSmall.entries);
}

TEST_CASE("samehost ring: a slot with an impossible length is consumed and not handed out",
          "[unit][samehost]") {
  PrivateRegion region(kSmall);
  uint8_t* slot0 = region.base + kSmall.ring_offset(kClientToServer);
  RingReader reader(region.base, kSmall, kClientToServer);
  for (const uint32_t bad_len :
       {0u, uint32_t{kPktHeaderBytes} - 1, kSmall.slot_bytes + 1, UINT32_MAX}) {
    uint8_t* slot = slot0 + (reader.head() % kSmall.entries) * kSmall.slot_stride();
    std::memcpy(slot + kSlotLenOffset, &bad_len, sizeof bad_len);
    store_shared(slot + kSlotSeqOffset, reader.head() + 1, std::memory_order_release);
    uint8_t* pkt = nullptr;
    uint32_t len = 0;
    CHECK(reader.poll(pkt, len) == RingReader::Poll::kMalformed);
    CHECK(pkt == nullptr);
  }
  CHECK(reader.head() == 4);
}

TEST_CASE("samehost region header: only a header describing exactly the region is accepted",
          "[unit][samehost]") {
  PrivateRegion region(kSmall);
  Geometry g;
  CHECK(read_region_header(region.base, region.bytes, kSmall.slot_bytes, g));
  CHECK(g.entries == kSmall.entries);
  CHECK_FALSE(read_region_header(region.base, region.bytes, kSmall.slot_bytes + 64, g));
  CHECK_FALSE(read_region_header(region.base, region.bytes - kPageBytes, kSmall.slot_bytes, g));
  const uint32_t not_pow2 = 12;
  std::memcpy(region.base + kHeaderEntriesOffset, &not_pow2, 4);
  CHECK_FALSE(read_region_header(region.base, region.bytes, kSmall.slot_bytes, g));
}

TEST_CASE("samehost routing info and handshake messages round-trip and reject garbage",
          "[unit][samehost]") {
  Route r;
  r.kind = RouteKind::kOffer;
  r.pid = 1234;
  r.listener_nonce = 0x1122334455667788ULL;
  r.probe_addr = 0xdeadbeef;
  r.token[3] = 9;
  RoutingInfo info;
  encode_route(r, info);
  auto back = decode_route(info, RouteKind::kOffer);
  REQUIRE(back);
  CHECK(back->pid == 1234);
  CHECK(back->token == r.token);
  CHECK_FALSE(decode_route(info, RouteKind::kAnswer));  // kinds are not interchangeable
  r.token = {};
  encode_route(r, info);
  CHECK_FALSE(decode_route(info, RouteKind::kOffer));  // an offer needs a token

  Hello h;
  h.channel_id = 5;
  h.channel_gen = 6;
  h.token[0] = 1;
  h.client_reads_server = true;
  std::array<uint8_t, kHelloBytes> hb;
  encode_hello(h, hb);
  auto h2 = decode_hello(hb);
  REQUIRE(h2);
  CHECK(h2->channel_id == 5);
  CHECK(h2->client_reads_server);
  CHECK_FALSE(decode_hello(std::span<const uint8_t>(hb).first(kHelloBytes - 1)));
  hb[6] |= 0x80;  // an unknown flag
  CHECK_FALSE(decode_hello(hb));

  Welcome w;
  w.status = WelcomeStatus::kAccepted;
  w.entries = 64;
  w.region_bytes = 1 << 20;
  std::array<uint8_t, kWelcomeBytes> wb;
  encode_welcome(w, wb);
  auto w2 = decode_welcome(wb);
  REQUIRE(w2);
  CHECK(w2->region_bytes == 1 << 20);
  wb[6] = 9;  // no such status
  CHECK_FALSE(decode_welcome(wb));
}

TEST_CASE("samehost region: sealed against resizing, and unsealed or mis-sized ones refused",
          "[unit][samehost]") {
  auto region = create_region(kSmall);
  REQUIRE(region);
  const int seals = fcntl(region->memfd.get(), F_GET_SEALS);
  CHECK((seals & F_SEAL_SHRINK) != 0);
  CHECK((seals & F_SEAL_GROW) != 0);
  CHECK(ftruncate(region->memfd.get(), 0) != 0);  // nobody can pull pages from under a mapping

  Welcome w;
  w.entries = kSmall.entries;
  w.slot_bytes = kSmall.slot_bytes;
  w.region_bytes = kSmall.region_bytes();
  Geometry g;
  CHECK(map_peer_region(Fd(dup(region->memfd.get())), w, kSmall.slot_bytes, g));
  Welcome too_big = w;
  too_big.region_bytes += kPageBytes;
  CHECK_FALSE(map_peer_region(Fd(dup(region->memfd.get())), too_big, kSmall.slot_bytes, g));

  Fd unsealed(memfd_create("unsealed", MFD_CLOEXEC));
  REQUIRE(ftruncate(unsealed.get(), static_cast<off_t>(kSmall.region_bytes())) == 0);
  CHECK_FALSE(map_peer_region(std::move(unsealed), w, kSmall.slot_bytes, g));
}

namespace {

// A client and a server transport of this process, connected as the
// engine connects them.
struct Pair {
  RpcConfig config;
  std::unique_ptr<SamehostTransport> server, client;
  RoutingInfo offer, server_route, client_route;
  explicit Pair(bool copy_rx = false) {
    config.transport = "samehost";
    config.samehost_copy_rx = copy_rx;
    server = std::make_unique<SamehostTransport>(config);
    client = std::make_unique<SamehostTransport>(config);
    client->fill_local_routing_info(offer);
    REQUIRE(client->prepare_connect(offer, 0));
    server_route = offer;
    REQUIRE(server->resolve_remote_routing_info(server_route));
    server->fill_connect_answer(server_route, client_route);
  }
  bool connect() { return client->resolve_connect_answer(client_route, offer); }
};

// Whether p lies in a mapping of a samehost region (as /proc/self/maps
// names the memfd).
bool in_shared_region(const void* p) {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  REQUIRE(maps != nullptr);
  char line[512];
  bool found = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    uintptr_t lo, hi;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    if (addr >= lo && addr < hi && std::strstr(line, "memfd:librpc-samehost") != nullptr) {
      found = true;
    }
  }
  std::fclose(maps);
  return found;
}

template <typename F>
bool eventually(F&& done, std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

}  // namespace

TEST_CASE("samehost: two transports connect through the handshake and exchange packets",
          "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  CHECK(p.client->live_channels() == 1);
  CHECK(p.server->live_channels() == 1);
  const auto hdr = header_with(0x5a);
  std::vector<uint8_t> data(300, 0x33);
  const TxItem item{&p.client_route, hdr.data(), data.data(), static_cast<uint32_t>(data.size()),
                    0};
  p.client->tx_burst(std::span(&item, 1));
  std::array<RxPacket, 4> rx;
  REQUIRE(p.server->rx_burst(rx) == 1);
  CHECK(rx[0].len == kPktHeaderBytes + data.size());
  CHECK(rx[0].src_key == p.server->src_key_of(p.server_route));
  CHECK(rx[0].buf[0] == 0x5a);
  CHECK(rx[0].buf[kPktHeaderBytes + 299] == 0x33);
  p.server->post_recvs(1);
  // And back.
  const TxItem back{&p.server_route, hdr.data(), nullptr, 0, 0};
  p.server->tx_burst(std::span(&back, 1));
  REQUIRE(p.client->rx_burst(rx) == 1);
  CHECK(rx[0].src_key == p.client->src_key_of(p.client_route));
  p.client->post_recvs(1);
  CHECK(p.client->rx_burst(rx) == 0);
}

TEST_CASE("samehost: a full peer ring drops the datagram and counts it", "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  const auto hdr = header_with(1);
  const TxItem item{&p.client_route, hdr.data(), nullptr, 0, 0};
  const uint32_t entries = p.server->geometry().entries;
  for (uint32_t i = 0; i <= entries; i++) p.client->tx_burst(std::span(&item, 1));
  CHECK(p.client->tx_ring_full() == 1);
  std::array<RxPacket, 256> rx;
  size_t got = 0;
  while (size_t n = p.server->rx_burst(rx)) {
    got += n;
    p.server->post_recvs(n);
  }
  CHECK(got == entries);
}

TEST_CASE("samehost: only the offer's token opens the region", "[unit][samehost]") {
  Pair p;
  RoutingInfo forged = p.offer;
  forged.bytes[24] ^= 1;  // one bit of the token
  const auto answer = decode_route(p.client_route, RouteKind::kAnswer);
  const auto offer = decode_route(forged, RouteKind::kOffer);
  REQUIRE(answer);
  REQUIRE(offer);
  auto ch = client_handshake(*answer, *offer, false, p.server->geometry().slot_bytes,
                             std::chrono::milliseconds(2000));
  CHECK_FALSE(ch);
  // The honest client still gets it afterwards: a refusal costs nothing.
  CHECK(p.connect());
}

TEST_CASE("samehost: a region is handed out once", "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  // Given the same client presenting the same token a second time
  const auto offer = decode_route(p.offer, RouteKind::kOffer);
  RoutingInfo again;
  p.server->fill_connect_answer(p.server_route, again);
  const auto server = decode_route(again, RouteKind::kAnswer);
  REQUIRE(offer);
  REQUIRE(server);
  // Expect a refusal: the region went to the first
  auto ch = client_handshake(*server, *offer, false, p.server->geometry().slot_bytes,
                             std::chrono::milliseconds(2000));
  CHECK_FALSE(ch);
}

TEST_CASE("samehost: the end of a peer's channel is noticed within milliseconds",
          "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  const uint64_t path = p.client->bulk_path_of(p.client_route);
  // Given the server side going away (as its process exiting would close it)
  p.server->release_remote_routing_info(p.server_route);
  // Expect the client to report the path failed, with the reason
  std::array<uint64_t, 4> failed{};
  size_t n = 0;
  const auto start = std::chrono::steady_clock::now();
  CHECK(eventually([&] { return (n = p.client->poll_failed_bulk_paths(failed)) > 0; }));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(500));
  REQUIRE(n == 1);
  CHECK(failed[0] == path);
  CHECK(p.client->bulk_path_failure_reason(path) == SmErr::kPeerExited);
}

TEST_CASE("samehost: bulk reads copy exactly the offered payload, and a bad address fails the path",
          "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  std::vector<uint8_t> payload(1 << 20);
  for (size_t i = 0; i < payload.size(); i++) payload[i] = static_cast<uint8_t>(i * 7);
  Exposure e;
  REQUIRE(p.client->expose_for_read(p.client_route, payload.data(), payload.size(), MemReg{}, e));
  std::vector<uint8_t> into(payload.size());
  BulkOp op{&p.server_route,
            into.data(),
            0,
            nullptr,
            e.remote_addr,
            e.key,
            static_cast<uint32_t>(into.size()),
            77};
  REQUIRE(p.server->post_read(op));
  std::array<BulkCompletion, 4> done;
  REQUIRE(p.server->poll_bulk(done) == 1);
  CHECK(done[0].cookie == 77);
  CHECK(done[0].ok);
  CHECK(into == payload);

  // Given a peer naming memory it does not have mapped
  BulkOp bad = op;
  bad.remote_addr = 8;
  bad.cookie = 78;
  REQUIRE(p.server->post_read(bad));
  // Expect the read to fail and the channel to be given up
  REQUIRE(p.server->poll_bulk(done) == 1);
  CHECK_FALSE(done[0].ok);
  std::array<uint64_t, 4> failed{};
  REQUIRE(p.server->poll_failed_bulk_paths(failed) == 1);
  CHECK(p.server->bulk_path_failure_reason(failed[0]) == SmErr::kPeerMisbehaved);
}

TEST_CASE("samehost: packets are read in place, or from a private copy with samehost_copy_rx",
          "[unit][samehost]") {
  for (const bool copy_rx : {false, true}) {
    Pair p(copy_rx);
    REQUIRE(p.connect());
    const auto hdr = header_with(0x11);
    std::vector<uint8_t> data(64, 0x22);
    const TxItem item{&p.client_route, hdr.data(), data.data(), 64, 0};
    p.client->tx_burst(std::span(&item, 1));
    std::array<RxPacket, 4> rx;
    REQUIRE(p.server->rx_burst(rx) == 1);
    CHECK(rx[0].buf[kPktHeaderBytes + 63] == 0x22);
    // In place: the engine (and a handler) reads the peer's slot; copied:
    // memory of ours that the peer cannot reach.
    CHECK(in_shared_region(rx[0].buf) == !copy_rx);
    p.server->post_recvs(1);
  }
}

TEST_CASE("samehost: towards a peer that cannot read our memory, nothing is exposed",
          "[unit][samehost]") {
  // Given a client whose probe word the server cannot read (as across
  // users, or towards a non-dumpable process): its offer names an address
  // it does not have mapped
  RpcConfig config;
  config.transport = "samehost";
  SamehostTransport server(config), client(config);
  RoutingInfo offer;
  client.fill_local_routing_info(offer);
  REQUIRE(client.prepare_connect(offer, 0));
  auto r = decode_route(offer, RouteKind::kOffer);
  REQUIRE(r);
  r->probe_addr = 8;
  encode_route(*r, offer);
  RoutingInfo server_route = offer, client_route;
  REQUIRE(server.resolve_remote_routing_info(server_route));
  server.fill_connect_answer(server_route, client_route);
  REQUIRE(client.resolve_connect_answer(client_route, offer));
  // Expect the client to refuse to expose payloads to it (the engine then
  // sends them as packets), while the server, whose word the client did
  // read, still exposes its own
  std::vector<uint8_t> payload(1 << 20);
  Exposure e;
  CHECK_FALSE(client.expose_for_read(client_route, payload.data(), payload.size(), MemReg{}, e));
  CHECK(server.expose_for_read(server_route, payload.data(), payload.size(), MemReg{}, e));
}

namespace {

// The first mapping of a samehost region in this process.
uint8_t* first_shared_region() {
  std::FILE* maps = std::fopen("/proc/self/maps", "r");
  REQUIRE(maps != nullptr);
  char line[512];
  uintptr_t found = 0;
  while (found == 0 && std::fgets(line, sizeof line, maps) != nullptr) {
    uintptr_t lo, hi;
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 &&
        std::strstr(line, "memfd:librpc-samehost") != nullptr) {
      found = lo;
    }
  }
  std::fclose(maps);
  REQUIRE(found != 0);
  return reinterpret_cast<uint8_t*>(found);
}

}  // namespace

TEST_CASE("samehost: a slot with an impossible length ends the channel, not just the packet",
          "[unit][samehost]") {
  Pair p;
  REQUIRE(p.connect());
  // Given the client writing a slot no honest writer would: the right
  // sequence word, a length beyond the slot
  const Geometry g = p.server->geometry();
  uint8_t* slot = first_shared_region() + g.ring_offset(kClientToServer);
  const uint32_t bad_len = g.slot_bytes + 1;
  std::memcpy(slot + kSlotLenOffset, &bad_len, sizeof bad_len);
  store_shared(slot + kSlotSeqOffset, 1, std::memory_order_release);
  // Expect the server to hand out nothing, stop polling the channel (a
  // peer rewriting slots as fast as we read them would otherwise keep us
  // in rx_burst), and report it failed, with the reason
  std::array<RxPacket, 4> rx;
  CHECK(p.server->rx_burst(rx) == 0);
  CHECK(p.server->malformed_slots() == 1);
  store_shared(slot + kSlotSeqOffset, 1, std::memory_order_release);
  CHECK(p.server->rx_burst(rx) == 0);
  CHECK(p.server->malformed_slots() == 1);
  std::array<uint64_t, 4> failed{};
  REQUIRE(p.server->poll_failed_bulk_paths(failed) == 1);
  CHECK(p.server->bulk_path_failure_reason(failed[0]) == SmErr::kPeerMisbehaved);
}

TEST_CASE("samehost: a process no region waits for is turned away at once", "[unit][samehost]") {
  // Given a server transport expecting nobody, and a local process
  // connecting to its socket anyway
  RpcConfig config;
  config.transport = "samehost";
  SamehostTransport server(config);
  RoutingInfo local;
  server.fill_local_routing_info(local);
  const auto me = decode_route(local, RouteKind::kLocal);
  REQUIRE(me);
  const SocketName name = socket_name(me->pid, me->listener_nonce);
  std::vector<Fd> socks;
  for (int i = 0; i < 100; i++) {
    Fd s(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, name.bytes.data(), name.len);
    (void)connect(s.get(), reinterpret_cast<const sockaddr*>(&addr),
                  static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.len));
    socks.push_back(std::move(s));
  }
  // Expect every connection closed by the server, none kept waiting for a
  // Hello (they would fill the table and shut real clients out)
  char byte;
  for (Fd& s : socks) CHECK(recv(s.get(), &byte, 1, 0) == 0);
  CHECK(server.pending_accepts_for_testing() == 0);
}
