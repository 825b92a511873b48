// Coroutines (librpc/coro.h) and the blocking helpers (librpc/blocking.h,
// Rpc::connect), over `fake` and `udp`: a client, a middle server whose
// handlers are coroutines that call a back-end server, and the back end,
// all on one thread.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "librpc/rpc_all.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"

using namespace rpc;
using namespace rpc::test;
using rpc::detail::FakeNetwork;
using namespace std::chrono_literals;

namespace {

constexpr ReqType kCoEcho = 20;         // coroutine: responds at once
constexpr ReqType kCoNested = 21;       // coroutine: asks the back end, then responds
constexpr ReqType kCoThrow = 22;        // coroutine: throws after a nested call
constexpr ReqType kNeverResponds = 23;  // plain: keeps the handle
constexpr ReqType kCoAppError = 24;     // coroutine: answers the application error 42
constexpr ReqType kLargeResp = 25;      // plain: answers kLargeBytes (sent by one-sided read)
constexpr ReqType kCoNestedLarge =
    26;  // coroutine: asks the back end for kLargeResp, then responds

constexpr size_t kLargeBytes = 20000;  // above the default bulk threshold (16 KiB)

constexpr RpcId kClientId = 0;
constexpr RpcId kMiddleId = 1;
constexpr RpcId kBackendId = 2;

// What the middle Rpc's handlers find in ReqHandle::context().
struct Middle {
  SessionNum backend = kInvalidSessionNum;
  // kCoNestedLarge: how its nested call ended.
  int large_resumed = 0;
  Errc large_errc = Errc::kOk;
};

Task<void> co_echo(ReqHandle& h) {
  const MsgBuffer& req = h.request();
  MsgBuffer& resp = h.pre_resp_buffer();
  std::memcpy(resp.data(), req.data(), req.size());
  resp.resize(req.size());
  h.rpc().enqueue_response(h, resp);
  co_return;
}

// Asks the back end to echo the request, then answers with what came back
// (and reads its own request after the suspension: it must still be there).
Task<void> co_nested(ReqHandle& h) {
  Rpc& rpc = h.rpc();
  auto* middle = static_cast<Middle*>(h.context());
  const size_t size = h.request().size();
  MsgBuffer req = rpc.alloc_msg_buffer(size);
  MsgBuffer resp = rpc.alloc_msg_buffer(size);
  // Not the same bytes: an echo of them would look like the request.
  for (size_t i = 0; i < size; i++) req.data()[i] = h.request().data()[i] ^ 0x5A;
  // Several round trips: more packets through the RX ring meanwhile.
  CallResult r;
  for (int i = 0; i < 4 && r.ok(); i++) r = co_await rpc.call(middle->backend, kEcho, req, resp);
  bool same = r.ok() && r.resp_size == size;
  for (size_t i = 0; same && i < size; i++) same = (resp.data()[i] ^ 0x5A) == h.request().data()[i];
  MsgBuffer& out = h.pre_resp_buffer();
  if (same) std::memcpy(out.data(), h.request().data(), size);
  out.resize(same ? size : 0);
  rpc.free_msg_buffer(req);
  rpc.free_msg_buffer(resp);
  rpc.enqueue_response(h, out);
}

Task<void> co_throw(ReqHandle& h) {
  Rpc& rpc = h.rpc();
  auto* middle = static_cast<Middle*>(h.context());
  MsgBuffer req = rpc.alloc_msg_buffer(8);
  MsgBuffer resp = rpc.alloc_msg_buffer(8);
  CallResult r = co_await rpc.call(middle->backend, kEcho, req, resp);
  rpc.free_msg_buffer(req);
  rpc.free_msg_buffer(resp);
  if (r.ok()) throw std::runtime_error("thrown after the nested call");
}

// Asks the back end for a large response (read one-sided into resp), then
// answers with the start of its own request: it names its handle after the
// suspension, whenever that ends.
Task<void> co_nested_large(ReqHandle& h) {
  Rpc& rpc = h.rpc();
  auto* middle = static_cast<Middle*>(h.context());
  MsgBuffer req = rpc.alloc_msg_buffer(8);
  MsgBuffer resp = rpc.alloc_msg_buffer(kLargeBytes);
  const CallResult r = co_await rpc.call(middle->backend, kLargeResp, req, resp);
  middle->large_resumed++;
  middle->large_errc = r.errc;
  rpc.free_msg_buffer(req);
  rpc.free_msg_buffer(resp);
  MsgBuffer& out = h.pre_resp_buffer();
  const size_t size = std::min(h.request().size(), out.max_size());
  std::memcpy(out.data(), h.request().data(), size);
  out.resize(size);
  rpc.enqueue_response(h, out);
}

struct Trio {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  Middle middle;
  std::unique_ptr<Rpc> backend;
  std::unique_ptr<Rpc> mid;
  std::unique_ptr<Rpc> client;
  SessionNum sn = kInvalidSessionNum;  // client -> middle

