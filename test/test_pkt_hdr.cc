// The 16-byte datapath packet header: size, field isolation and the exact
// byte image, which pins the wire format documented in docs/wire_format.md.
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>

#include "wire/bulk_ctrl.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

// Every field make() takes, as plain numbers.
struct Fields {
  uint8_t pkt_type = 2;
  uint8_t req_type = 0x5a;
  uint32_t msg_size = 0x00abcdef;
  uint16_t dest_session = 0x4321;
  uint16_t pkt_num = 0x0765;
  uint64_t req_num = 0x0123456789aull;
  bool bulk = true;
  uint8_t status = 0x9;
};

PktHdr make(const Fields& f) {
  return PktHdr::make(static_cast<PktType>(f.pkt_type), f.req_type, f.msg_size, f.dest_session,
                      f.pkt_num, f.req_num, f.bulk, static_cast<RespStatus>(f.status));
}

void require_fields(const PktHdr& h, const Fields& f) {
  REQUIRE(static_cast<uint8_t>(h.pkt_type()) == f.pkt_type);
  REQUIRE(h.req_type() == f.req_type);
  REQUIRE(h.msg_size() == f.msg_size);
  REQUIRE(h.dest_session_num() == f.dest_session);
  REQUIRE(h.pkt_num() == f.pkt_num);
  REQUIRE(h.req_num() == f.req_num);
  REQUIRE(h.bulk() == f.bulk);
  REQUIRE(static_cast<uint8_t>(h.status()) == f.status);
  REQUIRE(h.magic_ok());
}

// Builds a header, checks it, and checks it again after a trip through bytes.
void require_round_trip(const Fields& f) {
  const PktHdr h = make(f);
  require_fields(h, f);
  std::array<uint8_t, kPktHeaderBytes> bytes{};
  h.store(bytes.data());
  require_fields(PktHdr::load(bytes.data()), f);
}

}  // namespace

TEST_CASE("the packet header is 16 bytes") {
  STATIC_REQUIRE(sizeof(PktHdr) == 16);
  STATIC_REQUIRE(kPktHeaderBytes == 16);
}

TEST_CASE("every header field round-trips at zero and at its maximum without touching the others") {
  const Fields base;  // distinct values in every field
  require_round_trip(base);

  // For each field: set it to 0, then to its maximum, leaving the rest at
  // their distinct base values.
  auto both = [](auto set) {
    for (bool max : {false, true}) {
      Fields f;
      set(f, max);
      CAPTURE(max);
      require_round_trip(f);
    }
  };
  SECTION("pkt_type") {
    both([](Fields& f, bool max) { f.pkt_type = max ? 3 : 0; });
  }
  SECTION("req_type") {
    both([](Fields& f, bool max) { f.req_type = max ? 0xff : 0; });
  }
  SECTION("msg_size") {
    both([](Fields& f, bool max) { f.msg_size = max ? uint32_t{kMaxMsgSizeField} : 0; });
  }
  SECTION("dest_session_num") {
    both([](Fields& f, bool max) { f.dest_session = max ? 0xffff : 0; });
  }
  SECTION("pkt_num") {
    both([](Fields& f, bool max) { f.pkt_num = max ? uint16_t{kMaxPktNum} : 0; });
  }
  SECTION("req_num") {
    both([](Fields& f, bool max) { f.req_num = max ? kReqNumMask : 0; });
  }
  SECTION("bulk") {
    both([](Fields& f, bool max) { f.bulk = max; });
  }
  SECTION("status") {
    both([](Fields& f, bool max) { f.status = max ? 0xf : 0; });
  }
}

TEST_CASE("all fields at their maximum and all at zero round-trip") {
  Fields max{3,    0xff, uint32_t{kMaxMsgSizeField}, 0xffff, uint16_t{kMaxPktNum}, kReqNumMask,
             true, 0xf};
  require_round_trip(max);
  Fields zero{0, 0, 0, 0, 0, 0, false, 0};
  require_round_trip(zero);
}

TEST_CASE("oversized field values are masked instead of spilling into neighbours") {
  const PktHdr h = PktHdr::make(PktType::kReq, 1, 0xff000002u, 3, 0xc004, (1ull << 44) | 5);
  REQUIRE(h.msg_size() == 2);
  REQUIRE(h.dest_session_num() == 3);
  REQUIRE(h.pkt_num() == 4);
  REQUIRE(h.pkt_type() == PktType::kReq);
  REQUIRE(h.req_num() == 5);
  REQUIRE(h.magic_ok());
  REQUIRE_FALSE(h.bulk());
}

