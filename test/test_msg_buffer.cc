// MsgBuffer layout, sizing and views, built through MsgBufferAccess.
#include "librpc/msg_buffer.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "memory/allocator.h"

using rpc::kPktHeaderBytes;
using rpc::MsgBuffer;
using rpc::Result;
using rpc::detail::Allocation;
using rpc::detail::Allocator;
using rpc::detail::MemReg;
using rpc::detail::MsgBufferAccess;

namespace {

constexpr uint32_t kLkey = 7;
constexpr size_t kDataPerPkt = 256;

// An allocator whose every region is "registered" with lkey kLkey.
struct Fixture {
  Allocator allocator{[](void*, size_t) -> Result<MemReg> {
                        return MemReg{kLkey, nullptr};
                      },
                      [](const MemReg&) {}, false};

  MsgBuffer alloc(size_t max_data, size_t data_per_pkt = kDataPerPkt) {
    const Allocation a = allocator.alloc(MsgBufferAccess::alloc_bytes(max_data, data_per_pkt));
    REQUIRE(a.buf != nullptr);
    return MsgBufferAccess::make(a, max_data, data_per_pkt);
  }
};

}  // namespace

TEST_CASE("a default MsgBuffer is invalid") {
  MsgBuffer m;
  CHECK_FALSE(m.valid());
  CHECK(m.size() == 0);
  CHECK(m.max_size() == 0);
}

TEST_CASE("alloc_bytes covers header 0, the padded data area and the tail headers") {
  CHECK(MsgBufferAccess::alloc_bytes(0, kDataPerPkt) == 16);
  CHECK(MsgBufferAccess::alloc_bytes(1, kDataPerPkt) == 16 + 8);
  CHECK(MsgBufferAccess::alloc_bytes(kDataPerPkt, kDataPerPkt) == 16 + 256);
  CHECK(MsgBufferAccess::alloc_bytes(1001, kDataPerPkt) == 16 + 1008 + 3 * 16);
}

TEST_CASE("header 0 sits right before the data") {
  Fixture f;
  MsgBuffer m = f.alloc(1000);

  CHECK(m.valid());
  CHECK(m.data() - MsgBufferAccess::raw(m) == static_cast<ptrdiff_t>(kPktHeaderBytes));
  CHECK(MsgBufferAccess::hdr(m, 0) == MsgBufferAccess::raw(m));
  CHECK(m.size() == 1000);
  CHECK(m.max_size() == 1000);
  CHECK(MsgBufferAccess::data_per_pkt(m) == kDataPerPkt);
  CHECK(MsgBufferAccess::lkey(m) == kLkey);
  CHECK(MsgBufferAccess::region(m) != nullptr);
}

TEST_CASE("headers after the first lie inside the allocation, past the data") {
  Fixture f;
  const size_t max_data = 1001;  // not a multiple of 8: the data area is padded
  MsgBuffer m = f.alloc(max_data);
  const size_t num_pkts = m.num_pkts();
  REQUIRE(num_pkts == 4);
  const Allocation a = MsgBufferAccess::allocation_of(m);
  uint8_t* const end = a.buf + a.len;

  // Given data filled with a pattern
  std::memset(m.data(), 0xab, m.max_size());
  for (size_t i = 1; i < num_pkts; i++) {
    uint8_t* h = MsgBufferAccess::hdr(m, i);
    INFO("header " << i);
    CHECK(h >= m.data() + max_data);
    CHECK(h + kPktHeaderBytes <= end);
    CHECK(reinterpret_cast<uintptr_t>(h) % 8 == 0);
    if (i > 1) CHECK(h == MsgBufferAccess::hdr(m, i - 1) + kPktHeaderBytes);
    std::memset(h, 0xee, kPktHeaderBytes);
  }
  std::memset(MsgBufferAccess::hdr(m, 0), 0xee, kPktHeaderBytes);

  // Expect writing every header to leave the data alone
  size_t bad = 0;
  for (size_t j = 0; j < max_data; j++) bad += m.data()[j] != 0xab ? 1 : 0;
  CHECK(bad == 0);
}

