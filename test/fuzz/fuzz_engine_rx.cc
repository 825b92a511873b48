// libFuzzer target: the engine's receive path under hostile datagrams.
//
// One client and one server Rpc over the in-process `fake` transport, set
// up once, with two sessions between them:
//   A, the checked session: after every input a legitimate echo on it must
//     complete with the right bytes, and its credit accounting must be back
//     to full. This catches state corruption that outlives the input.
//   B, the sacrificial session: forged packets may do anything to its
//     protocol state (the protocol has no authentication, so a peer that
//     knows the live request numbers can always confuse its own session).
//     Its requests may fail or never finish; it is torn down and
//     reconnected when stuck. It must never break A, crash, or corrupt
//     memory, and each of its requests must complete at most once.
//
// Each input is split into datagrams, sent to the server's or the client's
// endpoint either from an intruder endpoint (dropped by the source check)
// or forged with the legitimate peer's endpoint (so they reach the protocol
// logic), and the event loops are pumped.
//
// Input: [echo_sel u8][b_sel u8] then datagrams [mode u8][len u8][len bytes]...
//   mode bit 0: to the client (else to the server)
//   mode bit 1: forged with the peer's endpoint (else from the intruder)
//   mode bit 2: set the magic nibble right
//   mode bit 3: set dest_session_num to session A or (bit 4) B
//   mode bit 4 alone: set dest_session_num to B and req_num to the live
//               request number of B's slot (req_num % window): the active
//               request's, or the next one (a slot not made yet: its first)
//   mode bit 5: make msg_size / pkt_num / data length consistent (and, for a
//               bulk control packet, optionally aim it at a registered buffer)
//   mode bits 6-7: event-loop iterations to run after this datagram
//
// Forged packets for session A are kept to request numbers the peer is not
// about to use: the one thing no receiver can tell from the real peer is a
// packet with the next request number, and that is out of scope.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "fuzz_util.h"
#include "memory/allocator.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;

