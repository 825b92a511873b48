// What a connected but hostile client can make a server hold, over udp on
// loopback: the server's receive budget (requests in reassembly and cached
// responses), its sessions, and each remote host's share of both. The
// attacker completes the handshake (as a real Rpc, or forging everything
// from a plain socket) and then misbehaves; a client on another host
// (127.0.0.2) must still be served while it does (docs/reliability.md,
// "Budgets").
#include <atomic>
#include <catch2/catch.hpp>
#include <memory>
#include <thread>
#include <vector>

#include "hostile_udp.h"
#include "test_util.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace rpc::test::hostile;
using namespace std::chrono_literals;

namespace {

// Answers with as many bytes as the request's first four name (a GET of a
// large value): a small request, a large response to cache.
constexpr ReqType kAmplify = 40;
void amplify(ReqHandle& h) {
  const MsgBuffer& req = h.request();
  uint32_t size = 0;
  if (req.size() >= 4) std::memcpy(&size, req.data(), 4);
  MsgBuffer resp = h.rpc().alloc_msg_buffer(size);
  if (!resp.valid()) {  // over max_msg_buffer_bytes: an empty answer
    MsgBuffer& pre = h.pre_resp_buffer();
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  std::memset(resp.data(), 0xA5, size);
  h.rpc().enqueue_response(h, resp);
}

NexusConfig nexus_at(const char* ip) { return NexusConfig{.uri = std::string(ip) + ":0"}; }

// The server's own view, published from its thread each iteration: the
// most it held of its receive budget, and of registered message memory.
struct Watermarks {
  std::atomic<uint64_t> budget_bytes{0};
  std::atomic<uint64_t> msg_buffer_bytes{0};
  std::atomic<uint64_t> responses_dropped{0};
  std::atomic<uint64_t> refused_host_share{0};
  ServerHooks hooks() {
    return ServerHooks{.on_iteration = [this](Rpc& rpc) {
      const RpcStats& s = rpc.stats();
      if (s.rx_budget_bytes > budget_bytes) budget_bytes = s.rx_budget_bytes;
      if (s.msg_buffer_bytes > msg_buffer_bytes) msg_buffer_bytes = s.msg_buffer_bytes;
      responses_dropped = s.responses_dropped;
      refused_host_share = s.sessions_refused_host_share;
    }};
  }
};

// One call of kAmplify with its own buffers.
struct AmplifyCall {
  MsgBuffer req, resp;
  int completions = 0;
  Errc errc = Errc::kOk;
  size_t resp_size = 0;
  bool prepare(Rpc& rpc, uint32_t resp_bytes) {
    req = rpc.alloc_msg_buffer(16);
    resp = rpc.alloc_msg_buffer(resp_bytes);
    if (!req.valid() || !resp.valid()) return false;
    std::memcpy(req.data(), &resp_bytes, 4);
    return true;
  }
  Errc enqueue(Rpc& rpc, SessionNum sn) {
    return rpc.enqueue_request(sn, kAmplify, req, resp, &AmplifyCall::on_done, this);
  }
  static void on_done(Rpc&, const Completion& c) {
    auto* call = static_cast<AmplifyCall*>(c.tag);
    call->completions++;
    call->errc = c.errc;
    call->resp_size = c.resp_size;
  }
};

// A client on 127.0.0.2 that must be served while the attack runs: a
// chain of echo requests of a few sizes, each checked byte for byte.
struct HonestClient {
  Nexus nexus{nexus_at("127.0.0.2")};
  // Calls that did not complete in time: their buffers stay with the
  // request until ~Rpc runs its continuation (declared before rpc, so they
  // outlive it; their memory goes with the Rpc's allocator).
  std::vector<std::unique_ptr<EchoCall>> unfinished;
  Rpc rpc{nexus, RpcConfig{.rpc_id = 0}};
  SessionNum sn = kInvalidSessionNum;
  bool connect(const std::string& server_uri) {
    auto s = rpc.connect(server_uri, 1, 5s);
    if (!s) return false;
    sn = *s;
    return true;
  }
  // `n` echoes one after another; how many came back intact.
  size_t echo(size_t n) {
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
      auto call = std::make_unique<EchoCall>();
      const size_t size = std::array<size_t, 3>{32, 3000, 100'000}[i % 3];
      if (!call->prepare(rpc, size, 77 + i)) break;
      if (call->enqueue(rpc, sn, kEcho) != Errc::kOk) {
        call->release(rpc);
        break;
      }
      const bool done = run_until(
          rpc, [&] { return call->completions > 0; }, 10s);
      if (!done) {  // still outstanding: its buffers must outlive it
        unfinished.push_back(std::move(call));
        break;
      }
      ok += call->echoed() ? 1 : 0;
      call->release(rpc);
    }
    return ok;
  }
};

}  // namespace

TEST_CASE("a client that leaves large responses cached holds at most its host's share",
          "[budgets]") {
  // Given a server with a 16 MiB receive budget (8 MiB per host)
  Nexus server_nexus(nexus_at("127.0.0.1"));
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  REQUIRE(server_nexus.register_handler(kAmplify, amplify));
  Watermarks marks;
  constexpr size_t kRpcBudget = size_t{16} << 20;
  ServerThread server(server_nexus, RpcConfig{.rpc_id = 1, .rx_budget_per_rpc_bytes = kRpcBudget},
                      marks.hooks());

  // When a client opens 8 sessions and asks, on all 8 slots of each, for a
  // 1 MiB response to a 16-byte request, and then sends nothing more on
  // them (64 MiB of responses it never acknowledges)
  Nexus attacker_nexus(nexus_at("127.0.0.1"));
  constexpr uint32_t kRespBytes = 1 << 20;
  constexpr size_t kCalls = 64;
  std::atomic<bool> stop{false}, ready{false};
  std::atomic<size_t> ok{0}, dropped{0}, twice{0};
  // (the attacker's Rpc runs on a thread of its own, retransmitting what
  // the server refuses, for as long as the test runs)
  std::thread attack([&] {
    // (the calls outlive the Rpc, whose end fails what is still queued)
    std::vector<std::unique_ptr<AmplifyCall>> calls;
    auto attacker = std::make_unique<Rpc>(attacker_nexus, RpcConfig{.rpc_id = 0});
    for (int s = 0; s < 8; s++) {
      auto sn = attacker->connect(server_nexus.uri(), 1, 5s);
      if (!sn) break;
      for (int i = 0; i < 8; i++) {
        calls.push_back(std::make_unique<AmplifyCall>());
        if (!calls.back()->prepare(*attacker, kRespBytes) ||
            calls.back()->enqueue(*attacker, *sn) != Errc::kOk) {
          calls.pop_back();
        }
      }
    }
    ready = true;
    while (!stop) attacker->run_event_loop(std::chrono::microseconds(1000));
    for (auto& c : calls) {
      if (c->completions == 1 && c->errc == Errc::kOk) ok++;
      if (c->completions == 1 && c->errc == Errc::kResponseDropped) dropped++;
    }
    attacker.reset();
    for (auto& c : calls) {
      if (c->completions != 1) twice++;  // the rest failed once as the Rpc ended
    }
    if (calls.size() != kCalls) twice = 1000;  // could not start them all
  });
  REQUIRE(wait_until([&] { return ready.load(); }, 10s));
  std::this_thread::sleep_for(300ms);

  // Expect a client on another host served throughout
  HonestClient honest;
  REQUIRE(honest.connect(server_nexus.uri()));
  CHECK(honest.echo(30) == 30);
  std::this_thread::sleep_for(1500ms);  // past the settle time: dropped ones let more in
  CHECK(honest.echo(30) == 30);
  stop = true;
  attack.join();

  // and the server never holding more than its budget and one response
  // over for each host (a response is charged once its handler answered,
  // and a request is taken while its host and the Rpc are under budget);
  // in registered memory, at most twice that (a 1 MiB buffer and its
  // packet headers take a 2 MiB chunk of the allocator) and the buffers
  // every Rpc has. Before, the attacker alone made it hold 64 MiB of
  // responses, 128 MiB of chunks.
  const size_t host_share = kRpcBudget / 2;
  CAPTURE(marks.budget_bytes.load(), marks.msg_buffer_bytes.load());
  CHECK(marks.budget_bytes <= kRpcBudget + 2 * kRespBytes);
  CHECK(marks.msg_buffer_bytes <= 2 * (kRpcBudget + 2 * kRespBytes) + (size_t{4} << 20));
  // The attacker got some answers, each once: up to its share at a time,
  // more as cached ones settled and were dropped for the refused ones
  CAPTURE(ok.load(), dropped.load(), marks.responses_dropped.load());
  CHECK(twice == 0);  // every continuation ran exactly once
  CHECK(ok >= host_share / kRespBytes - 1);
  CHECK(marks.responses_dropped > 0);
}

namespace {

// A hostile client made of one plain socket: it opens sessions by forging
// the connect requests a Nexus would send, keeps them alive with
// heartbeats, and sends whatever datapath packets it likes from the
// address its sessions were opened with.
class RawClient {
 public:
  RawClient(uint16_t server_sm_port) : sm_port_(server_sm_port) {}
  // Opens a session; its server-side number, or nothing if refused.
  std::optional<SessionNum> open(SmErr* refusal = nullptr) {
    const uint64_t token = next_token_++;
    const auto client_sn = static_cast<SessionNum>(token);
    sock_.send(sm_port_, sm_bytes(connect_req(token, sock_.port(), client_sn, kIncarnation)));
    std::vector<uint8_t> rx(2048);
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (std::chrono::steady_clock::now() < deadline) {
      const ssize_t n = sock_.recv(rx.data(), rx.size(), 10ms);
      SmMsg m;
      if (n <= 0 || decode_sm_msg({rx.data(), static_cast<size_t>(n)}, m) != SmDecodeStatus::kOk ||
          m.type != SmMsgType::kConnectResp || m.token != token) {
        continue;
      }
      if (refusal != nullptr) *refusal = m.err;
      if (m.err != SmErr::kNone) return std::nullopt;
      server_port_ = udp_port_of(m.routing);
      return m.server_session_num;
    }
    return std::nullopt;
  }
  // Heartbeats (the server's Nexus resets the sessions of a silent remote),
  // and anything the server sent read and thrown away.
  void keep_alive() {
    if (std::chrono::steady_clock::now() >= next_heartbeat_) {
      SmMsg hb = connect_req(0, sock_.port(), 0, kIncarnation);
      hb.type = SmMsgType::kHeartbeat;
      sock_.send(sm_port_, sm_bytes(hb));
      next_heartbeat_ = std::chrono::steady_clock::now() + 50ms;
    }
    std::vector<uint8_t> rx(2048);
    while (sock_.recv(rx.data(), rx.size(), 0ms) >= 0) {
    }
  }
  void send_req_pkt(SessionNum server_sn, uint32_t msg_size, uint16_t pkt_num, uint64_t req_num) {
    const size_t dpp = kUdpDefaultDataPerPkt;
    const size_t num_pkts = (msg_size + dpp - 1) / dpp;
    const size_t len = pkt_num + 1u < num_pkts ? dpp : msg_size - pkt_num * dpp;
    sock_.send(server_port_,
               pkt(PktHdr::make(PktType::kReq, kEcho, msg_size, server_sn, pkt_num, req_num), len));
  }
  // The first request number of a slot: what the server derives from the
  // connect's token (session.h, first_req_num).
  uint64_t first_req_num_of(uint64_t token) const { return first_req_num(token); }
  uint64_t last_token() const { return next_token_ - 1; }

