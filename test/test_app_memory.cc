// Application memory (issue 30): views of memory the application
// registered travel as requests and responses with no copy by the engine
// (RpcStats::payload_bytes_copied), on the bulk path (fake, samehost) and
// the datagram path (udp); misuse aborts with a message; the application
// learns when the engine lets go of a view.
#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "death_test.h"
#include "test_util.h"
#include "transport/fake/fake_transport.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;
using rpc::detail::FakeNetwork;

namespace {

constexpr ReqType kServePool = 40;    // answers with a view of the server's pool
constexpr ReqType kServePoolBg = 41;  // the same from a background thread
constexpr size_t kMiB = size_t{1} << 20;
constexpr uint64_t kReqSeed = 11;
constexpr uint64_t kRespSeed = 22;

// The server's pool and what its handler saw: a KV server serving GETs
// from its own memory.
struct ServerPool {
  std::vector<uint8_t> bytes;
  AppMemory mem;
  size_t resp_size = 0;
  int runs = 0;
  bool req_ok = false;
  MsgBuffer prepared;  // if valid, the response (made before the request came)
};
ServerPool* g_pool = nullptr;

void serve_from_pool(ReqHandle& h) {
  g_pool->runs++;
  g_pool->req_ok = check_pattern(h.request(), h.request().size(), kReqSeed);
  MsgBuffer resp =
      g_pool->prepared.valid()
          ? g_pool->prepared
          : h.rpc().app_msg_buffer(g_pool->mem, g_pool->bytes.data(), g_pool->resp_size);
  REQUIRE(resp.valid());
  h.rpc().enqueue_response(h, resp);
}

// On a background thread: no Catch2 assertions here.
void serve_from_pool_bg(ReqHandle& h) {
  g_pool->runs++;
  g_pool->req_ok = check_pattern(h.request(), h.request().size(), kReqSeed);
  MsgBuffer resp = h.rpc().app_msg_buffer(g_pool->mem, g_pool->bytes.data(), g_pool->resp_size);
  if (!resp.valid()) {
    h.pre_resp_buffer().resize(0);
    h.rpc().enqueue_response(h, h.pre_resp_buffer());
    return;
  }
  h.rpc().enqueue_response(h, resp);
}

// A client and a server Rpc in this thread, on one Nexus, over `transport`.
struct AppPair {
  Nexus nexus{NexusConfig{.uri = "127.0.0.1:0"}};
  ServerPool pool;
  std::unique_ptr<Rpc> server;
  std::unique_ptr<Rpc> client;
  SessionNum sn = kInvalidSessionNum;

  // bulk_threshold_bytes SIZE_MAX: every message as datagrams.
  explicit AppPair(const std::string& transport, size_t bulk_threshold_bytes = 16384,
                   AppMemoryOptions server_options = {}) {
    if (transport == "fake") FakeNetwork::instance().reset();
    g_pool = &pool;
    REQUIRE(nexus.register_handler(kServePool, serve_from_pool));
    REQUIRE(nexus.register_handler(kServePoolBg, serve_from_pool_bg, HandlerMode::kBackground));
    REQUIRE(nexus.register_handler(kEcho, echo_into_response));
    RpcConfig sc = test_rpc_config({});  // the fabric provider, if the suite names one
    sc.rpc_id = 1;
    sc.transport = transport;
    sc.bulk_threshold_bytes = bulk_threshold_bytes;
    server = std::make_unique<Rpc>(nexus, sc);
    RpcConfig cc = sc;
    cc.rpc_id = 0;
    client = std::make_unique<Rpc>(nexus, cc);
    pool.bytes.resize(2 * kMiB);
    auto mem =
        server->register_memory(pool.bytes.data(), pool.bytes.size(), std::move(server_options));
    REQUIRE(mem);
    pool.mem = *mem;
    auto s = client->create_session(nexus.uri(), 1);
    REQUIRE(s);
    sn = *s;
    REQUIRE(pump_until([&] { return client->is_connected(sn); }));
  }
  ~AppPair() {
    client.reset();
    server.reset();
    g_pool = nullptr;
    FakeNetwork::instance().reset();
  }
  void pump() {
    client->run_event_loop_once();
    server->run_event_loop_once();
  }
  bool pump_until(const std::function<bool()>& done, std::chrono::seconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      pump();
    }
    return true;
  }
  // Fills the server pool's first `size` bytes with the response pattern.
  void set_response(size_t size) {
    pool.resp_size = size;
    MsgBuffer view = server->app_msg_buffer(pool.mem, pool.bytes.data(), size);
    REQUIRE(view.valid());
    fill_pattern(view, kRespSeed);
    server->free_msg_buffer(view);
  }
};