namespace {

constexpr size_t kMtu = 128;  // 112 data bytes per packet: multi-packet messages stay short
constexpr size_t kBulkThreshold = 3800;  // 34 packets: above the session's credits
constexpr uint64_t kRtoUs = 1000;
constexpr int kMaxStuckInputs = 32;  // inputs a request of B may stay outstanding
constexpr auto kDeadline = std::chrono::seconds(5);
constexpr uint64_t kMagicMask = uint64_t{0xF} << 44;
constexpr uint64_t kReservedMask = ~((uint64_t{1} << 53) - 1);
constexpr size_t kMaxFixedMsg = 40 * (kMtu - kPktHeaderBytes);

// Message sizes the inputs choose from: empty, one packet, around the
// packet boundary, several packets, more packets than credits, bulk.
const std::array<size_t, 10> kSizes = {0,   1, 16, 111, 112, 113, 341, 3700, kBulkThreshold + 1,
                                       6000};

uint32_t endpoint_of(Rpc& rpc) {
  return static_cast<FakeTransport&>(impl_of(rpc).transport()).endpoint();
}

struct World {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0",
                          .num_bg_threads = 0,
                          // No spurious resets if an input runs long.
                          .heartbeat_interval_ms = 100,
                          .failure_timeout_ms = 600000}};
  std::unique_ptr<Rpc> server;
  std::unique_ptr<Rpc> client;
  std::unique_ptr<FakeTransport> intruder;
  SessionNum a = kInvalidSessionNum;  // client-side numbers
  SessionNum b = kInvalidSessionNum;
  uint32_t server_ep = 0, client_ep = 0, intruder_ep = 0;
  MsgBuffer bait;  // a client buffer, exposed for reads, that forged bulk packets may point at
  Exposure bait_exposure;
  EchoCall* b_call = nullptr;
  int b_stuck = 0;
  std::deque<EchoCall*> retired;  // finished calls of B, checked for double completion
  uint64_t seed = 0;

  World() {
    FUZZ_CHECK(nexus.register_handler(kEcho, echo_into_response));
    const RpcConfig base{.transport = "fake",
                         .mtu_bytes = kMtu,
                         .rx_ring_size = 512,
                         .rto_us = kRtoUs,
                         .bulk_threshold_bytes = kBulkThreshold};
    RpcConfig sc = base;
    sc.rpc_id = 1;
    server = std::make_unique<Rpc>(nexus, sc);
    RpcConfig cc = base;
    cc.rpc_id = 0;
    client = std::make_unique<Rpc>(nexus, cc);
    intruder = std::make_unique<FakeTransport>(RpcConfig{.transport = "fake", .mtu_bytes = kMtu});
    server_ep = endpoint_of(*server);
    client_ep = endpoint_of(*client);
    intruder_ep = intruder->endpoint();
    a = connect();
    b = connect();
    bait = client->alloc_msg_buffer(4096);
    FUZZ_CHECK(bait.valid());
    for (size_t i = 0; i < bait.size(); i++) bait.data()[i] = static_cast<uint8_t>(i * 7);
    FUZZ_CHECK(impl_of(*client).transport().expose_for_read(
        detail::RoutingInfo{}, bait.data(), bait.size(), detail::MemReg{}, bait_exposure));
  }

  void pump(int n = 1) {
    for (int i = 0; i < n; i++) {
      client->run_event_loop_once();
      server->run_event_loop_once();
    }
    // Nothing is ever addressed to the intruder; drain it regardless.
    std::array<RxPacket, 32> rx;
    while (size_t got = intruder->rx_burst(rx)) intruder->post_recvs(got);
  }

  bool pump_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + kDeadline;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump();
    }
    return true;
  }

  SessionNum connect() {
    auto sn = client->create_session(nexus.uri(), 1);
    FUZZ_CHECK(sn);
    const SessionNum s = *sn;
    if (!pump_until([&] { return client->is_connected(s); })) fail("a session did not connect");
    return s;
  }

  Session& client_session(SessionNum sn) {
    Session* s = RpcImplTestAccess::session(impl_of(*client), sn);
    FUZZ_CHECK(s != nullptr);
    return *s;
  }
  SessionNum server_num(SessionNum client_sn) { return client_session(client_sn).remote_num; }

  [[noreturn]] void fail(const char* what) {
    const RpcStats& c = client->stats();
    const RpcStats& s = server->stats();
    std::fprintf(stderr,
                 "fuzz_engine_rx: %s\n"
                 "  client: completed %llu retrans %llu drops stale %llu ooo %llu bad_header %llu "
                 "unknown %llu\n"
                 "  server: handlers %llu dup %llu drops stale %llu ooo %llu bad_header %llu "
                 "busy %llu unknown %llu, sessions %zu\n",
                 what, (unsigned long long)c.requests_completed,
                 (unsigned long long)c.retransmissions, (unsigned long long)c.drops.stale,
                 (unsigned long long)c.drops.out_of_order, (unsigned long long)c.drops.bad_header,
                 (unsigned long long)c.drops.unknown_session, (unsigned long long)s.handlers_run,
                 (unsigned long long)s.duplicate_requests, (unsigned long long)s.drops.stale,
                 (unsigned long long)s.drops.out_of_order, (unsigned long long)s.drops.bad_header,
                 (unsigned long long)s.drops.busy, (unsigned long long)s.drops.unknown_session,
                 server->num_active_sessions());
    std::abort();
  }

  // mode bit 5: a data packet whose sizes agree, so it gets past header
  // validation and into the slot logic.
  void make_consistent(PktHdr& h, std::vector<uint8_t>& bytes) {
    const size_t dpp = client->max_data_per_pkt();
    size_t data_len = 0;
    if (h.pkt_type() == PktType::kReq || h.pkt_type() == PktType::kResp) {
      if (h.bulk()) {
        data_len = kBulkCtrlBytes;
        bytes.resize(kPktHeaderBytes + data_len, 0);
        // Odd first data byte: point the control at the bait buffer, with
        // an offset and a length taken from the input (maybe out of bounds).
        if (bytes[kPktHeaderBytes] & 1) {
          BulkCtrl c = BulkCtrl::load(bytes.data() + kPktHeaderBytes);
          c.addr = bait_exposure.remote_addr + (c.addr >> 8) % (bait.size() + 64);
          c.key = bait_exposure.key;
          c.len = c.len % (2 * bait.size());
          c.store(bytes.data() + kPktHeaderBytes);
        }
      } else {
        const size_t msg_size = h.msg_size() % (kMaxFixedMsg + 1);
        const size_t num_pkts = msg_size == 0 ? 1 : (msg_size + dpp - 1) / dpp;
        const size_t pkt_num = h.pkt_num() % num_pkts;
        data_len = pkt_num + 1 < num_pkts ? dpp : msg_size - pkt_num * dpp;
        const PktHdr m = PktHdr::make(h.pkt_type(), h.req_type(), static_cast<uint32_t>(msg_size),
                                      h.dest_session_num(), static_cast<uint16_t>(pkt_num),
                                      h.req_num(), false, h.status());
        // Keep the magic and reserved bits as they came.
        h.w0 = m.w0;
        h.w1 = (m.w1 & ~(kMagicMask | kReservedMask)) | (h.w1 & (kMagicMask | kReservedMask));
      }
    }
    bytes.resize(kPktHeaderBytes + data_len, 0xA5);
  }

  // A forged packet for session A must not carry a request number A's
  // client is using or about to use (see the top of the file).
  void keep_off_live_req_nums(bool to_client, PktHdr& h) {
    const SessionNum a_here = to_client ? a : server_num(a);
    if (h.dest_session_num() != a_here) return;
    const Session& s = client_session(a);
    const uint64_t rn = h.req_num();
    const size_t index = rn % kSessionReqWindow;
    const bool live = s.cslots.has(index)
                          ? rn == s.cslots[index].next_req_num ||
                                (s.cslots[index].active && rn == s.cslots[index].req_num)
                          : rn == unmade_slot_req_num(s, index);
    if (live) h.w1 ^= uint64_t{1} << 43;  // far from anything in use
  }

  // The first request number of client slot `index` once it is made
  // (slots come eight at a time as a session's requests fill them).
  static uint64_t unmade_slot_req_num(const Session& s, size_t index) {
    return (first_req_num(s.sm_token) + index) & kReqNumMask;
  }

  void inject(uint8_t mode, const uint8_t* p, size_t len) {
    const bool to_client = (mode & 1) != 0;
    const bool forged = (mode & 2) != 0;
    std::vector<uint8_t> bytes(p, p + len);
    if (bytes.size() >= kPktHeaderBytes) {
      PktHdr h = PktHdr::load(bytes.data());
      if (mode & 4) h.w1 = (h.w1 & ~kMagicMask) | uint64_t{kPktMagic} << 44;
      if (mode & (8 | 16)) {
        const SessionNum target = (mode & 16) ? b : a;
        const SessionNum sn = to_client ? target : server_num(target);
        h.w0 = (h.w0 & ~(uint64_t{0xFFFF} << 32)) | uint64_t{sn} << 32;
      }
      if ((mode & (8 | 16)) == 16) {
        const Session& s = client_session(b);
        const size_t index = h.req_num() % kSessionReqWindow;
        uint64_t rn = unmade_slot_req_num(s, index);
        if (s.cslots.has(index)) {
          const ClientSlot& slot = s.cslots[index];
          rn = (slot.active ? slot.req_num : slot.next_req_num) & kReqNumMask;
        }
        h.w1 = (h.w1 & ~kReqNumMask) | rn;
      }
      if (mode & 32) make_consistent(h, bytes);
      if (forged) keep_off_live_req_nums(to_client, h);
      h.store(bytes.data());
    }
    FakePacket pkt;
    pkt.src = forged ? (to_client ? server_ep : client_ep) : intruder_ep;
    pkt.dst = to_client ? client_ep : server_ep;
    pkt.bytes = std::move(bytes);
    FakeNetwork::instance().send(std::move(pkt));
  }

  void retire(EchoCall* call) {
    call->release(*client);
    retired.push_back(call);
    if (retired.size() > 64) {
      delete retired.front();
      retired.pop_front();
    }
  }

  void maybe_start_b(uint8_t sel) {
    if (b_call != nullptr || (sel & 1) == 0) return;
    const size_t size = kSizes[(sel >> 1) % kSizes.size()];
    auto* call = new EchoCall();
    FUZZ_CHECK(call->prepare(*client, size, ++seed));
    FUZZ_CHECK(call->enqueue(*client, b, kEcho) == Errc::kOk);
    b_call = call;
    b_stuck = 0;
  }

  // B's request may have finished in any way, exactly once; if it is stuck,
  // tear B down (which fails it) and connect a new B.
  void check_b() {
    for (EchoCall* c : retired) {
      if (c->completions != 1) fail("a request of session B completed more than once");
    }
    if (b_call == nullptr) return;
    if (b_call->completions == 0 && ++b_stuck <= kMaxStuckInputs) return;
    if (b_call->completions == 0) {
      FUZZ_CHECK(client->destroy_session(b));
      if (b_call->completions != 1) fail("destroy_session did not fail B's request");
      const SessionNum old = b;
      if (!pump_until([&] { return client->session_stats(old) == nullptr; })) {
        fail("session B did not disconnect");
      }
      if (!pump_until([&] { return server->num_active_sessions() == 1; })) {
        fail("the server did not free session B");
      }
      b = connect();
    }
    retire(b_call);
    b_call = nullptr;
  }

  // The invariant: session A still works, exactly, after whatever came in.
  void check_a(uint8_t sel) {
    const size_t size = kSizes[sel % kSizes.size()];
    const size_t n = 1 + ((sel >> 5) % 3);  // up to three at once, in different slots
    std::array<EchoCall, 3> calls;
    for (size_t i = 0; i < n; i++) {
      FUZZ_CHECK(calls[i].prepare(*client, size, ++seed));
      FUZZ_CHECK(calls[i].enqueue(*client, a, kEcho) == Errc::kOk);
    }
    const bool done = pump_until([&] {
      return std::all_of(calls.begin(), calls.begin() + n,
                         [](const EchoCall& c) { return c.completions > 0; });
    });
    if (!done) fail("a legitimate request on session A did not complete");
    for (size_t i = 0; i < n; i++) {
      if (!calls[i].echoed()) {
        std::fprintf(stderr, "call %zu: completions %d errc %d resp_size %zu size %zu\n", i,
                     calls[i].completions, static_cast<int>(calls[i].errc), calls[i].resp_size,
                     calls[i].size);
        fail("a legitimate request on session A came back wrong");
      }
      calls[i].release(*client);
    }
    if (!client->is_connected(a)) fail("session A is no longer connected");
    const Session& s = client_session(a);
    if (s.credits != s.max_credits) fail("session A's credits leaked");
    for (const ClientSlot& slot : s.cslots) {
      if (slot.active || slot.in_stall_queue) fail("session A has a slot still busy");
    }
    if (server->num_active_sessions() != 2) fail("the server's session count is off");
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static World* world = new World();  // never destroyed: outlives every input
  World& w = *world;
  const uint8_t echo_sel = size > 0 ? data[0] : 0;
  const uint8_t b_sel = size > 1 ? data[1] : 0;
  w.maybe_start_b(b_sel);
  size_t off = 2;
  while (off + 2 <= size) {
    const uint8_t mode = data[off];
    const size_t len = std::min<size_t>(data[off + 1], size - off - 2);
    off += 2;
    w.inject(mode, data + off, len);
    off += len;
    w.pump(mode >> 6);
  }
  w.pump(4);
  w.check_b();
  w.check_a(echo_sel);
  return 0;
}
