// Integration over the udp transport on 127.0.0.1: real Nexus, real
// sockets, server Rpcs on their own threads (and, once, in another process).
// Cases tagged [any_transport] run over the transport test_transport()
// names; the verbs suite runs them again over RDMA verbs.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

void register_echo(Nexus& nexus) {
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  REQUIRE(nexus.register_handler(kEchoBg, echo_into_response, HandlerMode::kBackground));
}

// One request of `size` bytes on a fresh session; checks every byte back.
void echo_roundtrip(Rpc& client, SessionNum sn, size_t size, uint64_t seed,
                    ReqType req_type = kEcho) {
  OwnedBuffer req(client, size);
  OwnedBuffer resp(client, size);
  REQUIRE(req.valid());
  REQUIRE(resp.valid());
  fill_pattern(req, seed);
  // Multi-megabyte datagram messages take long on a loaded machine.
  const auto timeout = size >= (size_t{1} << 20) ? 60s : 20s;
  const CallResult out = call_sync(client, sn, req_type, req, resp, timeout);
  CHECK(out.errc == Errc::kOk);
  CHECK(out.resp_size == size);
  CHECK(check_pattern(resp, size, seed));
}

// Opens a session from client to rpc_id at uri and waits until connected.
SessionNum connect(Rpc& client, const std::string& uri, RpcId rpc_id) {
  auto sn = client.connect(uri, rpc_id, 20s);
  REQUIRE(sn);
  return *sn;
}

// Sizes that cover zero, one packet, the packet boundary and many packets.
std::vector<size_t> boundary_sizes(const Rpc& rpc, size_t largest) {
  const size_t mtu = rpc.max_data_per_pkt();
  std::vector<size_t> sizes{0, 1, mtu - 1, mtu, mtu + 1, 3 * mtu, size_t{64} << 10};
  if (largest > sizes.back()) sizes.push_back(largest);
  return sizes;
}

// Enqueues every call on the sessions in turn (call i on sessions[i % n]),
// then drives the client until all have completed.
void run_calls(Rpc& client, std::vector<EchoCall>& calls, const std::vector<SessionNum>& sessions,
               ReqType req_type, size_t& done) {
  for (size_t i = 0; i < calls.size(); i++) {
    REQUIRE(calls[i].enqueue(client, sessions[i % sessions.size()], req_type) == Errc::kOk);
  }
  REQUIRE(run_until(client, [&] { return done == calls.size(); }));
}

// "kOk x 195, kSessionReset x 5": what the calls completed with, for a
// failure's message.
std::string completion_summary(const std::vector<EchoCall>& calls) {
  std::map<std::string, size_t> counts;
  for (const EchoCall& c : calls) {
    counts[c.completions == 0 ? std::string("not completed") : std::string(to_string(c.errc))]++;
  }
  std::string out;
  for (const auto& [what, n] : counts)
    out += (out.empty() ? "" : ", ") + what + " x " + std::to_string(n);
  return out;
}

size_t count_echoed(const std::vector<EchoCall>& calls) {
  return static_cast<size_t>(
      std::count_if(calls.begin(), calls.end(), [](const EchoCall& c) { return c.echoed(); }));
}

}  // namespace

TEST_CASE("echo of every size from 0 bytes to 8 MiB arrives byte for byte", "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  ServerThread server(nexus, test_rpc_config({.rpc_id = 1}));
  SessionEvents events;
  Rpc client(nexus, test_rpc_config({.rpc_id = 0, .session_callback = events.callback()}));
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
  CHECK(events.has(*sn, SessionEvent::kConnected));
  CHECK(client.transport_name() == test_transport());

  const size_t mtu_data = client.max_data_per_pkt();
  for (size_t size : {size_t{0}, size_t{1}, mtu_data - 1, mtu_data, mtu_data + 1, size_t{64} << 10,
                      size_t{1} << 20, size_t{8} << 20}) {
    INFO("size " << size);
    echo_roundtrip(client, *sn, size, size);
  }
}