// The client's side of one exchange: its own registered pool, with the
// request in its first half and the response landing in its second.
struct ClientPool {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(4 * kMiB);
  AppMemory mem;
  MsgBuffer req;
  MsgBuffer resp;
  int runs = 0;
  Errc errc = Errc::kOk;
  size_t resp_size = 0;

  ClientPool(Rpc& rpc, size_t req_size, size_t resp_max, AppMemoryOptions options = {}) {
    auto m = rpc.register_memory(bytes.data(), bytes.size(), std::move(options));
    REQUIRE(m);
    mem = *m;
    req = rpc.app_msg_buffer(mem, bytes.data(), req_size);
    resp = rpc.app_msg_buffer(mem, bytes.data() + 2 * kMiB, resp_max);
    REQUIRE(req.valid());
    REQUIRE(resp.valid());
    CHECK(req.is_app_view());
    CHECK(req.data() == bytes.data());
    CHECK(resp.data() == bytes.data() + 2 * kMiB);
    fill_pattern(req, kReqSeed);
  }
  Errc enqueue(Rpc& rpc, SessionNum sn, ReqType type = kServePool) {
    return rpc.enqueue_request(sn, type, req, resp, [this](Rpc&, const Completion& c) {
      runs++;
      errc = c.errc;
      resp_size = c.resp_size;
    });
  }
  void release(Rpc& rpc) {
    rpc.free_msg_buffer(req);
    rpc.free_msg_buffer(resp);
  }
};

// A 1 MiB request from the client's pool, answered with 1 MiB from the
// server's pool into the client's pool; `copied` is what each side's
// engine is expected to have copied.
void exchange_views(const std::string& transport, size_t bulk_threshold_bytes, size_t copied) {
  AppPair p(transport, bulk_threshold_bytes);
  p.set_response(kMiB);
  ClientPool c(*p.client, kMiB, kMiB);
  const uint64_t client_before = p.client->stats().payload_bytes_copied;
  const uint64_t server_before = p.server->stats().payload_bytes_copied;
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  CHECK(p.client->app_memory_in_flight(c.mem) == 2);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }));
  // Expect: every byte arrived, each way, and nothing was copied by the
  // engine on the way unless the transport has no bulk path
  CHECK(c.runs == 1);
  CHECK(c.errc == Errc::kOk);
  CHECK(c.resp_size == kMiB);
  CHECK(p.pool.runs == 1);
  CHECK(p.pool.req_ok);
  CHECK(check_pattern(c.resp, kMiB, kRespSeed));
  CHECK(p.client->stats().payload_bytes_copied - client_before == copied);
  CHECK(p.server->stats().payload_bytes_copied - server_before == copied);
  // The client's views are its own again; the server keeps its response
  // for retransmission until the slot's next request
  CHECK(p.client->app_memory_in_flight(c.mem) == 0);
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 1);
  c.release(*p.client);
  REQUIRE(p.client->deregister_memory(c.mem));
}

}  // namespace

TEST_CASE("a 1 MiB request and response of application memory cross the bulk path uncopied",
          "[app_memory]") {
  for (const char* transport : {"fake", "samehost"}) {
    INFO("transport " << transport);
    exchange_views(transport, 16384, 0);
  }
}

TEST_CASE("a 1 MiB exchange of application memory over the test transport",
          "[any_transport][app_memory]") {
  // Expect: on a transport with a bulk path nothing copied, on one without
  // each side copies what it receives, once
  AppPair p(test_transport());
  p.set_response(kMiB);
  ClientPool c(*p.client, kMiB, kMiB);
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }, 60s));
  CHECK(c.errc == Errc::kOk);
  CHECK(p.pool.req_ok);
  CHECK(check_pattern(c.resp, kMiB, kRespSeed));
  const bool bulk = p.server->stats().bulk_reads > 0;
  INFO("transport " << test_transport() << (bulk ? ", bulk path" : ", datagrams"));
  CHECK(p.server->stats().payload_bytes_copied == (bulk ? 0 : kMiB));
  CHECK(p.client->stats().payload_bytes_copied == (bulk ? 0 : kMiB));
  CHECK(p.client->app_memory_in_flight(c.mem) == 0);
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 1);
  c.release(*p.client);
}

