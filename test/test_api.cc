// The API users write against (issue 13), over `fake`: continuations as
// closures, per-request deadlines and cancellation.
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <vector>

#include "fake_pair.h"
#include "rpc/impl_access.h"
#include "test_util.h"
#include "wire/pkt_hdr.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

constexpr size_t kLarge = 20000;  // above the default bulk threshold (16 KiB)

// Counts live copies, to see that a Callback destroys what it holds once.
struct Tracked {
  static inline int live = 0;
  Tracked() { live++; }
  Tracked(const Tracked&) { live++; }
  Tracked(Tracked&&) noexcept { live++; }
  ~Tracked() { live--; }
};

// ---------------------------------------------------------------- Callback

using IntFn = Callback<int(int)>;

struct ThreePointers {
  void* a;
  void* b;
  void* c;
  int operator()(int x) const { return x + 3; }
};
struct FourPointers {
  void* a;
  void* b;
  void* c;
  void* d;
  int operator()(int x) const { return x + 4; }
};

static_assert(IntFn::kStoredInline<ThreePointers>, "three pointers are stored inline");
static_assert(!IntFn::kStoredInline<FourPointers>, "four are not");
static_assert(IntFn::kStoredInline<int (*)(int)>, "a function pointer is stored inline");
static_assert(sizeof(ContinuationFn) == 5 * sizeof(void*), "storage, invoke, manage");

TEST_CASE("a Callback calls what it holds, inline or on the heap, and destroys it once") {
  Tracked::live = 0;
  {
    Tracked t;
    auto small = [t, n = 1](int x) { return x + n; };  // non-trivial, inline
    auto big = [t, pad = std::array<void*, 6>{}](int x) { return x + 2 + (pad[0] == nullptr); };
    static_assert(IntFn::kStoredInline<decltype(small)>);
    static_assert(!IntFn::kStoredInline<decltype(big)>);
    IntFn a(std::move(small));
    IntFn b(std::move(big));
    IntFn c(ThreePointers{});
    IntFn d(FourPointers{});
    CHECK(a(1) == 2);
    CHECK(b(1) == 4);
    CHECK(c(1) == 4);
    CHECK(d(1) == 5);
    // Moves carry the callable along and leave the source empty.
    IntFn a2(std::move(a));
    IntFn b2;
    b2 = std::move(b);
    CHECK_FALSE(a);
    CHECK_FALSE(b);
    CHECK(a2(2) == 3);
    CHECK(b2(2) == 5);
    b2 = nullptr;
    CHECK_FALSE(b2);
  }
  CHECK(Tracked::live == 0);
}

TEST_CASE("a Callback made from a null function pointer is empty") {
  int (*none)(int) = nullptr;
  CHECK_FALSE(IntFn(none));
  CHECK_FALSE(IntFn(nullptr));
  CHECK(IntFn([](int x) { return x; }));
}

// ---------------------------------------------------------------- closures

TEST_CASE("a continuation may be a lambda with captures; it runs once and is then destroyed") {
  Pair p;
  Call call(*p.client, 64);
  auto alive = std::make_shared<int>(0);
  int runs = 0;
  Errc seen = Errc::kInvalidArgument;
  size_t seen_size = 0;
  REQUIRE(p.client->enqueue_request(p.sn, kEcho, call.req, call.resp,
                                    [&, alive](Rpc&, const Completion& c) {
                                      runs++;
                                      seen = c.errc;
                                      seen_size = c.resp_size;
                                      CHECK(c.tag == nullptr);
                                    }) == Errc::kOk);
  CHECK(alive.use_count() == 2);  // the Rpc holds the capture
  REQUIRE(p.pump_until([&] { return runs > 0; }));
  p.pump_for(5ms);
  CHECK(runs == 1);
  CHECK(seen == Errc::kOk);
  CHECK(seen_size == 64);
  CHECK(check_pattern(call.resp, 64, 64));
  CHECK(alive.use_count() == 1);  // released once it ran
  call.release(*p.client);
}

TEST_CASE("a refused request destroys its continuation without running it") {
  Pair p;
  Call call(*p.client, 64);
  auto alive = std::make_shared<int>(0);
  bool ran = false;
  CHECK(p.client->enqueue_request(kInvalidSessionNum - 1, kEcho, call.req, call.resp,
                                  [&ran, alive](Rpc&, const Completion&) { ran = true; }) ==
        Errc::kInvalidSession);
  CHECK_FALSE(ran);
  CHECK(alive.use_count() == 1);
  call.release(*p.client);
}