TEST_CASE("a thousand requests in flight on one session all complete with their own data",
          "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  ServerThread server(nexus, test_rpc_config({.rpc_id = 1}));
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  const SessionNum sn = connect(client, nexus.uri(), 1);

  // Far more than the 8-slot window: most wait in the backlog. Every tenth
  // request spans several packets; each carries its own pattern.
  const size_t mtu = client.max_data_per_pkt();
  std::vector<EchoCall> calls(1000);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    const size_t size = i % 10 == 0 ? 2 * mtu + i : (i * 37) % mtu;
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, size, 1000 + i));
  }
  run_calls(client, calls, {sn}, kEcho, done);

  CHECK(count_echoed(calls) == calls.size());
  CHECK(client.stats().requests_completed == calls.size());
  CHECK(client.session_stats(sn)->requests_completed == calls.size());
  run_for(client, 20ms);  // a late duplicate completion would show up here
  CHECK(done == calls.size());
  for (auto& c : calls) c.release(client);
  server.stop();
  CHECK(server.final_stats().handlers_run == calls.size());
}

TEST_CASE("interleaved requests on four sessions to two server threads reach the right servers",
          "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  ServerThread server1(nexus, test_rpc_config({.rpc_id = 1}));
  ServerThread server2(nexus, test_rpc_config({.rpc_id = 2}));
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  // Sessions alternate between the two servers: 1, 2, 1, 2.
  const std::vector<SessionNum> sessions{
      connect(client, nexus.uri(), 1), connect(client, nexus.uri(), 2),
      connect(client, nexus.uri(), 1), connect(client, nexus.uri(), 2)};
  CHECK(client.num_active_sessions() == 4);
  CHECK(wait_until(
      [&] { return server1.num_active_sessions() == 2 && server2.num_active_sessions() == 2; }));

  const size_t mtu = client.max_data_per_pkt();
  std::vector<EchoCall> calls(400);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, (i * 101) % (3 * mtu), 7 * i + 3));
  }
  run_calls(client, calls, sessions, kEcho, done);

  CHECK(count_echoed(calls) == calls.size());
  for (SessionNum sn : sessions) {
    CHECK(client.session_stats(sn)->requests_completed == calls.size() / sessions.size());
  }
  for (auto& c : calls) c.release(client);
  server1.stop();
  server2.stop();
  CHECK(server1.final_stats().handlers_run == calls.size() / 2);
  CHECK(server2.final_stats().handlers_run == calls.size() / 2);
}

TEST_CASE("two Rpcs in two threads each serve the other while calling it", "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);

  struct PeerResult {
    bool connected = false;
    size_t echoed = 0;
    uint64_t handlers_run = 0;
  };
  constexpr size_t kCalls = 200;
  std::atomic<int> created{0};
  std::atomic<int> finished{0};
  PeerResult results[2];

  // No Catch2 assertions on these threads: they record, the test checks.
  auto peer = [&](RpcId self, RpcId other, PeerResult& result) {
    Rpc rpc(nexus, test_rpc_config({.rpc_id = self}));
    created++;
    while (created.load() < 2) std::this_thread::yield();  // the peer must exist
    auto sn = rpc.create_session(nexus.uri(), other);
    std::vector<EchoCall> calls(kCalls);
    size_t done = 0;
    if (sn) {
      // Enqueued before the session is up: they wait for the connect.
      for (size_t i = 0; i < kCalls; i++) {
        calls[i].total_done = &done;
        if (!calls[i].prepare(rpc, (i * 53 + self) % 4000, 100 * self + i) ||
            calls[i].enqueue(rpc, *sn, kEcho) != Errc::kOk) {
          break;
        }
      }
      result.connected = run_until(rpc, [&] { return rpc.is_connected(*sn); });
      run_until(rpc, [&] { return done == kCalls; });
      result.echoed = count_echoed(calls);
    }
    finished++;
    // Keep serving the peer until it is done too.
    run_until(rpc, [&] { return finished.load() == 2; });
    result.handlers_run = rpc.stats().handlers_run;
    for (auto& c : calls) c.release(rpc);
  };
  std::thread a(peer, RpcId{0}, RpcId{1}, std::ref(results[0]));
  std::thread b(peer, RpcId{1}, RpcId{0}, std::ref(results[1]));
  a.join();
  b.join();

  for (const PeerResult& r : results) {
    CHECK(r.connected);
    CHECK(r.echoed == kCalls);
    CHECK(r.handlers_run == kCalls);
  }
}