  explicit Trio(const std::string& transport) {
    if (transport == "fake") FakeNetwork::instance().reset();
    REQUIRE(nexus.register_handler(kEcho, echo_into_response));
    REQUIRE(nexus.register_handler(kCoEcho, co_echo));
    REQUIRE(nexus.register_handler(kCoNested, co_nested));
    REQUIRE(nexus.register_handler(kCoThrow, co_throw));
    REQUIRE(nexus.register_handler(kNeverResponds, [](ReqHandle&) {}));
    REQUIRE(nexus.register_handler(kLargeResp, [](ReqHandle& h) {
      MsgBuffer resp = h.rpc().alloc_msg_buffer(kLargeBytes);
      fill_pattern(resp, 7);
      h.rpc().enqueue_response(h, resp);
    }));
    REQUIRE(nexus.register_handler(kCoNestedLarge, co_nested_large));
    REQUIRE(nexus.register_handler(kCoAppError, [](ReqHandle& h) -> Task<void> {
      h.rpc().enqueue_error_response(h, 42);
      co_return;
    }));
    const size_t mtu = transport == "fake" ? 256 : 1500;
    backend = std::make_unique<Rpc>(
        nexus, RpcConfig{.rpc_id = kBackendId, .transport = transport, .mtu_bytes = mtu});
    // A small RX ring on the middle Rpc: its entries are reused within
    // one nested call, so a coroutine handler reading its request from the
    // ring after suspending would read other packets.
    mid = std::make_unique<Rpc>(nexus, RpcConfig{.rpc_id = kMiddleId,
                                                 .transport = transport,
                                                 .mtu_bytes = mtu,
                                                 .rx_ring_size = 8,
                                                 .session_credits = 8,
                                                 .context = &middle});
    client = std::make_unique<Rpc>(
        nexus, RpcConfig{.rpc_id = kClientId, .transport = transport, .mtu_bytes = mtu});
    middle.backend = open(*mid, kBackendId);
    sn = open(*client, kMiddleId);
  }
  ~Trio() {
    client.reset();
    mid.reset();
    backend.reset();
    FakeNetwork::instance().reset();
  }
  SessionNum open(Rpc& from, RpcId to) {
    auto s = from.create_session(nexus.uri(), to);
    REQUIRE(s);
    REQUIRE(pump_until([&] { return from.is_connected(*s); }));
    return *s;
  }
  bool pump_until(const std::function<bool()>& done) {
    return run_all_until({client.get(), mid.get(), backend.get()}, done);
  }
};

// Sends `count` requests of `size` bytes one after another, checking every
// answer; counts those that came back right.
Task<void> call_many(Rpc& rpc, SessionNum sn, ReqType type, size_t size, int count, int& good,
                     bool& finished) {
  MsgBuffer req = rpc.alloc_msg_buffer(size);
  MsgBuffer resp = rpc.alloc_msg_buffer(size);
  for (int i = 0; i < count; i++) {
    fill_pattern(req, static_cast<uint64_t>(i));
    CallResult r = co_await rpc.call(sn, type, req, resp);
    if (r.ok() && r.resp_size == size && check_pattern(resp, size, static_cast<uint64_t>(i))) {
      good++;
    }
  }
  rpc.free_msg_buffer(req);
  rpc.free_msg_buffer(resp);
  finished = true;
}

// Sends one 8-byte request and keeps its outcome.
Task<void> call_once(Rpc& rpc, SessionNum sn, ReqType type, CallResult& out, bool& finished) {
  MsgBuffer req = rpc.alloc_msg_buffer(8), resp = rpc.alloc_msg_buffer(8);
  out = co_await rpc.call(sn, type, req, resp);
  rpc.free_msg_buffer(req);
  rpc.free_msg_buffer(resp);
  finished = true;
}

TEST_CASE("co_await rpc.call, coroutine handlers and nested calls", "[coro]") {
  const std::string transport = GENERATE(as<std::string>{}, "fake", "udp");
  Trio t(transport);
  SECTION("a coroutine client calls a plain and a coroutine handler, " + transport) {
    int good = 0;
    bool finished = false;
    t.client->spawn(call_many(*t.client, t.sn, kEcho, 64, 50, good, finished));
    int good_co = 0;
    bool finished_co = false;
    t.client->spawn(call_many(*t.client, t.sn, kCoEcho, 100, 50, good_co, finished_co));
    REQUIRE(t.pump_until([&] { return finished && finished_co; }));
    CHECK(good == 50);
    CHECK(good_co == 50);
  }
  SECTION("coroutine handlers await nested calls, many at once, " + transport) {
    // Eight clients at once keep the RX ring busy: a handler that read its
    // request from the ring after suspending would see other packets.
    constexpr int kTasks = 8;
    std::vector<int> good(kTasks, 0);
    std::vector<char> finished(kTasks, 0);
    for (int i = 0; i < kTasks; i++) {
      t.client->spawn([](Rpc& rpc, SessionNum sn, int& g, char& f) -> Task<void> {
        bool done = false;
        co_await call_many(rpc, sn, kCoNested, 48, 30, g, done);
        f = done;
      }(*t.client, t.sn, good[i], finished[i]));
    }
    REQUIRE(t.pump_until([&] {
      return std::all_of(finished.begin(), finished.end(), [](char f) { return f != 0; });
    }));
    for (int g : good) CHECK(g == 30);
    CHECK(t.mid->stats().task_exceptions == 0);
  }
  SECTION("a coroutine handler that throws fails its request with kHandlerFailed, " + transport) {
    CallResult seen;
    bool finished = false;
    t.client->spawn(call_once(*t.client, t.sn, kCoThrow, seen, finished));
    REQUIRE(t.pump_until([&] { return finished; }));
    CHECK(seen.errc == Errc::kHandlerFailed);
    CHECK(t.mid->stats().handler_exceptions == 1);
  }
}

TEST_CASE("a coroutine handler cannot be registered in the background") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0", .num_bg_threads = 1}};
  auto r = nexus.register_handler(kCoEcho, co_echo, HandlerMode::kBackground);
  REQUIRE_FALSE(r);
  CHECK(r.error().find("foreground") != std::string::npos);
}

