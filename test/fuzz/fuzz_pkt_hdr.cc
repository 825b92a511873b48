// libFuzzer target: the 16-byte datapath packet header (src/wire/pkt_hdr.h)
// and the engine's receive-side header validation (RpcImpl::header_sane),
// which every packet passes before its fields are used as sizes and offsets.
//
// Input: [selector u8][16 header bytes][data_len u16 LE][make() args ...]
// The selector picks one of three engines (different data-per-packet and
// bulk capability); missing bytes read as zero.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>

#include "fuzz_util.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

constexpr uint64_t kMagicMask = uint64_t{0xF} << 44;
constexpr uint64_t kReservedMask = ~((uint64_t{1} << 53) - 1);

// Engines whose header_sane is exercised. Pure with respect to the header:
// it reads only the transport's capabilities.
struct Engines {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0", .num_bg_threads = 0}};
  std::array<std::unique_ptr<Rpc>, 3> rpcs;
  Engines() {
    // Smallest fake MTU (64 data bytes per packet, so max_msg_size is
    // bounded by pkt_num), a mid-size fake one, and udp (no bulk path).
    rpcs[0] = std::make_unique<Rpc>(
        nexus, RpcConfig{.rpc_id = 0, .transport = "fake", .mtu_bytes = kPktHeaderBytes + 64});
    rpcs[1] = std::make_unique<Rpc>(nexus,
                                    RpcConfig{.rpc_id = 1, .transport = "fake", .mtu_bytes = 1040});
    rpcs[2] =
        std::make_unique<Rpc>(nexus, RpcConfig{.rpc_id = 2, .transport = "udp", .mtu_bytes = 1500});
  }
};

// Independent statement of what a receiver may accept: the reference the
// engine's check is compared against.
bool reference_sane(const PktHdr& h, size_t data_len, size_t dpp, size_t max_msg, bool bulk_cap) {
  if (static_cast<uint8_t>(h.status()) > 4) return false;  // statuses 5..15 do not exist
  // A restart notice (docs/wire_format.md): a credit return that names no
  // packet, size or status, and carries nothing.
  if (((h.w1 >> 53) & 1) != 0) {
    return h.pkt_type() == PktType::kExplCr && h.status() == RespStatus::kOk && !h.bulk() &&
           h.pkt_num() == 0 && h.msg_size() == 0 && data_len == 0;
  }
  // An application error: one response packet holding exactly its 4-byte code.
  if (h.status() == RespStatus::kAppError) {
    return h.pkt_type() == PktType::kResp && !h.bulk() && h.pkt_num() == 0 && h.msg_size() == 4 &&
           data_len == 4;
  }
  // A dropped response's notice: one header-only response packet 0.
  if (h.status() == RespStatus::kResponseDropped) {
    return h.pkt_type() == PktType::kResp && !h.bulk() && h.pkt_num() == 0 && h.msg_size() == 0 &&
           data_len == 0;
  }
  switch (h.pkt_type()) {
    case PktType::kRfr:
    case PktType::kExplCr:
      return data_len == 0;
    case PktType::kReq:
    case PktType::kResp:
      break;
  }
  if (h.bulk()) return bulk_cap && h.pkt_num() == 0 && data_len == kBulkCtrlBytes;
  const size_t msg_size = h.msg_size();
  if (msg_size > max_msg) return false;
  const size_t num_pkts = msg_size == 0 ? 1 : (msg_size + dpp - 1) / dpp;
  if (h.pkt_num() >= num_pkts) return false;
  const size_t offset = size_t{h.pkt_num()} * dpp;
  return data_len == std::min(dpp, msg_size - offset);
}

uint64_t read_le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