TEST_CASE("a client echoes through a server running in another process") {
  // Fork first: the parent must have no Nexus threads yet.
  int port_pipe[2];
  int stop_pipe[2];
  REQUIRE(::pipe(port_pipe) == 0);
  REQUIRE(::pipe(stop_pipe) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // Child: no Catch2 here; report through the exit status only.
    ::close(port_pipe[0]);
    ::close(stop_pipe[1]);
    int status = 0;
    try {
      Nexus nexus(local_nexus());
      if (!nexus.register_handler(kEcho, echo_into_response)) ::_exit(3);
      Rpc server(nexus, RpcConfig{.rpc_id = 0});
      const std::string uri = nexus.uri();
      const uint16_t port = static_cast<uint16_t>(std::stoi(uri.substr(uri.rfind(':') + 1)));
      if (::write(port_pipe[1], &port, sizeof(port)) != sizeof(port)) ::_exit(4);
      // Serve until the parent writes (or dies: EOF), or 30 s pass.
      const auto deadline = std::chrono::steady_clock::now() + 30s;
      status = 2;
      for (uint64_t i = 0; std::chrono::steady_clock::now() < deadline; i++) {
        server.run_event_loop_once();
        if (i % 1024 != 0) continue;
        pollfd p{stop_pipe[0], POLLIN, 0};
        if (::poll(&p, 1, 0) > 0) {
          status = 0;
          break;
        }
      }
    } catch (...) {
      status = 5;
    }
    ::_exit(status);
  }
  ::close(port_pipe[1]);
  ::close(stop_pipe[0]);
  // Stops and reaps the child however this test ends.
  struct ChildGuard {
    pid_t pid;
    int stop_fd;
    int port_fd;
    int exit_status = -1;
    void finish() {
      if (stop_fd < 0) return;
      const char byte = 'x';
      (void)!::write(stop_fd, &byte, 1);
      ::close(stop_fd);
      ::close(port_fd);
      stop_fd = -1;
      int status = 0;
      if (::waitpid(pid, &status, 0) == pid && WIFEXITED(status)) {
        exit_status = WEXITSTATUS(status);
      }
    }
    ~ChildGuard() { finish(); }
  } child{pid, stop_pipe[1], port_pipe[0]};

  uint16_t port = 0;
  pollfd p{port_pipe[0], POLLIN, 0};
  REQUIRE(::poll(&p, 1, 20000) == 1);
  REQUIRE(::read(port_pipe[0], &port, sizeof(port)) == sizeof(port));
  REQUIRE(port != 0);
  {
    Nexus nexus(local_nexus());
    Rpc client(nexus, RpcConfig{.rpc_id = 0});
    const SessionNum sn = connect(client, "127.0.0.1:" + std::to_string(port), 0);
    for (size_t size : boundary_sizes(client, size_t{1} << 20)) {
      INFO("size " << size);
      echo_roundtrip(client, sn, size, size + 11);
    }
  }
  child.finish();
  CHECK(child.exit_status == 0);
}