// ---------------------------------------------------------------- Task

Task<int> add_later(int a, int b) { co_return a + b; }
Task<int> sum_of_three() {
  int x = co_await add_later(1, 2);
  int y = co_await add_later(x, 3);
  co_return y;
}
Task<void> throws_inside() {
  throw std::runtime_error("inside");
  co_return;
}

TEST_CASE("Tasks pass values and exceptions to whoever awaits them") {
  Trio t("fake");
  int got = 0;
  std::string caught;
  t.client->spawn([](int& out, std::string& err) -> Task<void> {
    out = co_await sum_of_three();
    try {
      co_await throws_inside();
    } catch (const std::runtime_error& e) {
      err = e.what();
    }
  }(got, caught));
  CHECK(got == 6);  // nothing suspended: all of it ran inside spawn
  CHECK(caught == "inside");
  CHECK(t.client->stats().task_exceptions == 0);
}

TEST_CASE("an exception escaping a spawned task is caught, counted, and the Rpc carries on") {
  Trio t("fake");
  t.client->spawn(throws_inside());
  CHECK(t.client->stats().task_exceptions == 1);
  int good = 0;
  bool finished = false;
  t.client->spawn(call_many(*t.client, t.sn, kEcho, 16, 3, good, finished));
  REQUIRE(t.pump_until([&] { return finished; }));
  CHECK(good == 3);
}

