// Nexus lifecycle.
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "rpc/rpc_all.h"

TEST_CASE("a Nexus shuts down even when its retry timer fires during shutdown") {
  // Given a 1 ms retry timer, destroy Nexuses at moments that race with
  // it. Before the fix, a queued timer handler re-armed the timer after
  // shutdown and the destructor never returned (the test would time out).
  for (int i = 0; i < 400; i++) {
    rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0", .sm_retry_ms = 1});
    std::this_thread::sleep_for(std::chrono::microseconds(900 + (i % 200)));
  }
  SUCCEED("every Nexus was destroyed");
}

TEST_CASE("a Nexus rejects a URI without a concrete host or with a bad port") {
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "0.0.0.0:0"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "127.0.0.1"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "127.0.0.1:99999"}), rpc::Error);
  CHECK_THROWS_AS(rpc::Nexus(rpc::NexusConfig{.uri = "no.such.host.invalid:1"}), rpc::Error);
}

TEST_CASE("a Nexus reports the port it was given when asked for port 0") {
  rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
  CHECK(nexus.uri().rfind("127.0.0.1:", 0) == 0);
  CHECK(nexus.uri() != "127.0.0.1:0");
}