void check_round_trip(const uint8_t* bytes) {
  const PktHdr h = PktHdr::load(bytes);
  // store(load(x)) is the identity on 16 bytes.
  std::array<uint8_t, kPktHeaderBytes> out{};
  h.store(out.data());
  FUZZ_CHECK(std::memcmp(out.data(), bytes, kPktHeaderBytes) == 0);
  // Accessors stay within their field widths.
  FUZZ_CHECK(h.msg_size() <= kMaxMsgSizeField);
  FUZZ_CHECK(h.pkt_num() <= kMaxPktNum);
  FUZZ_CHECK(h.req_num() <= kReqNumMask);
  FUZZ_CHECK(h.magic() <= 0xF);
  FUZZ_CHECK(static_cast<uint8_t>(h.status()) <= 0xF);
  FUZZ_CHECK(static_cast<uint8_t>(h.pkt_type()) <= 3);
  FUZZ_CHECK(h.magic_ok() == (h.magic() == kPktMagic));
  // make() from the decoded fields rebuilds the header, except that it
  // always writes the right magic and zero reserved bits.
  const PktHdr m = PktHdr::make(h.pkt_type(), h.req_type(), h.msg_size(), h.dest_session_num(),
                                h.pkt_num(), h.req_num(), h.bulk(), h.status());
  FUZZ_CHECK(m.w0 == h.w0);
  FUZZ_CHECK((m.w1 & ~(kMagicMask | kReservedMask)) == (h.w1 & ~(kMagicMask | kReservedMask)));
  FUZZ_CHECK(m.magic_ok());
  FUZZ_CHECK((m.w1 & kReservedMask) == 0);
  const bool canonical = h.magic_ok() && (h.w1 & kReservedMask) == 0;
  FUZZ_CHECK(canonical == (m.w1 == h.w1));
}

// make() with out-of-range arguments masks each to its field and never
// spills into a neighbour.
void check_make(const uint8_t* a) {
  const auto type = static_cast<PktType>(a[0] & 3);
  const uint8_t req_type = a[1];
  const auto msg_size = static_cast<uint32_t>(read_le(a + 2, 4));
  const auto session = static_cast<uint16_t>(read_le(a + 6, 2));
  const auto pkt_num = static_cast<uint16_t>(read_le(a + 8, 2));
  const uint64_t req_num = read_le(a + 10, 8);
  const bool bulk = (a[18] & 1) != 0;
  const auto status = static_cast<RespStatus>(a[19] & 0xF);
  const PktHdr h = PktHdr::make(type, req_type, msg_size, session, pkt_num, req_num, bulk, status);
  FUZZ_CHECK(h.pkt_type() == type);
  FUZZ_CHECK(h.req_type() == req_type);
  FUZZ_CHECK(h.msg_size() == (msg_size & kMaxMsgSizeField));
  FUZZ_CHECK(h.dest_session_num() == session);
  FUZZ_CHECK(h.pkt_num() == (pkt_num & kMaxPktNum));
  FUZZ_CHECK(h.req_num() == (req_num & kReqNumMask));
  FUZZ_CHECK(h.bulk() == bulk);
  FUZZ_CHECK(h.status() == status);
  FUZZ_CHECK(h.magic_ok());
  FUZZ_CHECK((h.w1 & kReservedMask) == 0);
  std::array<uint8_t, kPktHeaderBytes> bytes{};
  h.store(bytes.data());
  const PktHdr back = PktHdr::load(bytes.data());
  FUZZ_CHECK(back.w0 == h.w0 && back.w1 == h.w1);
}

void check_engine(Rpc& rpc, const PktHdr& h, size_t data_len) {
  RpcImpl& impl = impl_of(rpc);
  const size_t dpp = impl.max_data_per_pkt();
  const size_t max_msg = impl.max_msg_size();
  const bool bulk_cap = impl.transport().caps().bulk;
  const bool sane = RpcImplTestAccess::header_sane(impl, h, data_len);
  FUZZ_CHECK(sane == reference_sane(h, data_len, dpp, max_msg, bulk_cap));
  if (!sane) return;
  // What the receive path relies on when it copies packet data.
  if (h.pkt_type() == PktType::kReq || h.pkt_type() == PktType::kResp) {
    if (h.bulk()) {
      FUZZ_CHECK(data_len == kBulkCtrlBytes);
    } else {
      FUZZ_CHECK(h.msg_size() <= max_msg);
      FUZZ_CHECK(size_t{h.pkt_num()} * dpp + data_len <= h.msg_size());
      FUZZ_CHECK(data_len <= dpp);
    }
  } else {
    FUZZ_CHECK(data_len == 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Engines* engines = new Engines();  // never destroyed: outlives every input
  std::array<uint8_t, 1 + kPktHeaderBytes + 2 + 20> in{};
  std::memcpy(in.data(), data, std::min(size, in.size()));
  const uint8_t* hdr_bytes = in.data() + 1;
  const size_t data_len = read_le(in.data() + 1 + kPktHeaderBytes, 2);

  check_round_trip(hdr_bytes);
  check_make(in.data() + 1 + kPktHeaderBytes + 2);
  const PktHdr h = PktHdr::load(hdr_bytes);
  check_engine(*engines->rpcs[in[0] % engines->rpcs.size()], h, data_len);
  return 0;
}