// ---------------------------------------------------------------- deadlines

// A Call (fake_pair.h) sent with a closure as its continuation, and options.
struct Req : Call {
  RequestId id;
  using Call::Call;
  Errc send(Rpc& rpc, SessionNum sn, ReqType type, RequestOptions options = {}) {
    return rpc.enqueue_request(
        sn, type, req, resp,
        [this](Rpc&, const Completion& c) {
          runs++;
          errc = c.errc;
          resp_size = c.resp_size;
        },
        options, &id);
  }
};

TEST_CASE("a request past its deadline fails with kTimedOut, and the session stays up") {
  Pair p;
  p.use_manual_clock();
  // Given a request to a handler that does not respond (yet)
  Req stuck(*p.client, 32);
  REQUIRE(stuck.send(*p.client, p.sn, kDeferForever, {.timeout = 50ms}) == Errc::kOk);
  REQUIRE(p.pump_until([] { return g_deferred != nullptr; }));
  // When its deadline passes
  p.advance(30ms);
  CHECK(stuck.runs == 0);
  p.advance(30ms);
  // Expect: it failed, once, with kTimedOut; the session was not reset
  CHECK(stuck.runs == 1);
  CHECK(stuck.errc == Errc::kTimedOut);
  CHECK(stuck.resp.size() == 0);
  CHECK(p.client->stats().requests_past_deadline == 1);
  CHECK(p.client->is_connected(p.sn));
  CHECK(p.client->stats().sessions_reset == 0);
  // and the session's next requests go to another slot, not the one the
  // server's handler still holds: they complete while it runs
  Session& session = *RpcImplTestAccess::session(impl_of(*p.client), p.sn);
  CHECK(session.unheard_cslots == 1);  // slot 0, the stuck request's
  for (size_t size : {48, 56}) {
    Req next(*p.client, size);
    REQUIRE(next.send(*p.client, p.sn, kEcho) == Errc::kOk);
    CHECK(session.busy_cslots == 2);  // slot 1
    for (int i = 0; i < 20 && next.runs == 0; i++) p.advance(1ms);
    CHECK(next.runs == 1);
    CHECK(next.errc == Errc::kOk);
    CHECK(check_pattern(next.resp, size, size));
    next.release(*p.client);
  }
  // When the old handler responds, its answer is dropped and the slot is
  // the first free one again
  ReqHandle& h = *g_deferred;
  h.pre_resp_buffer().resize(8);
  std::memset(h.pre_resp_buffer().data(), 0x77, 8);
  p.server->enqueue_response(h, h.pre_resp_buffer());
  for (int i = 0; i < 20 && session.unheard_cslots != 0; i++) p.advance(1ms);
  CHECK(session.unheard_cslots == 0);
  Req last(*p.client, 40);
  REQUIRE(last.send(*p.client, p.sn, kEcho) == Errc::kOk);
  CHECK(session.busy_cslots == 1);  // slot 0
  for (int i = 0; i < 20 && last.runs == 0; i++) p.advance(1ms);
  CHECK(last.runs == 1);
  CHECK(last.errc == Errc::kOk);
  CHECK(check_pattern(last.resp, 40, 40));
  CHECK(stuck.runs == 1);
  CHECK(p.client->stats().sessions_reset == 0);
  stuck.release(*p.client);
  last.release(*p.client);
}