TEST_CASE("num_pkts counts the packets the current size takes, at least one") {
  Fixture f;
  struct Case {
    size_t size;
    size_t num_pkts;
  };
  const Case cases[] = {{0, 1}, {1, 1}, {kDataPerPkt, 1}, {kDataPerPkt + 1, 2}};
  for (const Case& c : cases) {
    INFO("size " << c.size);
    CHECK(f.alloc(c.size).num_pkts() == c.num_pkts);

    MsgBuffer m = f.alloc(4 * kDataPerPkt);
    REQUIRE(m.resize(c.size));
    CHECK(m.size() == c.size);
    CHECK(m.num_pkts() == c.num_pkts);
  }
}

TEST_CASE("resize beyond the maximum fails and leaves the buffer unchanged") {
  Fixture f;
  MsgBuffer m = f.alloc(1000);
  REQUIRE(m.resize(300));

  CHECK_FALSE(m.resize(1001));

  CHECK(m.size() == 300);
  CHECK(m.num_pkts() == 2);
  CHECK(m.max_size() == 1000);
  CHECK(m.resize(1000));
  CHECK(m.num_pkts() == 4);
}

TEST_CASE("packet data is sliced by data_per_pkt, the last packet holding the rest") {
  Fixture f;
  MsgBuffer m = f.alloc(2 * kDataPerPkt + 10);
  REQUIRE(m.num_pkts() == 3);

  for (size_t i = 0; i < 3; i++) {
    CHECK(MsgBufferAccess::pkt_data(m, i) == m.data() + i * kDataPerPkt);
  }
  CHECK(MsgBufferAccess::pkt_data_len(m, 0) == kDataPerPkt);
  CHECK(MsgBufferAccess::pkt_data_len(m, 1) == kDataPerPkt);
  CHECK(MsgBufferAccess::pkt_data_len(m, 2) == 10);

  REQUIRE(m.resize(2 * kDataPerPkt));
  CHECK(m.num_pkts() == 2);
  CHECK(MsgBufferAccess::pkt_data_len(m, 1) == kDataPerPkt);

  REQUIRE(m.resize(0));
  CHECK(m.num_pkts() == 1);
  CHECK(MsgBufferAccess::pkt_data_len(m, 0) == 0);
}

TEST_CASE("allocation_of gives back what the allocator needs to free the buffer") {
  Fixture f;
  const Allocation a = f.allocator.alloc(MsgBufferAccess::alloc_bytes(5000, kDataPerPkt));
  REQUIRE(a.buf != nullptr);
  MsgBuffer m = MsgBufferAccess::make(a, 5000, kDataPerPkt);
  REQUIRE(m.resize(10));  // the current size must not matter

  const Allocation back = MsgBufferAccess::allocation_of(m);
  CHECK(back.buf == a.buf);
  CHECK(back.region == a.region);
  CHECK(back.size_class == a.size_class);
  CHECK(back.len <= a.len);

  f.allocator.free(back);
  MsgBufferAccess::invalidate(m);
  CHECK_FALSE(m.valid());
  CHECK(f.allocator.alloc(MsgBufferAccess::alloc_bytes(5000, kDataPerPkt)).buf == a.buf);
}

TEST_CASE("make from a failed allocation gives an invalid buffer") {
  CHECK_FALSE(MsgBufferAccess::make(Allocation{}, 100, kDataPerPkt).valid());
}

TEST_CASE("a view wraps received packet data without owning it") {
  std::vector<uint8_t> packet(kPktHeaderBytes + 100, 0x5a);

  MsgBuffer m = MsgBufferAccess::make_view(packet.data(), 100, kDataPerPkt);

  CHECK(m.valid());
  CHECK(MsgBufferAccess::raw(m) == packet.data());
  CHECK(MsgBufferAccess::hdr(m, 0) == packet.data());
  CHECK(m.data() == packet.data() + kPktHeaderBytes);
  CHECK(m.size() == 100);
  CHECK(m.max_size() == 100);
  CHECK(m.num_pkts() == 1);
  CHECK(MsgBufferAccess::pkt_data_len(m, 0) == 100);
  CHECK(MsgBufferAccess::region(m) == nullptr);
  CHECK(MsgBufferAccess::lkey(m) == 0);
}