// Never resumes whoever awaits it.
struct Forever {
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<>) const noexcept {}
  void await_resume() const noexcept {}
};

struct SetOnDestroy {
  bool& flag;
  ~SetOnDestroy() { flag = true; }
};

TEST_CASE("~Rpc resumes coroutines awaiting calls, then destroys those still suspended") {
  Trio t("fake");
  CallResult seen;
  bool resumed = false;
  bool frame_a_gone = false;
  bool frame_b_gone = false;
  t.client->spawn([](Rpc& rpc, SessionNum sn, CallResult& out, bool& r, bool& gone) -> Task<void> {
    SetOnDestroy guard{gone};
    MsgBuffer req = rpc.alloc_msg_buffer(8), resp = rpc.alloc_msg_buffer(8);
    out = co_await rpc.call(sn, kNeverResponds, req, resp);
    r = true;
    rpc.free_msg_buffer(req);
    rpc.free_msg_buffer(resp);
  }(*t.client, t.sn, seen, resumed, frame_a_gone));
  t.client->spawn([](bool& gone) -> Task<void> {
    SetOnDestroy guard{gone};
    co_await Forever{};
  }(frame_b_gone));
  REQUIRE(t.pump_until([&] { return t.mid->stats().handlers_run == 1; }));
  CHECK_FALSE(resumed);
  t.client.reset();
  CHECK(resumed);
  CHECK(seen.errc == Errc::kSessionDestroyed);
  CHECK(frame_a_gone);  // it finished
  CHECK(frame_b_gone);  // destroyed by ~Rpc
}

TEST_CASE(
    "~Rpc resumes a coroutine handler whose nested response is being read before it frees "
    "the handler's session") {
  // Given a middle Rpc whose coroutine handler awaits a nested call, the
  // call's response being read one-sided (held in flight)
  Trio t("fake");
  FakeNetwork::instance().set_hold_bulk(true);
  CallResult seen;
  bool done = false;
  t.client->spawn(call_once(*t.client, t.sn, kCoNestedLarge, seen, done));
  REQUIRE(t.pump_until([&] { return t.mid->stats().bulk_reads == 1; }));
  REQUIRE(t.middle.large_resumed == 0);
  // When the middle Rpc is destroyed: ~Rpc fails the nested call, whose
  // continuation waits for the read; the read completes during the
  // teardown, or is cancelled by it (after 2 s)
  SECTION("the read completes") { FakeNetwork::instance().set_hold_bulk(false); }
  SECTION("the read is cancelled") {}
  t.mid.reset();
  FakeNetwork::instance().set_hold_bulk(false);
  // Expect: the handler resumed once, inside ~Rpc, and named its handle
  // (request, response buffer, enqueue_response) while its session was
  // still there (AddressSanitizer reports a use after free otherwise); its
  // answer went nowhere, and the client learns that its server went away
  CHECK(t.middle.large_resumed == 1);
  CHECK(t.middle.large_errc == Errc::kSessionDestroyed);
  REQUIRE(run_all_until({t.client.get(), t.backend.get()}, [&] { return done; }));
  CHECK(seen.errc == Errc::kSessionReset);
}

// ---------------------------------------------------------------- blocking

