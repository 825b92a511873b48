// netns_peer: the server and the client of the network-fault tests
// (test/netns/run_netns_tests.sh), run in two network namespaces joined by
// a faulty link. Uses only the public API and links the shared library.
//
//   netns_peer server --uri IP:PORT [--failure-timeout-ms N] [--max-seconds S]
//   netns_peer client --server IP:PORT --uri IP:0 --requests N
//                     [--sizes 0,1,1000,1500,5000,70000] [--window W] [--rto-us N]
//                     [--failure-timeout-ms N] [--duration-ms D] [--timeout-s S]
//                     [--expect-reset | --allow-reset]
//
// A request is an 8-byte little-endian request id followed by `size` bytes
// of a pattern derived from the id; the server checks the pattern, counts
// how often its handler ran for each id, and echoes the `size` payload bytes
// (so responses are exactly 0, 1, 1000, ... bytes). The client checks every
// byte of every response.
//
// Server: prints "listening on URI" when ready; on SIGTERM/SIGINT (or after
// --max-seconds) prints
//   handler_runs=N distinct_requests=M duplicates=D
//   server_stats bad_data=B ...
// and exits 0. duplicates counts the ids whose handler ran more than once.
//
// Client, normal mode: connects (retrying until --timeout-s), sends
// requests 0..N-1 with sizes in turn, at most --window outstanding, spread
// over --duration-ms when given (so a stream is in flight when the link is
// cut), then prints
//   completed=N ok=K reset=R bad_data=B
//   client_stats ...
// and exits 0 only when every request completed kOk with correct data and
// the session was never reset.
//
// Client, --expect-reset: phase 1 streams requests (paced by --duration-ms
// as N per duration) until the session is reset because the link went
// down; every outstanding request must complete with kSessionReset, with
// the callback reporting kReset. Phase 2 reconnects, retrying until the link
// is back (or --timeout-s). Phase 3 sends N more requests, which must all
// succeed. Exits 0 only when all of that held and no response was wrong.
//
// Client, --allow-reset: like normal mode, but a reset is allowed: the
// requests in flight then complete with kSessionReset (they are not sent
// again) and the rest go on a new session. Exits 0 when every request
// completed either kOk with correct data or kSessionReset.
//
// All modes print "streaming" once responses flow, so a script knows when to cut
// the link.
#include <signal.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "librpc/rpc_all.h"

#include "cli.h"  // tools/measure: exit statuses and integer conventions

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr rpc::ReqType kEchoReqType = 7;
constexpr size_t kIdBytes = 8;
// Responses that flowed before "streaming" is printed.
constexpr uint64_t kStreamingMark = 20;

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// ------------------------------------------------------------- payloads

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Byte i of request id's payload: differs between ids and between positions.
uint8_t pattern_byte(uint64_t id_hash, size_t i) {
  return static_cast<uint8_t>((id_hash >> ((i & 7) * 8)) + i * 131 + (i >> 8));
}

void fill_payload(uint8_t* p, size_t size, uint64_t id) {
  const uint64_t h = mix64(id);
  for (size_t i = 0; i < size; i++) p[i] = pattern_byte(h, i);
}

bool check_payload(const uint8_t* p, size_t size, uint64_t id) {
  const uint64_t h = mix64(id);
  for (size_t i = 0; i < size; i++) {
    if (p[i] != pattern_byte(h, i)) return false;
  }
  return true;
}

void store_id(uint8_t* p, uint64_t id) {
  for (size_t i = 0; i < kIdBytes; i++) p[i] = static_cast<uint8_t>(id >> (8 * i));
}

uint64_t load_id(const uint8_t* p) {
  uint64_t id = 0;
  for (size_t i = 0; i < kIdBytes; i++) id |= uint64_t{p[i]} << (8 * i);
  return id;
}

// ------------------------------------------------------------- options

struct ServerOptions {
  std::string uri;
  uint64_t failure_timeout_ms = 1000;
  uint64_t max_seconds = 300;
};