namespace {

// Server A's state for nested requests: its session to server B.
struct NestedContext {
  SessionNum to_b = kInvalidSessionNum;
  std::atomic<bool> connected{false};
};

// One request forwarded by A to B.
struct Forward {
  ReqHandle* handle;
  MsgBuffer req;
  MsgBuffer resp;
};

void respond_with(ReqHandle& h, const uint8_t* data, size_t size) {
  MsgBuffer& pre = h.pre_resp_buffer();
  if (size <= pre.max_size()) {
    std::copy_n(data, size, pre.data());
    pre.resize(size);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  MsgBuffer resp = h.rpc().alloc_msg_buffer(size);
  std::copy_n(data, size, resp.data());
  h.rpc().enqueue_response(h, resp);
}

// Runs on A when B answered: answers the original client with B's response.
void nested_done(Rpc& rpc, const Completion& c) {
  auto* f = static_cast<Forward*>(c.tag);
  // An empty response on failure: the client's size check catches it.
  respond_with(*f->handle, f->resp.data(), c.errc == Errc::kOk ? c.resp_size : 0);
  rpc.free_msg_buffer(f->req);
  rpc.free_msg_buffer(f->resp);
  delete f;
}

// On A: forwards the request to B and returns without responding.
void nested_handler(ReqHandle& h) {
  auto* ctx = static_cast<NestedContext*>(h.context());
  Rpc& rpc = h.rpc();
  const size_t size = h.request().size();
  auto* f = new Forward{&h, rpc.alloc_msg_buffer(size), rpc.alloc_msg_buffer(size)};
  // The request may be a view into the RX ring: copy it out.
  std::copy_n(h.request().data(), size, f->req.data());
  if (rpc.enqueue_request(ctx->to_b, kEcho, f->req, f->resp, nested_done, f) != Errc::kOk) {
    nested_done(rpc, Completion{Errc::kInvalidSession, &f->resp, 0, f});
  }
}

}  // namespace

TEST_CASE("a nested request is forwarded to a second server and answered with its response",
          "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  REQUIRE(nexus.register_handler(kNested, nested_handler));
  ServerThread server_b(nexus, test_rpc_config({.rpc_id = 2}));
  NestedContext ctx;
  const std::string uri = nexus.uri();
  ServerThread server_a(nexus, test_rpc_config({.rpc_id = 1, .context = &ctx}),
                        ServerHooks{.on_start = [&ctx, uri](Rpc& rpc) {
                          auto sn = rpc.create_session(uri, 2);
                          if (!sn) return;
                          ctx.to_b = *sn;
                          ctx.connected = run_until(rpc, [&] { return rpc.is_connected(*sn); });
                        }});
  REQUIRE(ctx.connected.load());
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  const SessionNum sn = connect(client, uri, 1);

  // One at a time, across packet boundaries.
  const std::vector<size_t> sizes = boundary_sizes(client, size_t{1} << 20);
  for (size_t size : sizes) {
    INFO("size " << size);
    echo_roundtrip(client, sn, size, size + 5, kNested);
  }
  // Many at once: A holds several deferred handles while B works.
  std::vector<EchoCall> calls(64);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, (i * 997) % 5000, 31 * i + 1));
  }
  run_calls(client, calls, {sn}, kNested, done);
  CHECK(count_echoed(calls) == calls.size());
  for (auto& c : calls) c.release(client);

  // Every request went through both servers: A's handler and B's echo.
  const uint64_t total = sizes.size() + calls.size();
  CHECK(wait_until([&] { return server_a.handlers_run() == total; }));
  CHECK(wait_until([&] { return server_b.handlers_run() == total; }));
}

namespace {

// A server that answers kEchoDeferred from later event-loop iterations.
struct DeferredServer {
  struct Pending {
    ReqHandle* handle;
    std::vector<uint8_t> data;  // copied: a zero-copy request dies with its handler
    uint64_t due_iteration;
  };
  std::vector<Pending> pending;  // server thread only
  uint64_t iteration = 0;
  uint64_t handled = 0;
  std::atomic<bool> release{true};  // when false, responses are held back
  std::atomic<uint64_t> handler_calls{0};
  std::atomic<uint64_t> responded_in_handler{0};
  std::atomic<uint64_t> responded_later{0};

  static void handler(ReqHandle& h) {
    auto* self = static_cast<DeferredServer*>(h.context());
    const MsgBuffer& req = h.request();
    // Spread the delays so responses leave out of order.
    const uint64_t delay = 1 + (self->handled++ * 7) % 13;
    self->pending.push_back(
        Pending{&h, {req.data(), req.data() + req.size()}, self->iteration + delay});
    self->handler_calls++;
  }

  void on_iteration(Rpc&) {
    iteration++;
    if (!release.load(std::memory_order_relaxed)) return;
    for (size_t i = 0; i < pending.size();) {
      if (pending[i].due_iteration > iteration) {
        i++;
        continue;
      }
      Pending p = std::move(pending[i]);
      pending.erase(pending.begin() + static_cast<ptrdiff_t>(i));
      respond_with(*p.handle, p.data.data(), p.data.size());
      responded_later++;
    }
  }

  ServerHooks hooks() {
    return ServerHooks{.on_iteration = [this](Rpc& rpc) { on_iteration(rpc); }};
  }
};

}  // namespace

