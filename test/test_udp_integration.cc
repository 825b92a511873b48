// Integration over the udp transport on 127.0.0.1: real Nexus, real
// sockets, server Rpcs on their own threads.
#include <algorithm>
#include <catch2/catch.hpp>

#include "test_util.h"

using namespace rpc;
using namespace rpc::test;
using namespace std::chrono_literals;

namespace {

void register_echo(Nexus& nexus) {
  REQUIRE(nexus.register_handler(kEcho, echo_into_response));
  REQUIRE(nexus.register_handler(kEchoBg, echo_into_response, HandlerMode::kBackground));
}

NexusConfig local_nexus() { return NexusConfig{.uri = "127.0.0.1:0"}; }

// One request of `size` bytes on a fresh session; checks every byte back.
void echo_roundtrip(Rpc& client, SessionNum sn, size_t size, uint64_t seed,
                    ReqType req_type = kEcho) {
  MsgBuffer req = client.alloc_msg_buffer(size);
  MsgBuffer resp = client.alloc_msg_buffer(size);
  REQUIRE(req.valid());
  REQUIRE(resp.valid());
  fill_pattern(req, seed);
  Outcome out;
  REQUIRE(client.enqueue_request(sn, req_type, req, resp, record_outcome, &out) == Errc::kOk);
  REQUIRE(run_until(client, [&] { return out.done; }));
  CHECK(out.errc == Errc::kOk);
  CHECK(out.resp_size == size);
  CHECK(check_pattern(resp, size, seed));
  client.free_msg_buffer(req);
  client.free_msg_buffer(resp);
}

}  // namespace

TEST_CASE("echo of every size from 0 bytes to 8 MiB arrives byte for byte over udp") {
  Nexus nexus(local_nexus());
  register_echo(nexus);
  ServerThread server(nexus, RpcConfig{.rpc_id = 1});
  SessionEvents events;
  Rpc client(nexus, RpcConfig{.rpc_id = 0, .session_callback = events.callback()});
  auto sn = client.create_session(nexus.uri(), 1);
  REQUIRE(sn);
  REQUIRE(run_until(client, [&] { return client.is_connected(*sn); }));
  CHECK(events.has(*sn, SessionEvent::kConnected));

  const size_t mtu_data = client.max_data_per_pkt();
  for (size_t size : {size_t{0}, size_t{1}, mtu_data - 1, mtu_data, mtu_data + 1,
                      size_t{64} << 10, size_t{1} << 20, size_t{8} << 20}) {
    INFO("size " << size);
    echo_roundtrip(client, *sn, size, size);
  }
}