TEST_CASE("a request waiting for its session to connect fails at its deadline") {
  Pair p({}, {}, /*connect=*/false);  // the server's loop is never run: no answer
  Req waiting(*p.client, 32);
  Req other(*p.client, 32);
  REQUIRE(waiting.send(*p.client, p.sn, kEcho, {.timeout = 20ms}) == Errc::kOk);
  REQUIRE(other.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(run_until(
      *p.client, [&] { return waiting.runs > 0; }, 5s));
  CHECK(waiting.errc == Errc::kTimedOut);
  CHECK(other.runs == 0);  // no deadline: it waits on
  CHECK(p.client->stats().requests_past_deadline == 1);
  // The other one is sent once the session connects.
  REQUIRE(p.pump_until([&] { return other.runs > 0; }));
  CHECK(other.errc == Errc::kOk);
  CHECK(waiting.runs == 1);
  waiting.release(*p.client);
  other.release(*p.client);
}

TEST_CASE("a negative timeout is refused") {
  Pair p;
  Req r(*p.client, 32);
  CHECK(r.send(*p.client, p.sn, kEcho, {.timeout = -1ms}) == Errc::kInvalidArgument);
  r.release(*p.client);
}

// ---------------------------------------------------------------- cancel

TEST_CASE("cancel ends an outstanding request inside the call, once; the session carries on") {
  Pair p;
  Req stuck(*p.client, 32);
  REQUIRE(stuck.send(*p.client, p.sn, kDeferForever) == Errc::kOk);
  REQUIRE(p.pump_until([] { return g_deferred != nullptr; }));
  CHECK(p.client->cancel(stuck.id));
  CHECK(stuck.runs == 1);
  CHECK(stuck.errc == Errc::kCancelled);
  CHECK_FALSE(p.client->cancel(stuck.id));  // already complete
  CHECK_FALSE(p.client->cancel(RequestId{}));
  CHECK(p.client->stats().requests_cancelled == 1);
  // The handler's late answer is dropped; the next request gets its own.
  p.server->enqueue_response(*g_deferred, g_deferred->pre_resp_buffer());
  Req next(*p.client, 40);
  REQUIRE(next.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return next.runs > 0; }));
  CHECK(next.errc == Errc::kOk);
  CHECK(check_pattern(next.resp, 40, 40));
  CHECK(stuck.runs == 1);
  CHECK(p.client->is_connected(p.sn));
  stuck.release(*p.client);
  next.release(*p.client);
}

TEST_CASE("cancel removes a request still waiting in the backlog, leaving the others in order") {
  Pair p({}, {}, /*connect=*/false);
  std::vector<std::unique_ptr<Req>> reqs;
  for (int i = 0; i < 3; i++) {
    reqs.push_back(std::make_unique<Req>(*p.client, 16 + i));
    REQUIRE(reqs.back()->send(*p.client, p.sn, kEcho) == Errc::kOk);
  }
  CHECK(p.client->cancel(reqs[1]->id));
  CHECK(reqs[1]->runs == 1);
  CHECK(reqs[1]->errc == Errc::kCancelled);
  REQUIRE(p.pump_until([&] { return reqs[0]->runs > 0 && reqs[2]->runs > 0; }));
  CHECK(reqs[0]->errc == Errc::kOk);
  CHECK(reqs[2]->errc == Errc::kOk);
  CHECK(check_pattern(reqs[2]->resp, 18, 18));
  CHECK(reqs[1]->runs == 1);
  for (auto& r : reqs) r->release(*p.client);
}

TEST_CASE("a multi-packet request given up while its handler runs does not hold up the next") {
  Pair p(RpcConfig{.mtu_bytes = 256}, RpcConfig{.mtu_bytes = 256});
  Session& session = *RpcImplTestAccess::session(impl_of(*p.client), p.sn);
  // Given a request of several packets, all received (their credit
  // returns came back), whose handler has not answered
  Req stuck(*p.client, 1000);
  REQUIRE(stuck.send(*p.client, p.sn, kDeferForever) == Errc::kOk);
  REQUIRE(p.pump_until([] { return g_deferred != nullptr; }));
  const ClientSlot& slot = session.cslots[0];
  REQUIRE(slot.req_pkts > 1);
  REQUIRE(p.pump_until([&] { return slot.num_rx == slot.req_pkts - 1; }));
  REQUIRE(p.client->cancel(stuck.id));
  // Expect the next request to go to another slot, and complete
  CHECK(session.unheard_cslots == 1);
  Req next(*p.client, 40);
  REQUIRE(next.send(*p.client, p.sn, kEcho) == Errc::kOk);
  CHECK(session.busy_cslots == 2);
  REQUIRE(p.pump_until([&] { return next.runs > 0; }));
  CHECK(next.errc == Errc::kOk);
  CHECK(check_pattern(next.resp, 40, 40));
  // and the old handler's answer to clear the mark
  p.server->enqueue_response(*g_deferred, g_deferred->pre_resp_buffer());
  REQUIRE(p.pump_until([&] { return session.unheard_cslots == 0; }));
  stuck.release(*p.client);
  next.release(*p.client);
}

