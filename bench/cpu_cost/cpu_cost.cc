// Runs N small echo RPCs between a client and a server Rpc driven from one
// thread over udp on 127.0.0.1, one request outstanding, through one of the
// client APIs: a function-pointer continuation with a tag ("fnptr"), a
// lambda continuation ("closure"), or a coroutine awaiting rpc.call
// ("coro"). Meant to run under
// `valgrind --tool=callgrind`, whose instruction counts are exact and
// repeatable: scripts/cpu_cost.sh runs it for two values of N and divides
// the difference of librpc's own instructions by the difference of N,
// which cancels set-up and tear-down. Loopback delivers a datagram inside
// sendmmsg, so every loop iteration does work; there is no idle polling.
#include <librpc/rpc_all.h>

#include <string>

#include "cli.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr rpc::ReqType kEcho = 1;

struct State {
  rpc::MsgBuffer req;
  rpc::MsgBuffer resp;
  rpc::SessionNum sn = 0;
  long remaining = 0;
  long failed = 0;
};

void echo(rpc::ReqHandle& h) {
  rpc::MsgBuffer& resp = h.pre_resp_buffer();
  std::memcpy(resp.data(), h.request().data(), h.request().size());
  resp.resize(h.request().size());
  h.rpc().enqueue_response(h, resp);
}

void on_done(rpc::Rpc& rpc, const rpc::Completion& c) {
  auto* s = static_cast<State*>(c.tag);
  if (c.errc != rpc::Errc::kOk) s->failed++;
  if (--s->remaining > 0) {
    (void)rpc.enqueue_request(s->sn, kEcho, s->req, s->resp, on_done, s);
  }
}

// The same as a closure: captures two pointers (no allocation).
void send_with_closure(rpc::Rpc& rpc, State& s) {
  (void)rpc.enqueue_request(s.sn, kEcho, s.req, s.resp,
                            [&s](rpc::Rpc& r, const rpc::Completion& c) {
                              if (c.errc != rpc::Errc::kOk) s.failed++;
                              if (--s.remaining > 0) send_with_closure(r, s);
                            });
}

// The same as a coroutine: one frame for the whole run, nothing per call.
rpc::Task<void> send_with_coroutine(rpc::Rpc& rpc, State& s) {
  while (s.remaining > 0) {
    const rpc::CallResult r = co_await rpc.call(s.sn, kEcho, s.req, s.resp);
    if (!r.ok()) s.failed++;
    s.remaining--;
  }
}

// The RPCs that are counted: scripts/cpu_cost.sh has callgrind collect
// only while this function runs (--toggle-collect), so the connect, the
// wait for it and the tear-down, whose loop iterations vary with how the
// threads are scheduled, stay out of the count. Neither inlined nor
// cloned (noipa): callgrind finds it by name, and must enter it once.
[[gnu::noipa]] void run_measured_rpcs(rpc::Rpc& client, rpc::Rpc& server, State& s,
                                      const std::string& api) {
  if (api == "closure") {
    send_with_closure(client, s);
  } else if (api == "coro") {
    client.spawn(send_with_coroutine(client, s));
  } else {
    (void)client.enqueue_request(s.sn, kEcho, s.req, s.resp, on_done, &s);
  }
  while (s.remaining > 0) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Positional, in this order (scripts/cpu_cost.sh passes all five).
  long n = 10000;
  size_t size = 32;
  std::string offload_arg = "on";  // RpcConfig::udp_offload
  std::string cc_arg = "default";  // RpcConfig::congestion_control: its default unless on/off
  std::string api = "fnptr";
  CLI::App app("Echo RPCs through one client API, for callgrind (scripts/cpu_cost.sh)", "cpu_cost");
  app.option_defaults()->always_capture_default();
  app.add_option("num_rpcs", n, "RPCs to run")->check(CLI::Range(1L, 1L << 40));
  app.add_option("size_bytes", size, "request and response size")
      ->check(CLI::Range(size_t{0}, size_t{1} << 24));
  app.add_option("udp_offload", offload_arg, "udp offload")->check(CLI::IsMember({"on", "off"}));
  app.add_option("congestion_control", cc_arg, "congestion control")
      ->check(CLI::IsMember({"on", "off", "default"}));
  app.add_option("api", api, "client API")->check(CLI::IsMember({"fnptr", "closure", "coro"}));
  if (const auto status = measure::parse_command_line(app, argc, argv)) return *status;
  const bool offload = offload_arg == "on";
  const bool cc = cc_arg == "default" ? rpc::RpcConfig{}.congestion_control : cc_arg == "on";
  rpc::Nexus nexus({.uri = "127.0.0.1:0", .num_bg_threads = 0});
  if (!nexus.register_handler(kEcho, echo)) return 1;
  // Callgrind runs the program 50-100x slower than native speed, and
  // slower still on a loaded machine, while the engine's timers run on the
  // wall clock: the loss scan (every half RTO) came round every few RPCs
  // instead of every few hundred, and the inflated round trips (hundreds
  // of us instead of 10) pushed Timely off its uncongested bypass into a
  // full rate update per response. Both made the count swing by 400
  // instructions from one run to the next. At native speed neither
  // happens on an idle loopback, so the timers are pushed out of the run:
  // what is counted is the packet path an RPC takes at full speed,
  // including Timely's bypass check.
  constexpr uint64_t kRtoUs = 10'000'000;
  constexpr uint32_t kTimelyLowUs = 10'000'000;
  const rpc::RpcConfig base{.udp_offload = offload,
                            .rto_us = kRtoUs,
                            .congestion_control = cc,
                            .cc_t_low_us = kTimelyLowUs,
                            .cc_t_high_us = 2 * kTimelyLowUs};
  rpc::RpcConfig server_config = base;
  server_config.rpc_id = 1;
  rpc::RpcConfig client_config = base;
  client_config.rpc_id = 0;
  rpc::Rpc server(nexus, server_config);
  rpc::Rpc client(nexus, client_config);
  auto sn = client.create_session(nexus.uri(), 1);
  if (!sn) {
    std::fprintf(stderr, "cpu_cost: %s\n", sn.error().c_str());
    return 1;
  }
  while (!client.is_connected(*sn)) {
    client.run_event_loop_once();
    server.run_event_loop_once();
  }
  State s;
  s.sn = *sn;
  s.req = client.alloc_msg_buffer(size);
  s.resp = client.alloc_msg_buffer(size);
  std::memset(s.req.data(), 'x', size);
  s.remaining = n;
  run_measured_rpcs(client, server, s, api);
  std::printf(
      "cpu_cost: %ld RPCs of %zu B via %s, %ld failed, client retransmissions %lu, congestion "
      "control %s\n",
      n, size, api.c_str(), s.failed, static_cast<unsigned long>(client.stats().retransmissions),
      cc ? "on" : "off");
  return s.failed == 0 ? 0 : 1;
}
