// A connected but hostile client, as a program, for the attack scenarios
// of the apps' test scripts (test/smr/run_smr_loopback.sh): it attacks a
// server by URI from its own loopback address (another host to the
// server), so that a script can show an honest client served meanwhile.
// docs/reliability.md, "Budgets".
//
//   hostile_client --server HOST:PORT --rpc-id N --ip 127.0.0.3 sessions --count N --hold-ms T
//     forges N connect requests from one socket (as a Nexus would send
//     them), keeps the sessions it gets alive with heartbeats for T ms, and
//     prints "sessions accepted=A refused=R".
//   hostile_client ... requests --sessions S --req-type T --payload-hex HEX --resp-bytes B
//                  --hold-ms T
//     a real Rpc opens S sessions and sends the payload on all 8 slots of
//     each, then sends nothing more for T ms (the server keeps the answers
//     cached); prints "requests ok=K failed=F pending=P".
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "hostile_udp.h"

using namespace rpc;
using namespace rpc::detail;
using namespace rpc::test::hostile;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string server;
  RpcId rpc_id = 0;
  std::string ip = "127.0.0.3";
  size_t count = 0;
  size_t sessions = 1;
  unsigned req_type = 1;
  std::string payload_hex;
  size_t resp_bytes = 4096;
  uint64_t hold_ms = 1000;
};

int run_sessions(const Options& opt, uint32_t ipv4, uint16_t sm_port) {
  UdpSock sock(ipv4);
  size_t accepted = 0, refused = 0;
  const uint64_t incarnation = 0xBAD5EED;
  std::vector<uint8_t> rx(2048);
  for (size_t i = 0; i < opt.count; i++) {
    const uint64_t token = 0x6000'0000'0000 + i;
    SmMsg req = connect_req(token, sock.port(), static_cast<SessionNum>(i), incarnation, ipv4);
    req.server_rpc_id = opt.rpc_id;
    sock.send(sm_port, sm_bytes(req));
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    while (Clock::now() < deadline) {
      const ssize_t n = sock.recv(rx.data(), rx.size(), std::chrono::milliseconds(10));
      SmMsg m;
      if (n <= 0 || decode_sm_msg({rx.data(), static_cast<size_t>(n)}, m) != SmDecodeStatus::kOk ||
          m.type != SmMsgType::kConnectResp || m.token != token) {
        continue;
      }
      (m.err == SmErr::kNone ? accepted : refused)++;
      break;
    }
  }
  fmt::print("sessions accepted={} refused={}\n", accepted, refused);
  std::fflush(stdout);
  // Kept alive: the server's Nexus resets the sessions of a silent remote.
  const auto end = Clock::now() + std::chrono::milliseconds(opt.hold_ms);
  SmMsg hb = connect_req(0, sock.port(), 0, incarnation, ipv4);
  hb.type = SmMsgType::kHeartbeat;
  while (Clock::now() < end) {
    sock.send(sm_port, sm_bytes(hb));
    while (sock.recv(rx.data(), rx.size(), std::chrono::milliseconds(50)) >= 0) {
    }
  }
  return 0;
}

struct Call {
  MsgBuffer req, resp;
  int runs = 0;
  Errc errc = Errc::kOk;
};

int run_requests(const Options& opt) {
  std::vector<uint8_t> payload;
  for (size_t i = 0; i + 1 < opt.payload_hex.size(); i += 2) {
    payload.push_back(static_cast<uint8_t>(std::stoul(opt.payload_hex.substr(i, 2), nullptr, 16)));
  }
  std::vector<std::unique_ptr<Call>> calls;  // outlive the Rpc, whose end fails what is queued
  Nexus nexus(NexusConfig{.uri = opt.ip + ":0"});
  auto rpc = std::make_unique<Rpc>(nexus, RpcConfig{.rpc_id = 0});
  for (size_t s = 0; s < opt.sessions; s++) {
    auto sn = rpc->connect(opt.server, opt.rpc_id, std::chrono::seconds(5));
    if (!sn) {
      fmt::print(stderr, "hostile_client: session {}: {}\n", s, sn.error());
      break;
    }
    for (size_t i = 0; i < 8; i++) {
      auto c = std::make_unique<Call>();
      c->req = rpc->alloc_msg_buffer(payload.size());
      c->resp = rpc->alloc_msg_buffer(opt.resp_bytes);
      if (!c->req.valid() || !c->resp.valid()) continue;
      std::copy(payload.begin(), payload.end(), c->req.data());
      if (rpc->enqueue_request(
              *sn, static_cast<ReqType>(opt.req_type), c->req, c->resp,
              [](Rpc&, const Completion& done) {
                auto* call = static_cast<Call*>(done.tag);
                call->runs++;
                call->errc = done.errc;
              },
              c.get()) == Errc::kOk) {
        calls.push_back(std::move(c));
      }
    }
  }
  rpc->run_event_loop(std::chrono::milliseconds(opt.hold_ms));
  size_t ok = 0, failed = 0, pending = 0;
  for (const auto& c : calls) {
    if (c->runs == 0) pending++;
    if (c->runs == 1) (c->errc == Errc::kOk ? ok : failed)++;
  }
  fmt::print("requests ok={} failed={} pending={}\n", ok, failed, pending);
  rpc.reset();
  for (const auto& c : calls) {
    if (c->runs != 1) {
      fmt::print(stderr, "hostile_client: a continuation ran {} times\n", c->runs);
      return 1;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App cli{"A connected but hostile client (test/hostile_client.cc)"};
  cli.add_option("--server", opt.server, "the server's Nexus URI")->required();
  cli.add_option("--rpc-id", opt.rpc_id, "the server Rpc's id")->required();
  cli.add_option("--ip", opt.ip, "our loopback address (another host to the server)")
      ->capture_default_str();
  cli.add_option("--hold-ms", opt.hold_ms, "how long to keep at it")->capture_default_str();
  auto* sessions = cli.add_subcommand("sessions", "take as many sessions as the server gives");
  sessions->add_option("--count", opt.count, "connects to send")->required();
  auto* requests = cli.add_subcommand("requests", "leave answers cached on every slot");
  requests->add_option("--sessions", opt.sessions)->capture_default_str();
  requests->add_option("--req-type", opt.req_type)->required();
  requests->add_option("--payload-hex", opt.payload_hex, "the request, in hex")->required();
  requests->add_option("--resp-bytes", opt.resp_bytes)->capture_default_str();
  cli.require_subcommand(1);
  CLI11_PARSE(cli, argc, argv);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    auto server = parse_uri(opt.server);
    auto ours = parse_uri(opt.ip + ":1");
    if (!server || !ours) {
      fmt::print(stderr, "hostile_client: --server and --ip must be IPv4 addresses\n");
      return 2;
    }
    if (sessions->parsed()) return run_sessions(opt, ours->ipv4, server->port);
    return run_requests(opt);
  } catch (const std::exception& e) {
    fmt::print(stderr, "hostile_client: {}\n", e.what());
    return 1;
  }
}