struct ClientOptions {
  std::string server;
  std::string uri;
  uint64_t requests = 0;
  std::vector<size_t> sizes{0, 1, 1000, 1500, 5000, 70000};
  uint64_t window = 8;
  uint64_t rto_us = 5000;
  uint64_t failure_timeout_ms = 1000;
  uint64_t duration_ms = 0;
  uint64_t timeout_s = 60;
  bool expect_reset = false;
  bool allow_reset = false;  // ignored with expect_reset
};

rpc::NexusConfig nexus_config(const std::string& uri, uint32_t failure_timeout_ms) {
  // Heartbeats often enough that a few losses never look like a failure.
  const uint32_t hb = std::clamp<uint32_t>(failure_timeout_ms / 5, 10, 100);
  return rpc::NexusConfig{
      .uri = uri, .heartbeat_interval_ms = hb, .failure_timeout_ms = failure_timeout_ms};
}

// ------------------------------------------------------------- server

struct ServerState {
  std::unordered_map<uint64_t, uint32_t> runs;  // handler executions by request id
  uint64_t handler_runs = 0;
  uint64_t bad_data = 0;  // requests whose id or payload was wrong
};

void handle_echo(rpc::ReqHandle& h) {
  auto& st = *static_cast<ServerState*>(h.context());
  st.handler_runs++;
  const rpc::MsgBuffer& req = h.request();
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  if (req.size() < kIdBytes) {
    st.bad_data++;
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  const uint64_t id = load_id(req.data());
  st.runs[id]++;
  const size_t size = req.size() - kIdBytes;
  if (!check_payload(req.data() + kIdBytes, size, id)) st.bad_data++;
  // Echo what arrived, so the client's check covers both directions.
  if (size <= pre.max_size()) {
    std::memcpy(pre.data(), req.data() + kIdBytes, size);
    pre.resize(size);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer resp = h.rpc().alloc_msg_buffer(size);
  if (!resp.valid()) {  // out of memory: an empty response fails the client's check
    st.bad_data++;
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  std::memcpy(resp.data(), req.data() + kIdBytes, size);
  h.rpc().enqueue_response(h, resp);
}

int run_server(const ServerOptions& o) {
  const auto failure_timeout = static_cast<uint32_t>(o.failure_timeout_ms);
  const uint64_t max_seconds = o.max_seconds;
  ServerState st;
  try {
    rpc::Nexus nexus(nexus_config(o.uri, failure_timeout));
    if (auto ok = nexus.register_handler(kEchoReqType, handle_echo); !ok) {
      std::fprintf(stderr, "netns_peer server: %s\n", ok.error().c_str());
      return 1;
    }
    rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0, .context = &st});
    std::printf("listening on %s\n", nexus.uri().c_str());
    const auto end = Clock::now() + std::chrono::seconds(max_seconds);
    while (!g_stop.load(std::memory_order_relaxed) && Clock::now() < end) {
      rpc.run_event_loop(10ms);
    }
    uint64_t duplicates = 0;
    for (const auto& [id, n] : st.runs) duplicates += n > 1 ? 1 : 0;
    std::printf("handler_runs=%llu distinct_requests=%zu duplicates=%llu\n",
                static_cast<unsigned long long>(st.handler_runs), st.runs.size(),
                static_cast<unsigned long long>(duplicates));
    const rpc::RpcStats& s = rpc.stats();
    std::printf(
        "server_stats bad_data=%llu dup_answered=%llu rx_pkts=%llu tx_pkts=%llu "
        "sessions_created=%llu sessions_reset=%llu active_sessions=%zu drops_stale=%llu "
        "drops_out_of_order=%llu "
        "drops_busy=%llu drops_bad_header=%llu drops_bad_magic=%llu drops_unknown_session=%llu\n",
        static_cast<unsigned long long>(st.bad_data),
        static_cast<unsigned long long>(s.duplicate_requests),
        static_cast<unsigned long long>(s.rx_pkts), static_cast<unsigned long long>(s.tx_pkts),
        static_cast<unsigned long long>(s.sessions_created),
        static_cast<unsigned long long>(s.sessions_reset), rpc.num_active_sessions(),
        static_cast<unsigned long long>(s.drops.stale),
        static_cast<unsigned long long>(s.drops.out_of_order),
        static_cast<unsigned long long>(s.drops.busy),
        static_cast<unsigned long long>(s.drops.bad_header),
        static_cast<unsigned long long>(s.drops.bad_magic),
        static_cast<unsigned long long>(s.drops.unknown_session));
    std::fflush(stdout);
  } catch (const rpc::Error& e) {
    std::fprintf(stderr, "netns_peer server: %s\n", e.what());
    return 1;
  }
  return 0;
}

// ------------------------------------------------------------- client

struct Client;

struct Call {
  Client* client = nullptr;
  rpc::MsgBuffer req;
  rpc::MsgBuffer resp;
  uint64_t id = 0;
  size_t size = 0;
  bool busy = false;
};

struct Client {
  std::vector<size_t> sizes;
  std::vector<Call> calls;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  uint64_t ok = 0;
  uint64_t reset = 0;
  uint64_t bad_data = 0;
  uint64_t other_errors = 0;
  std::string first_error;
  size_t in_flight = 0;
  // Session events of the current session.
  rpc::SessionNum sn = rpc::kInvalidSessionNum;
  bool connected = false;
  bool connect_failed = false;
  bool reset_event = false;
  bool disconnected = false;
  rpc::SmErr last_reason = rpc::SmErr::kNone;
  uint64_t reset_events = 0;

  void on_session_event(rpc::SessionNum s, rpc::SessionEvent e, rpc::SmErr err) {
    if (s != sn) return;
    last_reason = err;
    switch (e) {
      case rpc::SessionEvent::kConnected:
        connected = true;
        break;
      case rpc::SessionEvent::kConnectFailed:
        connect_failed = true;
        break;
      case rpc::SessionEvent::kReset:
        reset_event = true;
        connected = false;
        reset_events++;
        break;
      case rpc::SessionEvent::kDisconnected:
        disconnected = true;
        connected = false;
        break;
    }
  }

  static void on_done(rpc::Rpc&, const rpc::Completion& c) {
    Call& call = *static_cast<Call*>(c.tag);
    Client& cl = *call.client;
    call.busy = false;
    cl.in_flight--;
    cl.completed++;
    if (c.errc == rpc::Errc::kOk) {
      if (c.resp_size == call.size && call.resp.size() == call.size &&
          check_payload(call.resp.data(), call.size, call.id)) {
        cl.ok++;
      } else {
        cl.bad_data++;
      }
    } else if (c.errc == rpc::Errc::kSessionReset) {
      cl.reset++;
    } else {
      cl.other_errors++;
      if (cl.first_error.empty()) cl.first_error = std::string(rpc::to_string(c.errc));
    }
  }

  // Sends request `id` on a free call; false when none is free or the Rpc
  // refused it.
  bool send(rpc::Rpc& rpc, uint64_t id) {
    for (Call& call : calls) {
      if (call.busy) continue;
      call.id = id;
      call.size = sizes[id % sizes.size()];
      call.req.resize(kIdBytes + call.size);
      store_id(call.req.data(), id);
      fill_payload(call.req.data() + kIdBytes, call.size, id);
      call.resp.resize(call.resp.max_size());
      const rpc::Errc e =
          rpc.enqueue_request(sn, kEchoReqType, call.req, call.resp, on_done, &call);
      if (e != rpc::Errc::kOk) {
        other_errors++;
        if (first_error.empty()) first_error = "enqueue: " + std::string(rpc::to_string(e));
        return false;
      }
      call.busy = true;
      in_flight++;
      enqueued++;
      return true;
    }
    return false;
  }
};

template <typename Done>
bool drive_until(rpc::Rpc& rpc, Done&& done, Clock::time_point deadline) {
  while (!done()) {
    if (g_stop.load(std::memory_order_relaxed) || Clock::now() > deadline) return false;
    rpc.run_event_loop_once();
  }
  return true;
}

// Opens a session, retrying failed connects (the link may be down) until
// the deadline. Returns the number of attempts, 0 on failure.
uint64_t connect_with_retry(rpc::Rpc& rpc, Client& cl, const std::string& server,
                            Clock::time_point deadline) {
  for (uint64_t attempt = 1; Clock::now() < deadline && !g_stop.load(); attempt++) {
    auto sn = rpc.create_session(server, 0);
    if (!sn) {
      std::fprintf(stderr, "netns_peer client: create_session: %s\n", sn.error().c_str());
      return 0;
    }
    cl.sn = *sn;
    cl.connected = cl.connect_failed = cl.reset_event = cl.disconnected = false;
    drive_until(
        rpc, [&] { return cl.connected || cl.connect_failed; }, deadline);
    if (cl.connected) return attempt;
    if (!cl.connect_failed) return 0;  // deadline or signal while connecting
    // The link is down: the SM layer already waited its timeout; try again.
    const auto pause_end = Clock::now() + 50ms;
    drive_until(
        rpc, [] { return false; }, std::min(pause_end, deadline));
  }
  return 0;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

int run_client(const ClientOptions& o) {
  const uint64_t n = o.requests;
  const size_t window = std::max<uint64_t>(1, o.window);
  const uint64_t rto_us = o.rto_us;
  const auto failure_timeout = static_cast<uint32_t>(o.failure_timeout_ms);
  const uint64_t duration_ms = o.duration_ms;
  const uint64_t timeout_s = o.timeout_s;
  const bool expect_reset = o.expect_reset;
  const bool allow_reset = o.allow_reset && !expect_reset;
  const std::string& server = o.server;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(timeout_s);

  Client cl;
  cl.sizes = o.sizes;
  uint64_t attempts = 0;
  uint64_t reconnect_attempts = 0;
  double reconnect_ms = 0;
  uint64_t phase3_ok = 0;
  bool phases_ok = true;
  std::string why;
  rpc::RpcStats stats;
  try {
    rpc::Nexus nexus(nexus_config(o.uri, failure_timeout));
    rpc::Rpc rpc(
        nexus, rpc::RpcConfig{
                   .rpc_id = 0,
                   .rto_us = rto_us,
                   .session_callback = [&cl](rpc::SessionNum s, rpc::SessionEvent e,
                                             rpc::SmErr err) { cl.on_session_event(s, e, err); }});
    const size_t max_size = *std::max_element(cl.sizes.begin(), cl.sizes.end());
    if (kIdBytes + max_size > rpc.max_msg_size()) {
      std::fprintf(stderr, "netns_peer client: size %zu exceeds max_msg_size %zu\n", max_size,
                   rpc.max_msg_size());
      return 2;
    }
    cl.calls.resize(window);
    for (Call& call : cl.calls) {
      call.client = &cl;
      call.req = rpc.alloc_msg_buffer(kIdBytes + max_size);
      call.resp = rpc.alloc_msg_buffer(max_size);
      if (!call.req.valid() || !call.resp.valid()) {
        std::fprintf(stderr, "netns_peer client: cannot allocate buffers\n");
        return 1;
      }
    }

    attempts = connect_with_retry(rpc, cl, server, deadline);
    if (attempts == 0) {
      std::fprintf(stderr, "netns_peer client: could not connect to %s\n", server.c_str());
      return 1;
    }
    std::printf("connected to %s (%llu attempts)\n", server.c_str(),
                static_cast<unsigned long long>(attempts));

    bool streaming_printed = false;
    auto mark_streaming = [&] {
      if (!streaming_printed && cl.ok >= kStreamingMark) {
        std::printf("streaming\n");
        std::fflush(stdout);
        streaming_printed = true;
      }
    };
    // Request i is due `duration_ms * i / n` after the stream starts.
    auto due = [&](Clock::time_point t0, uint64_t i) {
      return t0 + std::chrono::microseconds(duration_ms * 1000 * i / n);
    };

    if (!expect_reset) {
      const auto t0 = Clock::now();
      uint64_t next = 0;
      while (cl.completed < n) {
        if (g_stop.load() || Clock::now() > deadline) break;
        if (cl.reset_event) {
          if (!allow_reset) break;
          // The requests in flight failed with kSessionReset; the rest go
          // on a new session.
          const auto r0 = Clock::now();
          reconnect_attempts = connect_with_retry(rpc, cl, server, deadline);
          reconnect_ms = ms_since(r0);
          if (reconnect_attempts == 0) break;
          std::printf("reconnected after %.0f ms (%llu attempts)\n", reconnect_ms,
                      static_cast<unsigned long long>(reconnect_attempts));
          continue;
        }
        const auto now = Clock::now();
        while (next < n && cl.in_flight < window && due(t0, next) <= now) {
          if (!cl.send(rpc, next)) break;
          next++;
        }
        if (cl.other_errors > 0) break;
        rpc.run_event_loop_once();
        mark_streaming();
      }
      if (cl.completed < n) {
        phases_ok = false;
        why = cl.reset_event ? (allow_reset ? "could not reconnect after a reset" : "session reset")
                             : "deadline passed with requests outstanding";
      }
    } else {
      // Phase 1: stream until the link goes away and the session resets.
      const auto t0 = Clock::now();
      uint64_t next = 0;
      while (!cl.reset_event) {
        if (g_stop.load() || Clock::now() > deadline) break;
        const auto now = Clock::now();
        while (cl.in_flight < window && due(t0, next) <= now) {
          if (!cl.send(rpc, next)) break;
          next++;
        }
        if (cl.other_errors > 0) break;
        rpc.run_event_loop_once();
        mark_streaming();
      }
      std::printf("phase1 enqueued=%llu ok=%llu reset=%llu in_flight=%zu reason=%s\n",
                  static_cast<unsigned long long>(cl.enqueued),
                  static_cast<unsigned long long>(cl.ok), static_cast<unsigned long long>(cl.reset),
                  cl.in_flight, std::string(rpc::to_string(cl.last_reason)).c_str());
      if (!cl.reset_event) {
        phases_ok = false;
        why = "no session reset before the deadline";
      } else if (cl.in_flight != 0 || cl.completed != cl.enqueued) {
        phases_ok = false;
        why = "requests still outstanding after the reset";
      } else if (cl.reset == 0) {
        phases_ok = false;
        why = "no request completed with kSessionReset";
      } else if (cl.last_reason != rpc::SmErr::kRemoteFailed) {
        phases_ok = false;
        why = "reset reason is not kRemoteFailed";
      }
      if (phases_ok) {
        // Phase 2: reconnect once the link is back.
        const auto r0 = Clock::now();
        reconnect_attempts = connect_with_retry(rpc, cl, server, deadline);
        reconnect_ms = ms_since(r0);
        if (reconnect_attempts == 0) {
          phases_ok = false;
          why = "could not reconnect before the deadline";
        } else {
          std::printf("reconnected after %.0f ms (%llu attempts)\n", reconnect_ms,
                      static_cast<unsigned long long>(reconnect_attempts));
          // Phase 3: n requests on the new session, all must succeed.
          const uint64_t ok_before = cl.ok;
          const uint64_t first = next;
          const uint64_t completed_before = cl.completed;
          while (cl.completed - completed_before < n && !cl.reset_event) {
            if (g_stop.load() || Clock::now() > deadline) break;
            while (next < first + n && cl.in_flight < window) {
              if (!cl.send(rpc, next)) break;
              next++;
            }
            if (cl.other_errors > 0) break;
            rpc.run_event_loop_once();
          }
          phase3_ok = cl.ok - ok_before;
          if (phase3_ok != n) {
            phases_ok = false;
            why = "requests on the new session did not all succeed";
          }
        }
      }
    }

    // Leave politely so the server frees its end now (best effort).
    if (cl.connected && cl.in_flight == 0) {
      if (rpc.destroy_session(cl.sn)) {
        drive_until(
            rpc, [&] { return cl.disconnected; }, std::min(deadline + 3s, Clock::now() + 3s));
      }
    }
    stats = rpc.stats();
    // Outstanding requests (only on failure) complete in ~Rpc; the buffers
    // must outlive it, so they are freed with the process.
  } catch (const rpc::Error& e) {
    std::fprintf(stderr, "netns_peer client: %s\n", e.what());
    return 1;
  }

  std::printf("completed=%llu ok=%llu reset=%llu bad_data=%llu\n",
              static_cast<unsigned long long>(cl.completed), static_cast<unsigned long long>(cl.ok),
              static_cast<unsigned long long>(cl.reset),
              static_cast<unsigned long long>(cl.bad_data));
  std::printf(
      "client_stats enqueued=%llu other_errors=%llu retransmissions=%llu tx_pkts=%llu "
      "rx_pkts=%llu drops_stale=%llu drops_out_of_order=%llu reset_events=%llu "
      "connect_attempts=%llu reconnect_attempts=%llu reconnect_ms=%.0f elapsed_ms=%.0f\n",
      static_cast<unsigned long long>(cl.enqueued),
      static_cast<unsigned long long>(cl.other_errors),
      static_cast<unsigned long long>(stats.retransmissions),
      static_cast<unsigned long long>(stats.tx_pkts),
      static_cast<unsigned long long>(stats.rx_pkts),
      static_cast<unsigned long long>(stats.drops.stale),
      static_cast<unsigned long long>(stats.drops.out_of_order),
      static_cast<unsigned long long>(cl.reset_events), static_cast<unsigned long long>(attempts),
      static_cast<unsigned long long>(reconnect_attempts), reconnect_ms, ms_since(start));

  bool pass = phases_ok && cl.bad_data == 0 && cl.other_errors == 0;
  if (allow_reset) {
    pass = pass && cl.completed == n && cl.ok + cl.reset == n;
  } else if (!expect_reset) {
    pass = pass && cl.completed == n && cl.ok == n && cl.reset == 0 && cl.reset_events == 0;
  } else {
    pass = pass && cl.completed == cl.enqueued && cl.reset >= 1 && cl.reset_events >= 1 &&
           phase3_ok == n;
  }
  if (!pass) {
    if (why.empty()) {
      why = cl.bad_data > 0           ? "wrong response data"
            : !cl.first_error.empty() ? "request failed: " + cl.first_error
                                      : "counts do not add up";
    }
    std::printf("FAILED: %s\n", why.c_str());
  }
  std::fflush(stdout);
  return pass ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli(
      "The server and the client of the network-fault tests "
      "(test/netns/run_netns_tests.sh).",
      "netns_peer");
  cli.require_subcommand(1);
  constexpr uint64_t kMaxU32 = UINT32_MAX;

  ServerOptions so;
  CLI::App* server_cmd = cli.add_subcommand("server", "echo checked payloads; count handler runs");
  server_cmd->add_option("--uri", so.uri, "this server's address IP:PORT")->required();
  server_cmd->add_option("--failure-timeout-ms", so.failure_timeout_ms, "Nexus failure timeout")
      ->check(CLI::Range(uint64_t{0}, kMaxU32))
      ->capture_default_str();
  server_cmd->add_option("--max-seconds", so.max_seconds, "stop after this long")
      ->capture_default_str();

  ClientOptions co;
  CLI::App* client_cmd = cli.add_subcommand("client", "send checked requests; check responses");
  client_cmd->add_option("--server", co.server, "the server's address IP:PORT")->required();
  client_cmd->add_option("--uri", co.uri, "this client's address IP:0")->required();
  client_cmd->add_option("--requests", co.requests, "requests to send (per phase)")
      ->required()
      ->check(CLI::PositiveNumber);
  client_cmd->add_option("--sizes", co.sizes, "request payload sizes, used in turn")
      ->delimiter(',')
      ->capture_default_str();
  client_cmd->add_option("--window", co.window, "requests outstanding at most")
      ->capture_default_str();
  client_cmd->add_option("--rto-us", co.rto_us, "RpcConfig::rto_us")->capture_default_str();
  client_cmd->add_option("--failure-timeout-ms", co.failure_timeout_ms, "Nexus failure timeout")
      ->check(CLI::Range(uint64_t{0}, kMaxU32))
      ->capture_default_str();
  client_cmd->add_option("--duration-ms", co.duration_ms, "spread the requests over this long")
      ->capture_default_str();
  client_cmd->add_option("--timeout-s", co.timeout_s, "give up after this long")
      ->capture_default_str();
  client_cmd->add_flag("--expect-reset", co.expect_reset,
                       "stream until the link goes down, reconnect, send again");
  client_cmd->add_flag("--allow-reset", co.allow_reset,
                       "a reset fails the requests in flight; the rest go on a new session");

  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  // Line-buffered: the script reads our lines while we run.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  install_stop_signals();
  return server_cmd->parsed() ? run_server(so) : run_client(co);
}