// set_view must write every field: whatever the MsgBuffer held
// before (an owned buffer of several packets with another packet size and
// size class, or a view of application memory), nothing of it may survive.
TEST_CASE("a one-packet view written in place is make_view's and keeps nothing of what was there") {
  Fixture f;
  constexpr size_t kOtherDataPerPkt = 512;
  const Allocation owned = f.allocator.alloc(MsgBufferAccess::alloc_bytes(5000, kOtherDataPerPkt));
  REQUIRE(owned.buf != nullptr);
  REQUIRE(owned.size_class != 0);
  std::vector<uint8_t> pool(4096, 0xab);
  rpc::detail::AppRegion app;
  app.base = pool.data();
  app.len = pool.size();
  app.reg = MemReg{42, nullptr};
  app.gen = 7;
  const Allocation hdrs = f.allocator.alloc(MsgBufferAccess::view_hdr_bytes(100, kDataPerPkt));
  REQUIRE(hdrs.buf != nullptr);
  std::vector<uint8_t> packet(kPktHeaderBytes + kDataPerPkt, 0x5a);

  for (const size_t size : {size_t{0}, size_t{1}, size_t{33}, kDataPerPkt}) {
    for (const bool was_app_view : {false, true}) {
      MsgBuffer m = was_app_view
                        ? MsgBufferAccess::make_app_view(hdrs, app, pool.data(), 100, kDataPerPkt)
                        : MsgBufferAccess::make(owned, 5000, kOtherDataPerPkt);
      REQUIRE(m.valid());
      if (!was_app_view) REQUIRE(m.num_pkts() > 1);
      MsgBufferAccess::set_view(m, packet.data(), size, kDataPerPkt);
      const MsgBuffer expected = MsgBufferAccess::make_view(packet.data(), size, kDataPerPkt);
      CHECK(std::memcmp(&m, &expected, sizeof(MsgBuffer)) == 0);
      CHECK_FALSE(m.is_app_view());
      CHECK(MsgBufferAccess::region(m) == nullptr);
      CHECK(MsgBufferAccess::lkey(m) == 0);
      CHECK(m.num_pkts() == 1);
      CHECK(m.size() == size);
    }
  }
  f.allocator.free(hdrs);
  f.allocator.free(owned);
}

TEST_CASE("a view of application memory has its headers in a block of their own") {
  Fixture f;
  constexpr uint32_t kAppLkey = 42;
  std::vector<uint8_t> pool(4096, 0xab);
  rpc::detail::AppRegion app;
  app.base = pool.data();
  app.len = pool.size();
  app.reg = MemReg{kAppLkey, nullptr};
  const size_t size = 1001;
  const Allocation hdrs = f.allocator.alloc(MsgBufferAccess::view_hdr_bytes(size, kDataPerPkt));
  REQUIRE(hdrs.buf != nullptr);
  MsgBuffer m = MsgBufferAccess::make_app_view(hdrs, app, pool.data() + 8, size, kDataPerPkt);

  // Expect: the data is the application's, under its key; the headers are
  // the block's, one after the other, under the allocator's key
  CHECK(m.valid());
  CHECK(m.is_app_view());
  CHECK(m.data() == pool.data() + 8);
  CHECK(m.size() == size);
  CHECK(m.num_pkts() == 4);
  CHECK(MsgBufferAccess::lkey(m) == kAppLkey);
  CHECK(MsgBufferAccess::hdr_lkey(m) == kLkey);
  CHECK(MsgBufferAccess::data_region(m) == &app);
  CHECK(MsgBufferAccess::pkt_data(m, 2) == pool.data() + 8 + 2 * kDataPerPkt);
  for (size_t i = 0; i < m.num_pkts(); i++) {
    CHECK(MsgBufferAccess::hdr(m, i) == hdrs.buf + i * kPktHeaderBytes);
    std::memset(MsgBufferAccess::hdr(m, i), 0xee, kPktHeaderBytes);
  }
  const Allocation a = MsgBufferAccess::allocation_of(m);
  CHECK(a.buf == hdrs.buf);
  CHECK(a.len == 4 * kPktHeaderBytes);
  CHECK(a.region == hdrs.region);
  // and writing every header leaves the application's memory alone
  size_t bad = 0;
  for (const uint8_t b : pool) bad += b != 0xab ? 1 : 0;
  CHECK(bad == 0);
  f.allocator.free(a);
  // An ordinary buffer is not a view, and its data is its headers' region's
  MsgBuffer plain = f.alloc(100);
  CHECK_FALSE(plain.is_app_view());
  CHECK(MsgBufferAccess::data_region(plain) == MsgBufferAccess::region(plain));
}