TEST_CASE("a known header has the documented byte image") {
  // Given: kResp, req_type 0x5A, msg_size 0x123456, dest_session 0xBEEF,
  // pkt_num 0x1234, req_num 0xABCDEF01234, bulk, status kNoHandler.
  const PktHdr h = PktHdr::make(PktType::kResp, 0x5a, 0x123456, 0xbeef, 0x1234, 0xabcdef01234ull,
                                true, RespStatus::kNoHandler);
  std::array<uint8_t, kPktHeaderBytes> bytes{};
  h.store(bytes.data());

  // Expect, from the bit table (computed by hand):
  // word 0 = pkt_type 3 << 62 | pkt_num 0x1234 << 48 | session 0xBEEF << 32
  //          | msg_size 0x123456 << 8 | req_type 0x5A
  //        = 0xD234'BEEF'1234'565A
  // word 1 = status 1 << 49 | bulk 1 << 48 | magic 0xB << 44 | req_num 0xABCDEF01234
  //        = 0x0003'BABC'DEF0'1234
  // each stored least significant byte first.
  const std::array<uint8_t, kPktHeaderBytes> expected{
      0x5a, 0x56, 0x34, 0x12, 0xef, 0xbe, 0x34, 0xd2,  // word 0
      0x34, 0x12, 0xf0, 0xde, 0xbc, 0xba, 0x03, 0x00,  // word 1
  };
  REQUIRE(bytes == expected);
  REQUIRE(h.w0 == 0xd234beef1234565aull);
  REQUIRE(h.w1 == 0x0003babcdef01234ull);
}

TEST_CASE("a restart notice is a credit return with bit 53 of word 1 set, and nothing else") {
  const PktHdr h = PktHdr::make_restart(0x5A, 0xBEEF, 0xABCDEF01234);
  CHECK(h.restart());
  CHECK(h.pkt_type() == PktType::kExplCr);
  CHECK(h.req_type() == 0x5A);
  CHECK(h.dest_session_num() == 0xBEEF);
  CHECK(h.req_num() == 0xABCDEF01234);
  CHECK(h.pkt_num() == 0);
  CHECK(h.msg_size() == 0);
  CHECK(!h.bulk());
  CHECK(h.status() == RespStatus::kOk);
  CHECK(h.magic_ok());
  CHECK(h.w1 == (PktHdr::make(PktType::kExplCr, 0x5A, 0, 0xBEEF, 0, 0xABCDEF01234).w1 |
                 (uint64_t{1} << 53)));
  // and no other header carries it
  CHECK(!PktHdr::make(PktType::kExplCr, 0xFF, 0xFFFFFF, 0xFFFF, 0x3FFF, kReqNumMask, true,
                      RespStatus::kAppError)
             .restart());
}

TEST_CASE("a zeroed header fails the magic check") {
  const PktHdr zero;
  REQUIRE_FALSE(zero.magic_ok());
  std::array<uint8_t, kPktHeaderBytes> bytes{};
  REQUIRE_FALSE(PktHdr::load(bytes.data()).magic_ok());
  REQUIRE(PktHdr::make(PktType::kReq, 0, 0, 0, 0, 0).magic_ok());
}

TEST_CASE("the largest message is limited by msg_size and by pkt_num") {
  STATIC_REQUIRE(max_msg_size_for(1456) == (1u << 24) - 1);
  STATIC_REQUIRE(max_msg_size_for(64) == 16384u * 64);
  STATIC_REQUIRE(max_msg_size_for(1024) == (1u << 24) - 1);  // 16384*1024 = 2^24 > field max
}

TEST_CASE("a bulk control payload is 24 little-endian bytes, whatever the host's byte order") {
  const rpc::detail::BulkCtrl c{0x0102030405060708, 0x1112131415161718, 0x21222324, 0};
  std::array<uint8_t, rpc::detail::kBulkCtrlBytes> b{};
  c.store(b.data());
  const std::array<uint8_t, 24> expect{0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
                                       0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
                                       0x24, 0x23, 0x22, 0x21, 0x00, 0x00, 0x00, 0x00};
  CHECK(b == expect);
  const rpc::detail::BulkCtrl back = rpc::detail::BulkCtrl::load(b.data());
  CHECK(back.addr == c.addr);
  CHECK(back.key == c.key);
  CHECK(back.len == c.len);
  CHECK(back.reserved == 0);
  b[20] = 1;
  CHECK(rpc::detail::BulkCtrl::load(b.data()).reserved == 1);
}