TEST_CASE("Rpc::connect and call_sync", "[blocking]") {
  const std::string transport = GENERATE(as<std::string>{}, "fake", "udp");
  Trio t(transport);
  ServerThread server(t.nexus, RpcConfig{.rpc_id = 7,
                                         .transport = transport,
                                         .mtu_bytes = transport == "fake" ? 256u : 1500u});
  SECTION("connect waits for the session, call_sync for the answer, " + transport) {
    auto sn = t.client->connect(t.nexus.uri(), 7, 5000ms);
    REQUIRE(sn);
    CHECK(t.client->is_connected(*sn));
    MsgBuffer req = t.client->alloc_msg_buffer(300), resp = t.client->alloc_msg_buffer(300);
    fill_pattern(req, 9);
    CallResult r = call_sync(*t.client, *sn, kEcho, req, resp, 5s);
    CHECK(r.ok());
    CHECK(r.resp_size == 300);
    CHECK(check_pattern(resp, 300, 9));
    t.client->free_msg_buffer(req);
    t.client->free_msg_buffer(resp);
  }
  SECTION("connect to an Rpc that does not exist fails, saying why, " + transport) {
    auto sn = t.client->connect(t.nexus.uri(), 99, 5000ms);
    REQUIRE_FALSE(sn);
    CHECK(sn.error().find(std::string(to_string(SmErr::kUnknownRpcId))) != std::string::npos);
  }
  SECTION("call_sync and co_await carry a handler's application error, " + transport) {
    auto sn = t.client->connect(t.nexus.uri(), 7, 5000ms);
    REQUIRE(sn);
    MsgBuffer req = t.client->alloc_msg_buffer(8), resp = t.client->alloc_msg_buffer(8);
    CallResult r = call_sync(*t.client, *sn, kCoAppError, req, resp, 5s);
    CHECK(r.errc == Errc::kAppError);
    CHECK(r.app_error == 42);
    CallResult co;
    t.client->spawn(
        [](Rpc& rpc, SessionNum s, MsgBuffer& q, MsgBuffer& a, CallResult& out) -> Task<void> {
          out = co_await rpc.call(s, kCoAppError, q, a);
        }(*t.client, *sn, req, resp, co));
    REQUIRE(run_until(*t.client, [&] { return co.app_error != 0; }));
    CHECK(co.errc == Errc::kAppError);
    CHECK(co.app_error == 42);
    t.client->free_msg_buffer(req);
    t.client->free_msg_buffer(resp);
  }
  SECTION("call_sync gives up at its timeout, " + transport) {
    auto sn = t.client->connect(t.nexus.uri(), 7, 5000ms);
    REQUIRE(sn);
    MsgBuffer req = t.client->alloc_msg_buffer(8), resp = t.client->alloc_msg_buffer(8);
    CallResult r = call_sync(*t.client, *sn, kNeverResponds, req, resp, 30ms);
    CHECK(r.errc == Errc::kTimedOut);
    CHECK(t.client->is_connected(*sn));
    t.client->free_msg_buffer(req);
    t.client->free_msg_buffer(resp);
  }
}

TEST_CASE("connect gives up at its timeout and destroys the session") {
  Trio t("fake");
  // A Nexus address where nothing answers.
  auto sn = t.client->connect("127.0.0.1:9", 1, 100ms);
  REQUIRE_FALSE(sn);
  CHECK(sn.error().find("not connected within 100 ms") != std::string::npos);
}

}  // namespace

namespace {

constexpr ReqType kCoForgets = 30;  // a coroutine handler that never answers

TEST_CASE("a coroutine handler that ends without answering fails its request, loudly") {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  REQUIRE(nexus.register_handler(kCoForgets, [](ReqHandle&) -> Task<void> { co_return; }));
  Rpc server(nexus, RpcConfig{.rpc_id = 1, .transport = "udp"});
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .transport = "udp"});
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_all_until({&client, &server}, [&] { return client.is_connected(*sn); }));
  OwnedBuffer req(client, 8), resp(client, 8);
  CallResult seen;
  bool done = false;
  client.spawn([](Rpc& rpc, SessionNum s, MsgBuffer& q, MsgBuffer& a, CallResult& out,
                  bool& d) -> Task<void> {
    out = co_await rpc.call(s, kCoForgets, q, a);
    d = true;
  }(client, *sn, req, resp, seen, done));
  REQUIRE(run_all_until({&client, &server}, [&] { return done; }));
  CHECK(seen.errc == Errc::kHandlerFailed);
  CHECK(server.stats().handlers_unanswered == 1);
}

// A handler that produces a value cannot be registered (it would be dropped unstarted).
template <typename F>
concept Registrable = requires(Nexus& n, F f) {
  n.register_handler(ReqType{1}, f);
};
static_assert(Registrable<Task<void> (*)(ReqHandle&)>);
static_assert(!Registrable<Task<int> (*)(ReqHandle&)>);

}  // namespace
