// The 16-byte datapath packet header. Layout (two little-endian 64-bit
// words; see docs/wire_format.md for the bit table):
//
//   word 0: req_type[0,8) msg_size[8,32) dest_session_num[32,48)
//           pkt_num[48,62) pkt_type[62,64)
//   word 1: req_num[0,44) magic[44,48) bulk[48] status[49,53) restart[53]
//           reserved[54,64)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "librpc/msg_buffer.h"

namespace rpc::detail {

enum class PktType : uint8_t {
  kReq = 0,     // request data (or a bulk control packet when bulk is set)
  kRfr = 1,     // request for response: asks the server for response packet pkt_num
  kExplCr = 2,  // explicit credit return for request packet pkt_num (or, with restart set,
                //   "I dropped what I had of this request: send it again from packet 0")
  kResp = 3,    // response data (or a bulk control packet when bulk is set)
};

// Status carried by response packets.
enum class RespStatus : uint8_t {
  kOk = 0,
  kNoHandler = 1,      // the server has no handler for req_type
  kHandlerFailed = 2,  // the handler threw before responding
  kAppError = 3,       // the handler answered with an application error: 4 bytes, little-endian
  // The server dropped the cached response of this request to make room
  // (rpc/pkt_loss.cc): one header-only packet 0, answering the request
  // or any RFR of it.
  kResponseDropped = 4,
};
// The payload of a kAppError response: the code.
inline constexpr size_t kAppErrorBytes = 4;

inline constexpr uint8_t kPktMagic = 0xB;
inline constexpr size_t kReqTypeBits = 8;
inline constexpr size_t kMsgSizeBits = 24;
inline constexpr size_t kSessionNumBits = 16;
inline constexpr size_t kPktNumBits = 14;
inline constexpr size_t kPktTypeBits = 2;
inline constexpr size_t kReqNumBits = 44;
inline constexpr size_t kMagicBits = 4;
inline constexpr size_t kStatusBits = 4;

inline constexpr uint64_t kMaxMsgSizeField = (1ull << kMsgSizeBits) - 1;
inline constexpr uint64_t kMaxPktNum = (1ull << kPktNumBits) - 1;
inline constexpr uint64_t kReqNumMask = (1ull << kReqNumBits) - 1;

// Request numbers are 44-bit serial numbers (RFC 1982): they wrap, and
// `a` comes after `b` when (a - b) mod 2^44 is in [1, 2^43). Returns the
// signed distance from b to a.
inline int64_t req_num_diff(uint64_t a, uint64_t b) {
  const uint64_t d = (a - b) & kReqNumMask;
  constexpr uint64_t kHalf = (kReqNumMask >> 1) + 1;
  return d < kHalf ? static_cast<int64_t>(d)
                   : static_cast<int64_t>(d) - static_cast<int64_t>(kReqNumMask + 1);
}

static_assert(kReqTypeBits + kMsgSizeBits + kSessionNumBits + kPktNumBits + kPktTypeBits == 64,
              "word 0 of the packet header must be exactly 64 bits");
static_assert(kReqNumBits + kMagicBits + 1 + kStatusBits + 1 <= 64, "word 1 overflows");

struct PktHdr {
  uint64_t w0 = 0;
  uint64_t w1 = 0;

  static PktHdr make(PktType type, uint8_t req_type, uint32_t msg_size, uint16_t dest_session,
                     uint16_t pkt_num, uint64_t req_num, bool bulk = false,
                     RespStatus status = RespStatus::kOk) {
    PktHdr h;
    h.w0 = uint64_t{req_type} | (uint64_t{msg_size} & kMaxMsgSizeField) << 8 |
           uint64_t{dest_session} << 32 | (uint64_t{pkt_num} & kMaxPktNum) << 48 |
           uint64_t{static_cast<uint8_t>(type)} << 62;
    h.w1 = (req_num & kReqNumMask) | uint64_t{kPktMagic} << 44 | uint64_t{bulk} << 48 |
           uint64_t{static_cast<uint8_t>(status)} << 49;
    return h;
  }

  uint8_t req_type() const { return static_cast<uint8_t>(w0); }
  uint32_t msg_size() const { return static_cast<uint32_t>((w0 >> 8) & kMaxMsgSizeField); }
  uint16_t dest_session_num() const { return static_cast<uint16_t>(w0 >> 32); }
  uint16_t pkt_num() const { return static_cast<uint16_t>((w0 >> 48) & kMaxPktNum); }
  PktType pkt_type() const { return static_cast<PktType>(w0 >> 62); }
  uint64_t req_num() const { return w1 & kReqNumMask; }
  uint8_t magic() const { return static_cast<uint8_t>((w1 >> 44) & 0xF); }
  bool bulk() const { return ((w1 >> 48) & 1) != 0; }
  // A kExplCr with this bit tells the client that the server dropped the
  // part it held of request req_num (to make room for others) and expects
  // it again from packet 0 (rpc/pkt_loss.cc). Peers that predate it ignore
  // the bit and read an acknowledgement of packet 0, which they had.
  bool restart() const { return ((w1 >> 53) & 1) != 0; }
  RespStatus status() const { return static_cast<RespStatus>((w1 >> 49) & 0xF); }
  bool magic_ok() const { return magic() == kPktMagic; }
  // Status kOk, neither bulk nor a restart notice: every packet of a
  // plain request or response (one test of the six bits 48-53).
  bool plain() const { return ((w1 >> 48) & 0x3F) == 0; }

  // Wire I/O. x86-64 and AArch64 Linux are little-endian; the static_assert
  // below makes a big-endian port fail to build instead of misbehave.
  void store(uint8_t* out) const {
    std::memcpy(out, &w0, 8);
    std::memcpy(out + 8, &w1, 8);
  }
  static PktHdr make_restart(uint8_t req_type, uint16_t dest_session, uint64_t req_num) {
    PktHdr h = make(PktType::kExplCr, req_type, 0, dest_session, 0, req_num);
    h.w1 |= uint64_t{1} << 53;
    return h;
  }
  static PktHdr load(const uint8_t* in) {
    PktHdr h;
    std::memcpy(&h.w0, in, 8);
    std::memcpy(&h.w1, in + 8, 8);
    return h;
  }
};

static_assert(sizeof(PktHdr) == kPktHeaderBytes, "the packet header is 16 bytes");
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

// Largest message: limited by the msg_size field and by pkt_num.
inline constexpr size_t max_msg_size_for(size_t data_per_pkt) {
  const size_t by_pkts = (kMaxPktNum + 1) * data_per_pkt;
  return by_pkts < kMaxMsgSizeField ? by_pkts : kMaxMsgSizeField;
}

}  // namespace rpc::detail