TEST_CASE("views of application memory travel as datagrams on udp, copied only on receipt",
          "[app_memory]") {
  // Given udp (no bulk path): the request is sent from the client's pool
  // and the response from the server's, packet by packet; each receiver
  // assembles what it receives, once
  exchange_views("udp", 16384, kMiB);
  // and the same over fake with its bulk path off
  exchange_views("fake", SIZE_MAX, kMiB);
}

TEST_CASE("the engine's copying path counts the payload it copies", "[app_memory]") {
  for (const char* transport : {"fake", "udp"}) {
    INFO("transport " << transport);
    AppPair p(transport, SIZE_MAX);
    MsgBuffer req = p.client->alloc_msg_buffer(kMiB);
    MsgBuffer resp = p.client->alloc_msg_buffer(kMiB);
    fill_pattern(req, kReqSeed);
    int runs = 0;
    REQUIRE(p.client->enqueue_request(p.sn, kEcho, req, resp,
                                      [&](Rpc&, const Completion&) { runs++; }) == Errc::kOk);
    REQUIRE(p.pump_until([&] { return runs > 0; }));
    CHECK(check_pattern(resp, kMiB, kReqSeed));
    CHECK(p.server->stats().payload_bytes_copied == kMiB);
    CHECK(p.client->stats().payload_bytes_copied == kMiB);
    p.client->free_msg_buffer(req);
    p.client->free_msg_buffer(resp);
  }
}

TEST_CASE("the application learns when the engine lets go of its views", "[app_memory]") {
  std::vector<std::pair<const void*, size_t>> server_released;
  std::vector<std::pair<const void*, size_t>> client_released;
  AppMemoryOptions server_options{
      [&](const void* data, size_t size) { server_released.emplace_back(data, size); }};
  AppPair p("fake", 16384, std::move(server_options));
  p.set_response(kMiB);
  ClientPool c(*p.client, kMiB, kMiB, AppMemoryOptions{[&](const void* data, size_t size) {
    client_released.emplace_back(data, size);
  }});
  // Given a GET served from the server's pool
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }));
  REQUIRE(c.errc == Errc::kOk);
  // Expect: the client's views came back with the continuation; the server
  // still keeps its response (the client may ask for it again)
  CHECK(client_released.size() == 2);
  CHECK(p.client->app_memory_in_flight(c.mem) == 0);
  CHECK(server_released.empty());
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 1);
  // When the client's next request in that slot arrives, the server drops
  // it: from then on the value's bytes may be overwritten
  c.runs = 0;
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }));
  REQUIRE(server_released.size() == 1);
  CHECK(server_released[0].first == p.pool.bytes.data());
  CHECK(server_released[0].second == kMiB);
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 1);  // the second response
  // and when the session ends
  REQUIRE(p.client->destroy_session(p.sn));
  REQUIRE(p.pump_until([&] { return p.server->num_active_sessions() == 0; }));
  CHECK(server_released.size() == 2);
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 0);
  REQUIRE(p.server->deregister_memory(p.pool.mem));
  // A deregistered handle is refused, not deregistered twice
  CHECK_FALSE(p.server->deregister_memory(p.pool.mem));
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 0);
  c.release(*p.client);
}

TEST_CASE("a background handler answers with a view of application memory", "[app_memory]") {
  AppPair p("fake");
  p.set_response(kMiB);
  ClientPool c(*p.client, 1000, kMiB);
  REQUIRE(c.enqueue(*p.client, p.sn, kServePoolBg) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }));
  CHECK(c.errc == Errc::kOk);
  CHECK(p.pool.req_ok);
  CHECK(check_pattern(c.resp, kMiB, kRespSeed));
  // Only the request was copied: a background handler gets its own copy
  CHECK(p.server->stats().payload_bytes_copied == 1000);
  CHECK(p.server->app_memory_in_flight(p.pool.mem) == 1);
  c.release(*p.client);
}

TEST_CASE("a request that fails gives its views back too", "[app_memory]") {
  AppPair p("fake");
  p.set_response(1000);
  ClientPool c(*p.client, 1000, 1000);
  // Given requests waiting in the backlog and in slots when the session ends
  std::vector<std::unique_ptr<ClientPool>> more;
  for (int i = 0; i < 10; i++) {
    more.push_back(std::make_unique<ClientPool>(*p.client, 1000, 1000));
    REQUIRE(more.back()->enqueue(*p.client, p.sn) == Errc::kOk);
  }
  REQUIRE(p.client->destroy_session(p.sn));
  for (auto& m : more) {
    CHECK(m->runs == 1);
    CHECK(m->errc == Errc::kSessionDestroyed);
    CHECK(p.client->app_memory_in_flight(m->mem) == 0);
    m->release(*p.client);
    REQUIRE(p.client->deregister_memory(m->mem));
  }
  c.release(*p.client);
}

