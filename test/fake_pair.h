// The fixture of the engine tests over `fake` that need a client and a
// server Rpc in one thread (test_lifecycle.cc, test_bulk_security.cc): a
// connected Pair, a Call that counts its continuation's runs, and the
// handlers they use.
#pragma once

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "manual_clock.h"
#include "rpc/impl_access.h"
#include "rpc/rpc_impl.h"
#include "rpc_impl_test_access.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"

namespace rpc::test {

using namespace rpc::detail;
using namespace std::chrono_literals;

constexpr ReqType kThrow = 10;           // throws before responding
constexpr ReqType kThrowBg = 11;         // the same on a background thread
constexpr ReqType kDeferForever = 12;    // keeps the handle, never responds
constexpr ReqType kRespondTwice = 13;    // API misuse
constexpr ReqType kRespondTwiceBg = 14;  // API misuse on a background thread
constexpr ReqType kLargeResp = 15;       // answers 20 KiB
constexpr ReqType kAppErr = 16;          // answers the application error 0xC0DE0000 + request size
constexpr ReqType kAppErrBg = 17;        // the same from a background thread

inline ReqHandle* g_deferred = nullptr;  // the last kDeferForever handle

inline void register_handlers(Nexus& nexus) {
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  REQUIRE(nexus.register_handler(kThrow, [](ReqHandle&) { throw std::runtime_error("boom"); }));
  REQUIRE(nexus.register_handler(
      kThrowBg, [](ReqHandle&) { throw std::runtime_error("bg boom"); }, HandlerMode::kBackground));
  REQUIRE(nexus.register_handler(kDeferForever, [](ReqHandle& h) { g_deferred = &h; }));
  REQUIRE(nexus.register_handler(kRespondTwice, [](ReqHandle& h) {
    h.pre_resp_buffer().resize(0);
    h.rpc().enqueue_response(h, h.pre_resp_buffer());
    h.rpc().enqueue_response(h, h.pre_resp_buffer());
  }));
  REQUIRE(nexus.register_handler(
      kRespondTwiceBg,
      [](ReqHandle& h) {
        h.pre_resp_buffer().resize(0);
        h.rpc().enqueue_response(h, h.pre_resp_buffer());
        h.rpc().enqueue_response(h, h.pre_resp_buffer());
      },
      HandlerMode::kBackground));
  for (const auto& [type, mode] :
       {std::pair{kAppErr, HandlerMode::kForeground}, {kAppErrBg, HandlerMode::kBackground}}) {
    REQUIRE(nexus.register_handler(
        type,
        [](ReqHandle& h) {
          h.rpc().enqueue_error_response(h, 0xC0DE0000 + static_cast<uint32_t>(h.request().size()));
        },
        mode));
  }
  REQUIRE(nexus.register_handler(kLargeResp, [](ReqHandle& h) {
    MsgBuffer resp = h.rpc().alloc_msg_buffer(20000);
    fill_pattern(resp, 5);
    h.rpc().enqueue_response(h, resp);
  }));
}

using Event = std::tuple<SessionNum, SessionEvent, SmErr>;

// A client and a server Rpc over `fake` in one thread, on one Nexus.
struct Pair {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  std::unique_ptr<Rpc> server;
  std::unique_ptr<Rpc> client;
  SessionNum sn = kInvalidSessionNum;
  std::vector<Event> client_events;

  explicit Pair(RpcConfig sc = {}, RpcConfig cc = {}, bool connect = true) {
    FakeNetwork::instance().reset();
    g_deferred = nullptr;
    register_handlers(nexus);
    sc.rpc_id = 1;
    sc.transport = "fake";
    if (sc.mtu_bytes == 1500) sc.mtu_bytes = 256;
    server = std::make_unique<Rpc>(nexus, sc);
    cc.rpc_id = 0;
    cc.transport = "fake";
    if (cc.mtu_bytes == 1500) cc.mtu_bytes = 256;
    cc.session_callback = [this](SessionNum s, SessionEvent e, SmErr r) {
      client_events.emplace_back(s, e, r);
    };
    client = std::make_unique<Rpc>(nexus, cc);
    auto s = client->create_session(nexus.uri(), 1);
    REQUIRE(s);
    sn = *s;
    if (connect) REQUIRE(pump_until([&] { return client->is_connected(sn); }));
  }
  ~Pair() {
    client.reset();
    server.reset();
    FakeNetwork::instance().reset();
  }
  void pump() {
    if (client) client->run_event_loop_once();
    if (server) server->run_event_loop_once();
  }
  bool pump_until(const std::function<bool()>& done, std::chrono::seconds limit = 20s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump();
    }
    return true;
  }
  void pump_for(std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) pump();
  }
  // Both Rpcs read the manual clock (manual_clock.h) from here on.
  void use_manual_clock() {
    test::use_manual_clock(impl_of(*server));
    test::use_manual_clock(impl_of(*client), /*start_now=*/false);
  }
  // Moves the manual clock on by d and runs both loops a few times: the
  // first pass sees the jump, and the loss scan waits one pass after a loop
  // that was away (ev_loop.cc), so the later passes scan.
  void advance(std::chrono::microseconds d) {
    advance_manual_clock(d);
    for (int i = 0; i < 4; i++) pump();
  }
  Session& server_session() {
    Session* s = RpcImplTestAccess::session(impl_of(*server), 0);
    REQUIRE(s != nullptr);
    return *s;
  }
};

// One request with its own buffers; counts its continuation's runs.
struct Call {
  MsgBuffer req;
  MsgBuffer resp;
  int runs = 0;
  Errc errc = Errc::kOk;
  size_t resp_size = 0;

  Call(Rpc& rpc, size_t req_size, size_t resp_max = 0) {
    req = rpc.alloc_msg_buffer(req_size);
    resp = rpc.alloc_msg_buffer(resp_max == 0 ? req_size : resp_max);
    REQUIRE(req.valid());
    REQUIRE(resp.valid());
    fill_pattern(req, req_size);
  }
  static void done(Rpc&, const Completion& c) {
    auto* self = static_cast<Call*>(c.tag);
    self->runs++;
    self->errc = c.errc;
    self->resp_size = c.resp_size;
  }
  Errc enqueue(Rpc& rpc, SessionNum sn, ReqType type) {
    return rpc.enqueue_request(sn, type, req, resp, done, this);
  }
  void release(Rpc& rpc) {
    rpc.free_msg_buffer(req);
    rpc.free_msg_buffer(resp);
  }
};

// Moves the pair's manual clock on in 1 ms steps until `call` (an echo of
// `size` bytes) completes, for at most `limit_ms`; then requires that it
// completed once, with kOk and the echoed pattern intact.
inline void require_echo_completes(Pair& p, Call& call, size_t size, int limit_ms = 4000) {
  for (int i = 0; i < limit_ms && call.runs == 0; i++) p.advance(std::chrono::milliseconds(1));
  REQUIRE(call.runs == 1);
  CHECK(call.errc == Errc::kOk);
  CHECK(check_pattern(call.resp, size, size));
}

}  // namespace rpc::test