TEST_CASE("requests given up and each answered late never add up to a session reset") {
  Pair p;
  Session& session = *RpcImplTestAccess::session(impl_of(*p.client), p.sn);
  // Given, more than kMaxReqsGivenUp times, a request to a slow handler,
  // given up, whose handler then answers (late: the answer is dropped)
  for (size_t round = 0; round < kMaxReqsGivenUp + 6; round++) {
    INFO("round " << round);
    g_deferred = nullptr;
    Req slow(*p.client, 16);
    REQUIRE(slow.send(*p.client, p.sn, kDeferForever) == Errc::kOk);
    REQUIRE(session.busy_cslots == 1);  // slot 0 each time: its mark is cleared
    REQUIRE(p.pump_until([] { return g_deferred != nullptr; }));
    REQUIRE(p.client->cancel(slow.id));
    p.server->enqueue_response(*g_deferred, g_deferred->pre_resp_buffer());
    REQUIRE(p.pump_until([&] { return session.unheard_cslots == 0; }));
    slow.release(*p.client);
  }
  // Expect the session up: the server answered each one, so no request
  // number was skipped
  CHECK(p.client->is_connected(p.sn));
  CHECK(p.client->stats().sessions_reset == 0);
}

TEST_CASE("a request given up before the server heard of it does not block its slot") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  // Given a request none of whose packets reaches the server
  net.set_filter([](const FakePacket&) { return FakeVerdict::kDrop; });
  Req lost(*p.client, 32);
  REQUIRE(lost.send(*p.client, p.sn, kEcho) == Errc::kOk);
  p.pump_for(5ms);
  // When the client gives it up and the network heals
  REQUIRE(p.client->cancel(lost.id));
  net.set_filter(nullptr);
  // Expect: the slot's next request, one request number further on than
  // the server expects, is taken
  Req next(*p.client, 32);
  REQUIRE(next.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return next.runs > 0; }, 5s));
  CHECK(next.errc == Errc::kOk);
  CHECK(p.client->stats().sessions_reset == 0);
  lost.release(*p.client);
  next.release(*p.client);
}

TEST_CASE("a request cancelled while its response is read runs its continuation after the read") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  net.set_hold_bulk(true);
  Req r(*p.client, 32, kLarge);
  REQUIRE(r.send(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 1; }));
  CHECK(p.client->cancel(r.id));
  p.pump_for(10ms);
  CHECK(r.runs == 0);  // the read still writes into r.resp
  net.set_hold_bulk(false);
  REQUIRE(p.pump_until([&] { return r.runs > 0; }));
  CHECK(r.runs == 1);
  CHECK(r.errc == Errc::kCancelled);
  CHECK(r.resp.size() == 0);
  r.release(*p.client);
}

TEST_CASE("a large request cancelled while the server may read it ends when the server answers") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  net.set_hold_bulk(true);
  Req r(*p.client, kLarge);
  REQUIRE(r.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.server)) == 1; }));
  // When the client gives it up while the server reads it
  CHECK(p.client->cancel(r.id));
  CHECK_FALSE(p.client->cancel(r.id));  // ending already
  // Expect: nothing is withdrawn under the read (on verbs and ofi_rxm a
  // failed read breaks the connection), so the request waits for the answer
  p.pump_for(10ms);
  CHECK(r.runs == 0);
  CHECK(net.num_exposures() >= 1);
  net.set_hold_bulk(false);
  REQUIRE(p.pump_until([&] { return r.runs > 0; }));
  CHECK(r.runs == 1);
  CHECK(r.errc == Errc::kCancelled);
  CHECK(r.resp.size() == 0);
  CHECK(p.server->stats().bulk_reads_failed == 0);
  CHECK(p.client->stats().requests_end_deferred == 1);
  CHECK(p.client->stats().bulk_reads == 0);  // the response was not read
  // and the session carries on
  Req next(*p.client, kLarge);
  REQUIRE(next.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return next.runs > 0; }));
  CHECK(next.errc == Errc::kOk);
  CHECK(check_pattern(next.resp, kLarge, kLarge));
  r.release(*p.client);
  next.release(*p.client);
}

// ---------------------------------------------------------------- app errors