TEST_CASE("a view must lie inside live registered memory", "[app_memory]") {
  AppPair p("fake");
  std::vector<uint8_t> other(4096);
  // Expect: registering nothing fails; a view too large for the Rpc is
  // invalid
  CHECK_FALSE(p.client->register_memory(nullptr, 64));
  CHECK_FALSE(p.client->register_memory(other.data(), 0));
  auto mem = p.server->register_memory(other.data(), other.size());
  REQUIRE(mem);
  CHECK(mem->addr() == other.data());
  CHECK(mem->len() == other.size());
  MsgBuffer whole = p.server->app_msg_buffer(*mem, other.data(), other.size());
  CHECK(whole.valid());
  MsgBuffer empty = p.server->app_msg_buffer(*mem, other.data() + other.size(), 0);
  CHECK(empty.valid());
  p.server->free_msg_buffer(whole);
  p.server->free_msg_buffer(empty);
  REQUIRE(p.server->deregister_memory(*mem));
}

// ---------------------------------------------------------------- misuse

TEST_CASE("death: a view outside its registered memory", "[.]") {
  AppPair p("fake");
  (void)p.server->app_msg_buffer(p.pool.mem, p.pool.bytes.data() + kMiB, p.pool.bytes.size());
}

TEST_CASE("death: a view of another Rpc's memory", "[.]") {
  AppPair p("fake");
  (void)p.client->app_msg_buffer(p.pool.mem, p.pool.bytes.data(), 64);
}

TEST_CASE("death: deregistering memory an outstanding request uses", "[.]") {
  AppPair p("fake");
  p.set_response(kMiB);
  ClientPool c(*p.client, kMiB, kMiB);
  // A bulk request: its payload is exposed to the server, whose read is
  // held in flight
  FakeNetwork::instance().set_hold_bulk(true);
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  for (int i = 0; i < 10; i++) p.pump();
  (void)p.client->deregister_memory(c.mem);
}

TEST_CASE("death: deregistering memory whose response the server keeps", "[.]") {
  AppPair p("fake");
  p.set_response(kMiB);
  ClientPool c(*p.client, 100, kMiB);
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  REQUIRE(p.pump_until([&] { return c.runs > 0; }));
  (void)p.server->deregister_memory(p.pool.mem);
}

TEST_CASE("death: a request from a view of deregistered memory", "[.]") {
  AppPair p("fake");
  ClientPool c(*p.client, 100, 100);
  REQUIRE(p.client->deregister_memory(c.mem));
  (void)c.enqueue(*p.client, p.sn);
}

TEST_CASE("death: a response from a view of deregistered memory", "[.]") {
  AppPair p("fake");
  p.set_response(100);
  p.pool.prepared = p.server->app_msg_buffer(p.pool.mem, p.pool.bytes.data(), 100);
  REQUIRE(p.server->deregister_memory(p.pool.mem));
  ClientPool c(*p.client, 100, 100);
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  for (int i = 0; i < 100; i++) p.pump();
}

TEST_CASE("death: a view of deregistered memory", "[.]") {
  AppPair p("fake");
  p.set_response(100);
  REQUIRE(p.server->deregister_memory(p.pool.mem));
  ClientPool c(*p.client, 100, 100);
  REQUIRE(c.enqueue(*p.client, p.sn) == Errc::kOk);
  for (int i = 0; i < 100; i++) p.pump();
}

TEST_CASE("misuse of application memory aborts with a message that says what was wrong",
          "[app_memory]") {
  const std::vector<std::pair<const char*, const char*>> cases{
      {"death: a view outside its registered memory", "outside its registered memory"},
      {"death: a view of another Rpc's memory", "not a live registration of this Rpc"},
      {"death: deregistering memory an outstanding request uses", "still holds 2 view(s)"},
      {"death: deregistering memory whose response the server keeps", "still holds 1 view(s)"},
      {"death: a request from a view of deregistered memory",
       "enqueue_request (request) with a view of application memory that is not registered"},
      {"death: a response from a view of deregistered memory",
       "enqueue_response with a view of application memory that is not registered"},
      {"death: a view of deregistered memory",
       "app_msg_buffer on application memory that is not a live registration"},
  };
  for (const auto& [name, message] : cases) {
    INFO(name);
    const ChildEnd end = run_test_case_in_child(name);
    CHECK(end.aborted());
    CHECK_THAT(end.stderr_text, Catch::Contains(message));
  }
}