 private:
  static constexpr uint64_t kIncarnation = 0xBAD5EED;
  static uint16_t udp_port_of(const RoutingInfo& r) {
    UdpRoutingInfo u;
    std::memcpy(&u, r.bytes.data(), sizeof(u));
    return ntohs(u.port_be);
  }
  UdpSock sock_;
  uint16_t sm_port_;
  uint16_t server_port_ = 0;
  uint64_t next_token_ = 0x5000'0000'0000;
  std::chrono::steady_clock::time_point next_heartbeat_{};
};

}  // namespace

TEST_CASE("a client trickling huge requests cannot squat on the budget of other hosts",
          "[budgets]") {
  // Given a server at the default budgets (64 MiB per Rpc, 32 MiB per host)
  Nexus server_nexus(nexus_at("127.0.0.1"));
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  Watermarks marks;
  ServerThread server(server_nexus, RpcConfig{.rpc_id = 1}, marks.hooks());

  // When a hostile client on 127.0.0.1 opens two sessions and starts a
  // 16 MiB request on two slots of each, then trickles one packet per slot
  // every 0.4 s (the attack: 64 MiB asked for, 15 kB/s sent)
  RawClient raw(port_of_uri(server_nexus.uri()));
  struct Trickle {
    SessionNum sn;
    uint64_t req_num;
    uint16_t next_pkt = 0;
  };
  std::vector<Trickle> trickles;
  for (int s = 0; s < 2; s++) {
    auto sn = raw.open();
    REQUIRE(sn);
    const uint64_t first = raw.first_req_num_of(raw.last_token());
    for (uint64_t slot = 0; slot < 2; slot++) trickles.push_back({*sn, first + slot});
  }
  constexpr uint32_t kHuge = (1u << 24) - 1;
  std::atomic<bool> stop{false};
  std::thread attack([&] {
    auto next_round = std::chrono::steady_clock::now();
    while (!stop) {
      raw.keep_alive();
      if (std::chrono::steady_clock::now() >= next_round) {
        for (Trickle& t : trickles) raw.send_req_pkt(t.sn, kHuge, t.next_pkt++, t.req_num);
        next_round += 400ms;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  std::this_thread::sleep_for(200ms);  // every slot has its packet 0 in

  // Expect a client on another host served at once, however long the
  // trickle goes on (before, the trickle held 67,108,860 of the 67,108,864
  // bytes and a 3,000-byte request waited about 1,050 s)
  HonestClient honest;
  REQUIRE(honest.connect(server_nexus.uri()));
  CHECK(honest.echo(9) == 9);
  std::this_thread::sleep_for(1500ms);  // the trickle is behind 16 KB/s now
  CHECK(honest.echo(9) == 9);
  stop = true;
  attack.join();
  // and the trickler's host never held more than its share (and the
  // honest client its requests)
  CAPTURE(marks.budget_bytes.load());
  CHECK(marks.budget_bytes <= (size_t{32} << 20) + 200'000);
}

TEST_CASE("one host cannot take every session of a server", "[budgets]") {
  // Given a server of 32 sessions (16 per host, by default)
  Nexus server_nexus(nexus_at("127.0.0.1"));
  REQUIRE(server_nexus.register_handler(kEcho, echo_into_response));
  Watermarks marks;
  ServerThread server(server_nexus, RpcConfig{.rpc_id = 1, .max_sessions = 32}, marks.hooks());
  // When one socket on 127.0.0.1 asks for 40 sessions
  RawClient raw(port_of_uri(server_nexus.uri()));
  size_t accepted = 0, refused_too_many = 0;
  for (int i = 0; i < 40; i++) {
    SmErr why = SmErr::kNone;
    if (raw.open(&why)) {
      accepted++;
    } else if (why == SmErr::kTooManySessions) {
      refused_too_many++;
    }
    raw.keep_alive();
  }
  // Expect it to get its share and no more, and a client on another host
  // to connect and be served
  CHECK(accepted == 16);
  CHECK(refused_too_many == 24);
  HonestClient honest;
  REQUIRE(honest.connect(server_nexus.uri()));
  CHECK(honest.echo(3) == 3);
  CHECK(wait_until([&] { return marks.refused_host_share == 24; }, 2s));
}