TEST_CASE("a handler may answer with an application error, from either thread") {
  Pair p;
  for (ReqType type : {kAppErr, kAppErrBg}) {
    Call call(*p.client, 24);
    Completion seen{};
    bool done = false;
    REQUIRE(
        p.client->enqueue_request(p.sn, type, call.req, call.resp, [&](Rpc&, const Completion& c) {
          seen = c;
          done = true;
        }) == Errc::kOk);
    REQUIRE(p.pump_until([&] { return done; }));
    CHECK(seen.errc == Errc::kAppError);
    CHECK(seen.app_error == 0xC0DE0000 + 24);
    CHECK(seen.resp_size == 0);
    CHECK(call.resp.size() == 0);
    call.release(*p.client);
  }
  // An answer from the cache carries the code too (the first answer lost).
  FakeNetwork& net = FakeNetwork::instance();
  int dropped = 0;
  net.set_filter([&](const FakePacket&) {
    return dropped++ == 0 ? FakeVerdict::kDrop : FakeVerdict::kDeliver;
  });
  Call call(*p.client, 7);
  p.use_manual_clock();
  uint32_t seen_code = 0;
  REQUIRE(p.client->enqueue_request(p.sn, kAppErr, call.req, call.resp,
                                    [&](Rpc&, const Completion& c) { seen_code = c.app_error; }) ==
          Errc::kOk);
  for (int i = 0; i < 100 && seen_code == 0; i++) p.advance(5ms);
  CHECK(seen_code == 0xC0DE0000 + 7);
  call.release(*p.client);
}

TEST_CASE("an application-error packet of any other shape is dropped as a bad header") {
  Pair p;
  RpcImpl& impl = impl_of(*p.client);
  auto hdr = [](uint32_t size, bool bulk, uint16_t pkt_num) {
    return PktHdr::make(PktType::kResp, 1, size, 0, pkt_num, 8, bulk, RespStatus::kAppError);
  };
  CHECK(RpcImplTestAccess::header_sane(impl, hdr(4, false, 0), 4));
  CHECK_FALSE(RpcImplTestAccess::header_sane(impl, hdr(5, false, 0), 5));
  CHECK_FALSE(RpcImplTestAccess::header_sane(impl, hdr(4, false, 0), 3));
  CHECK_FALSE(RpcImplTestAccess::header_sane(impl, hdr(4, false, 1), 4));
  CHECK_FALSE(RpcImplTestAccess::header_sane(impl, hdr(4, true, 0), 4));
  CHECK_FALSE(RpcImplTestAccess::header_sane(
      impl, PktHdr::make(PktType::kReq, 1, 4, 0, 0, 8, false, RespStatus::kAppError), 4));
}

// ---------------------------------------------------------------- server session events

TEST_CASE("a server Rpc that asks is told of its sessions' connects, disconnects and resets") {
  std::vector<ServerSessionEvent> events;
  RpcConfig sc;
  sc.server_session_callback = [&](const ServerSessionEvent& e) { events.push_back(e); };
  Pair p(sc);
  REQUIRE(events.size() == 1);
  CHECK(events[0].event == SessionEvent::kConnected);
  CHECK(events[0].client_rpc_id == 0);
  CHECK(events[0].client_uri == p.nexus.uri());
  const SessionNum server_sn = events[0].session_num;
  // The client ends it.
  REQUIRE(p.client->destroy_session(p.sn));
  REQUIRE(p.pump_until([&] { return events.size() == 2; }));
  CHECK(events[1].event == SessionEvent::kDisconnected);
  CHECK(events[1].session_num == server_sn);
  CHECK(events[1].reason == SmErr::kNone);
  // A second session, whose client process is then declared failed.
  auto sn2 = p.client->create_session(p.nexus.uri(), 1);
  REQUIRE(sn2);
  REQUIRE(p.pump_until([&] { return p.client->is_connected(*sn2) && events.size() == 3; }));
  CHECK(events[2].event == SessionEvent::kConnected);
  Session* s = RpcImplTestAccess::session(impl_of(*p.server), events[2].session_num);
  REQUIRE(s != nullptr);
  RpcImplTestAccess::remote_failed(impl_of(*p.server), s->remote_nexus, s->remote_incarnation);
  REQUIRE(events.size() == 4);
  CHECK(events[3].event == SessionEvent::kReset);
  CHECK(events[3].reason == SmErr::kRemoteFailed);
  CHECK(events[3].session_num == events[2].session_num);
}