TEST_CASE("a handler may respond from a later event-loop iteration", "[any_transport]") {
  Nexus nexus(local_nexus());
  REQUIRE(nexus.register_handler(kEchoDeferred, DeferredServer::handler));
  DeferredServer deferred;
  ServerThread server(nexus, test_rpc_config({.rpc_id = 1, .context = &deferred}),
                      deferred.hooks());
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  const SessionNum sn = connect(client, nexus.uri(), 1);

  for (size_t size : boundary_sizes(client, size_t{1} << 20)) {
    INFO("size " << size);
    echo_roundtrip(client, sn, size, size + 3, kEchoDeferred);
  }
  std::vector<EchoCall> calls(100);
  size_t done = 0;
  const size_t mtu = client.max_data_per_pkt();
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, (i * 211) % (2 * mtu), 5 * i + 2));
  }
  run_calls(client, calls, {sn}, kEchoDeferred, done);
  CHECK(count_echoed(calls) == calls.size());
  for (auto& c : calls) c.release(client);

  server.stop();
  // Every response was sent by the loop hook, none by a handler.
  CHECK(deferred.handler_calls.load() == deferred.responded_later.load());
  CHECK(deferred.handler_calls.load() == boundary_sizes(client, size_t{1} << 20).size() + 100);
}

TEST_CASE("background handlers echo small and multi-packet requests", "[any_transport]") {
  Nexus nexus(NexusConfig{.uri = "127.0.0.1:0", .num_bg_threads = 2});
  std::atomic<uint64_t> calls_in_background{0};
  std::atomic<uint64_t> calls_in_foreground{0};
  std::atomic<uint64_t> calls_on_server_thread{0};
  std::atomic<std::thread::id> server_thread_id{};
  REQUIRE(nexus.register_handler(
      kEchoBg,
      [&](ReqHandle& h) {
        (h.is_background() ? calls_in_background : calls_in_foreground)++;
        if (std::this_thread::get_id() == server_thread_id.load()) calls_on_server_thread++;
        echo_into_response(h);
      },
      HandlerMode::kBackground));
  ServerThread server(nexus, test_rpc_config({.rpc_id = 1}), ServerHooks{.on_start = [&](Rpc&) {
                        server_thread_id.store(std::this_thread::get_id());
                      }});
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  const SessionNum sn = connect(client, nexus.uri(), 1);

  const std::vector<size_t> sizes = boundary_sizes(client, size_t{1} << 20);
  for (size_t size : sizes) {
    INFO("size " << size);
    echo_roundtrip(client, sn, size, size + 9, kEchoBg);
  }
  std::vector<EchoCall> calls(64);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, (i * 389) % 6000, 13 * i));
  }
  run_calls(client, calls, {sn}, kEchoBg, done);
  CHECK(count_echoed(calls) == calls.size());
  for (auto& c : calls) c.release(client);

  CHECK(calls_in_background.load() == sizes.size() + calls.size());
  CHECK(calls_in_foreground.load() == 0);
  CHECK(calls_on_server_thread.load() == 0);
}

TEST_CASE("with 10% of packets dropped every request completes once with correct data",
          "[any_transport]") {
  Nexus nexus(local_nexus());
  std::atomic<uint64_t> handler_runs{0};
  constexpr ReqType kCountedEcho = 5;
  REQUIRE(nexus.register_handler(kCountedEcho, [&](ReqHandle& h) {
    handler_runs++;
    echo_into_response(h);
  }));
  ServerThread server(nexus,
                      test_rpc_config({.rpc_id = 1, .rto_us = 2000, .drop_tx_fraction = 0.1}));
  Rpc client(nexus, test_rpc_config({.rpc_id = 0, .rto_us = 2000, .drop_tx_fraction = 0.1}));
  const SessionNum sn = connect(client, nexus.uri(), 1);

  // Mixed sizes from 0 B to 64 KiB, single- and multi-packet.
  std::vector<EchoCall> calls(200);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    size_t size = 0;
    switch (i % 4) {
      case 0:
        size = i % 3;
        break;
      case 1:
        size = (i * 13) % 1400;
        break;
      case 2:
        size = 1500 + (i * 131) % 8000;
        break;
      default:
        size = i % 8 == 3 ? (size_t{64} << 10) : (i * 1009) % (size_t{64} << 10);
        break;
    }
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, size, 17 * i + 5));
  }
  run_calls(client, calls, {sn}, kCountedEcho, done);
  INFO("completions: " << completion_summary(calls) << "; sessions reset "
                       << client.stats().sessions_reset);
  CHECK(count_echoed(calls) == calls.size());
  run_for(client, 20ms);
  CHECK(done == calls.size());
  for (auto& c : calls) c.release(client);

  CHECK(handler_runs.load() == calls.size());
  CHECK(client.stats().tx_dropped_injected > 0);
  CHECK(client.stats().retransmissions > 0);
  server.stop();
  CHECK(server.final_stats().tx_dropped_injected > 0);
  CHECK(server.final_stats().handlers_run == calls.size());
  // Lost responses were answered from the server's cache, not by the handler.
  CHECK(server.final_stats().duplicate_requests > 0);
}