TEST_CASE("server session events are off unless asked for") {
  std::vector<Event> server_events;
  RpcConfig sc;
  sc.session_callback = [&](SessionNum s, SessionEvent e, SmErr r) {
    server_events.emplace_back(s, e, r);
  };
  Pair p(sc);
  REQUIRE(p.client->destroy_session(p.sn));
  p.pump_for(20ms);
  CHECK(server_events.empty());  // the client-session callback is not told of server sessions
}

}  // namespace

namespace {

// ---------------------------------------------------------------- review fixes

static_assert(std::is_convertible_v<OwnedBuffer&, MsgBuffer&>);
static_assert(!std::is_convertible_v<OwnedBuffer&&, MsgBuffer&>,
              "a temporary OwnedBuffer would be freed while its request runs");

TEST_CASE("a request cancelled during its response's read keeps its slot until the read is done") {
  Pair p;
  FakeNetwork& net = FakeNetwork::instance();
  net.set_hold_bulk(true);
  Req big(*p.client, 32, kLarge);
  REQUIRE(big.send(*p.client, p.sn, kLargeResp) == Errc::kOk);
  REQUIRE(
      p.pump_until([&] { return RpcImplTestAccess::bulk_reads_live(impl_of(*p.client)) == 1; }));
  const size_t exposed = net.num_exposures();  // the server's response
  CHECK(p.client->cancel(big.id));
  // When the session's next requests go out meanwhile
  std::vector<std::unique_ptr<Req>> more;
  for (int i = 0; i < 8; i++) {
    more.push_back(std::make_unique<Req>(*p.client, 16));
    REQUIRE(more.back()->send(*p.client, p.sn, kEcho) == Errc::kOk);
  }
  p.pump_for(10ms);
  // Expect: none took the slot whose response is being read, so the server
  // has not withdrawn that response under the read
  CHECK(net.num_exposures() == exposed);
  CHECK(big.runs == 0);
  net.set_hold_bulk(false);
  REQUIRE(p.pump_until([&] {
    return big.runs > 0 &&
           std::all_of(more.begin(), more.end(), [](const auto& r) { return r->runs > 0; });
  }));
  CHECK(big.errc == Errc::kCancelled);
  CHECK(p.client->stats().bulk_reads_failed == 0);
  for (auto& r : more) CHECK(r->errc == Errc::kOk);
  big.release(*p.client);
  for (auto& r : more) r->release(*p.client);
}

TEST_CASE("a client that gives up a slot's requests 64 times in a row unheard resets the session") {
  Pair p;
  FakeNetwork::instance().set_filter([](const FakePacket&) { return FakeVerdict::kDrop; });
  Session& session = *RpcImplTestAccess::session(impl_of(*p.client), p.sn);
  Req r(*p.client, 16);
  // Each slot's first request given up unheard sends the next to another
  // slot (the server may still run its handler); with every slot so
  // marked, they take the slots in turn, until slot 0's 64th.
  const size_t before_reset = kSessionReqWindow * (kMaxReqsGivenUp - 1);
  size_t wrong_slot = 0;
  for (size_t i = 0; i < before_reset; i++) {
    REQUIRE(r.send(*p.client, p.sn, kEcho) == Errc::kOk);  // sent (and lost) at once
    if (session.busy_cslots != uint32_t{1} << (i % kSessionReqWindow)) wrong_slot++;
    REQUIRE(p.client->cancel(r.id));
  }
  CHECK(wrong_slot == 0);
  CHECK(session.unheard_cslots == ~uint32_t{0});
  REQUIRE(p.client->is_connected(p.sn));
  REQUIRE(r.send(*p.client, p.sn, kEcho) == Errc::kOk);
  REQUIRE(p.client->cancel(r.id));
  CHECK(r.runs == static_cast<int>(before_reset + 1));
  REQUIRE_FALSE(p.client->is_connected(p.sn));
  REQUIRE_FALSE(p.client_events.empty());
  CHECK(std::get<1>(p.client_events.back()) == SessionEvent::kReset);
  CHECK(std::get<2>(p.client_events.back()) == SmErr::kRequestTimeout);
  r.release(*p.client);
}

}  // namespace