TEST_CASE("requests fail with a clear error code instead of misbehaving", "[any_transport]") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  ServerThread server(nexus, test_rpc_config({.rpc_id = 1}));
  Rpc client(nexus, test_rpc_config({.rpc_id = 0}));
  const SessionNum sn = connect(client, nexus.uri(), 1);
  const size_t mtu = client.max_data_per_pkt();

  SECTION("a response larger than the response buffer completes with kRespBufferTooSmall") {
    for (size_t size : {size_t{100}, 3 * mtu}) {
      INFO("size " << size);
      EchoCall call;
      REQUIRE(call.prepare(client, size, 1, size - 1));
      REQUIRE(call.enqueue(client, sn, kEcho) == Errc::kOk);
      REQUIRE(run_until(client, [&] { return call.completions > 0; }));
      CHECK(call.errc == Errc::kRespBufferTooSmall);
      CHECK(call.resp_size == 0);
      run_for(client, 10ms);
      CHECK(call.completions == 1);
      call.release(client);
    }
    // The session still works afterwards.
    echo_roundtrip(client, sn, 3 * mtu, 77);
  }
  SECTION("a request type without a handler completes with kNoHandler") {
    EchoCall call;
    REQUIRE(call.prepare(client, 10, 2));
    REQUIRE(call.enqueue(client, sn, ReqType{200}) == Errc::kOk);
    REQUIRE(run_until(client, [&] { return call.completions > 0; }));
    CHECK(call.errc == Errc::kNoHandler);
    CHECK(call.resp_size == 0);
    call.release(client);
    echo_roundtrip(client, sn, 10, 78);
  }
  SECTION("a request on an unknown session is refused with kInvalidSession") {
    EchoCall call;
    REQUIRE(call.prepare(client, 10, 3));
    CHECK(call.enqueue(client, SessionNum{999}, kEcho) == Errc::kInvalidSession);
    CHECK(call.enqueue(client, kInvalidSessionNum, kEcho) == Errc::kInvalidSession);
    run_for(client, 10ms);
    CHECK(call.completions == 0);  // a refused request never completes
    call.release(client);
  }
  SECTION("no buffer larger than max_msg_size() can be allocated") {
    MsgBuffer too_big = client.alloc_msg_buffer(client.max_msg_size() + 1);
    CHECK_FALSE(too_big.valid());
    MsgBuffer largest = client.alloc_msg_buffer(client.max_msg_size());
    CHECK(largest.valid());
    CHECK(largest.max_size() == client.max_msg_size());
    client.free_msg_buffer(largest);
    CHECK_FALSE(largest.valid());
  }
}

TEST_CASE("over samehost no session is paced, and the RTO has a high floor") {
  // Given congestion control asked for, over a transport with no network
  Nexus nexus(local_nexus());
  register_echo(nexus);
  RpcConfig server_config{.rpc_id = 1, .transport = "samehost"};
  ServerThread server(nexus, server_config);
  Rpc client(nexus, {.rpc_id = 0, .transport = "samehost", .congestion_control = true});
  const SessionNum sn = connect(client, nexus.uri(), 1);
  // When a window's worth of requests streams for a while
  std::vector<EchoCall> calls(2000);
  size_t done = 0;
  for (size_t i = 0; i < calls.size(); i++) {
    calls[i].total_done = &done;
    REQUIRE(calls[i].prepare(client, 32, i));
  }
  run_calls(client, calls, {sn}, kEcho, done);
  // Expect every request served, and no rate kept for the session at all
  // (cc_rate_mbps is Timely's rate, 10000 Mbit/s when uncongested)
  CHECK(count_echoed(calls) == calls.size());
  CHECK(client.session_stats(sn)->cc_rate_mbps == 0);
  CHECK(client.session_stats(sn)->cc_paced_pkts == 0);
  // and a retransmission timeout far above rto_us: nothing is lost over
  // shared memory, so a timeout there is a descheduled peer
  CHECK(client.session_stats(sn)->rto_us >= 50'000);
  for (auto& c : calls) c.release(client);
  server.stop();
}
