// apps/kv: the wire format (and its refusal of malformed input), the
// bounded table, the YCSB generator, and the service end to end over udp
// on loopback: routing by partition, large values, refusals, and the load
// generator.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <deque>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "client.h"
#include "librpc/rpc_all.h"
#include "load_librpc.h"
#include "protocol.h"
#include "service.h"
#include "table.h"
#include "test_util.h"
#include "workload.h"

namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::vector<uint8_t> encode_put(const std::string& key, const std::string& value) {
  std::vector<uint8_t> out(kv::encoded_put_request_bytes(key, value.size()));
  kv::encode_put_request(key, bytes_of(value), out.data());
  return out;
}

}  // namespace

TEST_CASE("a PUT request decodes to the key and value it was encoded from") {
  const auto msg = encode_put("user1", "value-bytes");
  kv::KvError error{};
  const auto req = kv::decode_put_request(msg, &error);
  REQUIRE(req);
  CHECK(req->key == "user1");
  CHECK(std::string(reinterpret_cast<const char*>(req->value.data()), req->value.size()) ==
        "value-bytes");
}

TEST_CASE("requests whose lengths disagree with their size are refused as malformed") {
  const auto msg = encode_put("key", "value");
  kv::KvError error{};
  // Given a message one byte short, one byte long, and with no key
  const std::vector<uint8_t> shorter(msg.begin(), msg.end() - 1);
  std::vector<uint8_t> longer(msg.size() + 1, 0);
  std::copy(msg.begin(), msg.end(), longer.begin());
  std::vector<uint8_t> empty_key(kv::kPutHeaderBytes, 0);
  // Expect every one refused, with the reason
  for (const auto& m : {shorter, longer, empty_key}) {
    error = {};
    CHECK_FALSE(kv::decode_put_request(m, &error));
    CHECK(error == kv::KvError::kMalformed);
  }
  CHECK_FALSE(kv::decode_key_request(std::span<const uint8_t>(msg.data(), 1), &error));
  CHECK_FALSE(kv::decode_put_request(std::span<const uint8_t>(msg.data(), 3), &error));
}

TEST_CASE("keys above 250 bytes and values above 1 MiB are refused as too large") {
  kv::KvError error{};
  const std::string long_key(kv::kMaxKeyBytes + 1, 'k');
  CHECK_FALSE(kv::decode_put_request(encode_put(long_key, "v"), &error));
  CHECK(error == kv::KvError::kTooLarge);
  const std::string big_value(kv::kMaxValueBytes + 1, 'v');
  CHECK_FALSE(kv::decode_put_request(encode_put("k", big_value), &error));
  CHECK(error == kv::KvError::kTooLarge);
  // The largest allowed pass.
  CHECK(kv::decode_put_request(
      encode_put(std::string(kv::kMaxKeyBytes, 'k'), std::string(kv::kMaxValueBytes, 'v')),
      &error));
}

TEST_CASE("random bytes never decode to a key or value outside the message") {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50'000; i++) {
    std::vector<uint8_t> msg(rng() % 40);
    for (auto& b : msg) b = static_cast<uint8_t>(rng());
    // Make some lengths plausible, so the accepting path is exercised too.
    if (msg.size() >= kv::kPutHeaderBytes && i % 2 == 0) {
      const size_t key = 1 + rng() % (msg.size() - kv::kPutHeaderBytes + 1);
      if (key + kv::kPutHeaderBytes <= msg.size()) {
        const size_t value = msg.size() - kv::kPutHeaderBytes - key;
        msg[0] = static_cast<uint8_t>(key);
        msg[1] = static_cast<uint8_t>(key >> 8);
        msg[2] = static_cast<uint8_t>(value);
        msg[3] = msg[4] = msg[5] = 0;
      }
    }
    kv::KvError error{};
    const auto inside = [&](const void* p, size_t n) {
      const auto* b = static_cast<const uint8_t*>(p);
      return b >= msg.data() && b + n <= msg.data() + msg.size();
    };
    if (const auto put = kv::decode_put_request(msg, &error)) {
      REQUIRE(inside(put->key.data(), put->key.size()));
      REQUIRE(inside(put->value.data(), put->value.size()));
      REQUIRE(kv::kPutHeaderBytes + put->key.size() + put->value.size() == msg.size());
    }
    if (const auto get = kv::decode_key_request(msg, &error)) {
      REQUIRE(inside(get->key.data(), get->key.size()));
    }
    (void)kv::decode_info(msg);
  }
}

TEST_CASE("the table refuses a PUT beyond its capacity and counts overwrites and erases") {
  kv::Table table(100);
  CHECK(table.put("a", bytes_of(std::string(40, 'x'))));
  CHECK(table.used_bytes() == 41);
  CHECK_FALSE(table.put("b", bytes_of(std::string(60, 'x'))));  // 41 + 61 > 100
  CHECK(table.get("b") == nullptr);
  CHECK(table.put("a", bytes_of(std::string(10, 'y'))));  // overwrite shrinks
  CHECK(table.used_bytes() == 11);
  CHECK(*table.get("a") == std::string(10, 'y'));
  CHECK(table.put("b", bytes_of(std::string(60, 'x'))));
  CHECK(table.erase("a"));
  CHECK_FALSE(table.erase("a"));
  CHECK(table.used_bytes() == 61);
  CHECK(table.size() == 1);
}

TEST_CASE("zipfian keys: the most popular rank takes 1/zeta(n) of the draws, as YCSB's") {
  const kv::Zipfian zipf(1000, 0.99);
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  constexpr int kDraws = 400'000;
  std::vector<int> counts(1000);
  for (int i = 0; i < kDraws; i++) {
    const uint64_t r = zipf.next(unit(rng));
    REQUIRE(r < 1000);
    counts[r]++;
  }
  const double expected_first = kDraws / zipf.zeta_n();
  CHECK(std::abs(counts[0] - expected_first) < 0.03 * expected_first);
  // Rank 1 is drawn about 1/2^0.99 as often as rank 0; the tail is thin.
  CHECK(std::abs(counts[1] / static_cast<double>(counts[0]) - std::pow(0.5, 0.99)) < 0.03);
  CHECK(counts[0] > 20 * counts[500]);
}

TEST_CASE("workloads draw their read fraction, stay in the key space and repeat for a seed") {
  for (const char mix : {'a', 'b', 'c'}) {
    kv::WorkloadSpec spec{.mix = mix, .keys = 5000, .value_bytes_min = 32, .value_bytes_max = 64};
    kv::Workload w(spec), again(spec);
    int reads = 0;
    for (int i = 0; i < 100'000; i++) {
      const auto op = w.next();
      const auto op2 = again.next();
      REQUIRE(op.record == op2.record);
      REQUIRE(op.record < spec.keys);
      if (op.kind == kv::OpKind::kGet)
        reads++;
      else
        REQUIRE((op.value_bytes >= 32 && op.value_bytes <= 64));
    }
    CHECK(std::abs(reads / 100'000.0 - kv::read_fraction(mix)) < 0.01);
  }
  CHECK_THROWS(kv::Workload(kv::WorkloadSpec{.mix = 'd'}));
  CHECK_THROWS(kv::Workload(kv::WorkloadSpec{.value_bytes_min = 64, .value_bytes_max = 32}));
  CHECK(kv::key_name(42) == "user000000000042");
}

namespace {

// The service tests, tagged [any_transport], run over udp, or over the
// transport LIBRPC_TEST_TRANSPORT names (test_util.h; the fabric suite runs
// them over tcp;ofi_rxm, where values above 16 KiB take the bulk path).
rpc::RpcConfig test_config(rpc::RpcId id) {
  return rpc::test::test_rpc_config(rpc::RpcConfig{.rpc_id = id});
}
// The same choice, as the load generator takes it.
app::TransportOptions test_transport() {
  const rpc::RpcConfig config = test_config(0);
  app::TransportOptions t;
  t.transport = config.transport;
  t.fabric_provider = config.fabric_provider;
  return t;
}

// A kv server of `partitions` Rpcs on loopback, each on its own thread.
struct TestServer {
  explicit TestServer(uint16_t partitions, size_t capacity_per_partition_bytes = size_t{64} << 20)
      : nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"}) {
    REQUIRE(kv::register_handlers(nexus));
    for (uint16_t i = 0; i < partitions; i++) {
      parts.emplace_back(i, partitions, capacity_per_partition_bytes);
      rpc::RpcConfig config = test_config(static_cast<rpc::RpcId>(i));
      config.context = &parts.back();
      loops.emplace_back(std::make_unique<rpc::EventLoopThread>(nexus, config));
    }
  }
  ~TestServer() {
    for (auto& l : loops) l->stop();
  }
  // Keys held by partition i, read on its own thread (run_and_wait orders
  // the read after the handlers' writes; reading from here would race).
  size_t keys(size_t i) {
    size_t n = 0;
    REQUIRE(loops[i]->run_and_wait([&](rpc::Rpc&) { n = parts[i].table.size(); }));
    return n;
  }
  rpc::Nexus nexus;
  std::deque<kv::Partition> parts;
  std::vector<std::unique_ptr<rpc::EventLoopThread>> loops;
};

constexpr auto kTimeout = std::chrono::seconds(5);

}  // namespace

TEST_CASE("the service stores, reads back and deletes keys over every partition",
          "[any_transport]") {
  TestServer server(2);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
  rpc::Rpc rpc(nexus, test_config(0));
  auto client = kv::Client::connect(rpc, server.nexus.uri(), kTimeout);
  REQUIRE(client);
  CHECK(client->partitions() == 2);

  std::map<std::string, std::string> written;
  for (int i = 0; i < 64; i++) {
    const std::string key = kv::key_name(static_cast<uint64_t>(i));
    const std::string value = "value-" + std::to_string(i * 7);
    REQUIRE(client->put_sync(key, bytes_of(value), kTimeout));
    written[key] = value;
  }
  // Both partitions hold some keys, each only its own.
  CHECK(server.keys(0) > 0);
  CHECK(server.keys(1) > 0);
  CHECK(server.keys(0) + server.keys(1) == 64);
  for (const auto& [key, value] : written) {
    auto got = client->get_sync(key, kTimeout);
    REQUIRE(got);
    REQUIRE(*got);
    CHECK(**got == value);
  }
  auto deleted = client->del_sync("user000000000003", kTimeout);
  REQUIRE(deleted);
  CHECK(*deleted);
  auto gone = client->get_sync("user000000000003", kTimeout);
  REQUIRE(gone);
  CHECK_FALSE(*gone);
  auto again = client->del_sync("user000000000003", kTimeout);
  REQUIRE(again);
  CHECK_FALSE(*again);
}

TEST_CASE("a 1 MiB value travels both ways intact", "[any_transport]") {
  TestServer server(1);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
  rpc::Rpc rpc(nexus, test_config(0));
  auto client = kv::Client::connect(rpc, server.nexus.uri(), kTimeout);
  REQUIRE(client);
  std::string value(kv::kMaxValueBytes, '\0');
  for (size_t i = 0; i < value.size(); i++) value[i] = static_cast<char>(i * 31 + i / 4096);
  REQUIRE(client->put_sync("big", bytes_of(value), kTimeout));
  auto got = client->get_sync("big", kTimeout);
  REQUIRE(got);
  REQUIRE(*got);
  CHECK(**got == value);
  // Where the transport has a bulk path, the 1 MiB response was pulled with
  // a one-sided read, not sent as datagrams.
  if (test_transport().transport != "udp") CHECK(rpc.stats().bulk_reads > 0);
  // One byte more is refused before anything is sent.
  CHECK_FALSE(client->put_sync("big", bytes_of(value + "x"), kTimeout));
}

TEST_CASE("the server refuses malformed requests, misrouted keys and PUTs past its capacity",
          "[any_transport]") {
  TestServer server(2, /*capacity_per_partition_bytes=*/1000);
  rpc::Nexus nexus(rpc::NexusConfig{.uri = "127.0.0.1:0"});
  rpc::Rpc rpc(nexus, test_config(0));
  auto client = kv::Client::connect(rpc, server.nexus.uri(), kTimeout);
  REQUIRE(client);
  rpc::OwnedBuffer req(rpc, 4096), resp(rpc, 4096);

  SECTION("a malformed GET") {
    req.get().resize(1);
    const auto r =
        rpc::call_sync(rpc, client->session_for("x"), kv::kGetReqType, req, resp, kTimeout);
    CHECK(r.errc == rpc::Errc::kAppError);
    CHECK(r.app_error == static_cast<uint32_t>(kv::KvError::kMalformed));
  }
  SECTION("a key sent to the partition that does not own it") {
    const std::string key = "misrouted";
    req.get().resize(kv::encode_key_request(key, req.data()));
    const uint16_t wrong = static_cast<uint16_t>(1 - kv::partition_of(key, 2));
    auto sn = rpc.connect(server.nexus.uri(), static_cast<rpc::RpcId>(wrong), kTimeout);
    REQUIRE(sn);
    const auto r = rpc::call_sync(rpc, *sn, kv::kGetReqType, req, resp, kTimeout);
    CHECK(r.errc == rpc::Errc::kAppError);
    CHECK(r.app_error == static_cast<uint32_t>(kv::KvError::kWrongPartition));
  }
  SECTION("PUTs past the capacity") {
    const std::string value(600, 'v');
    REQUIRE(client->put_sync("fits", bytes_of(value), kTimeout));
    // Some key in the same partition as "fits" goes past its 1000 bytes.
    std::string other;
    for (int i = 0; other.empty(); i++) {
      const std::string k = "k" + std::to_string(i);
      if (kv::partition_of(k, 2) == kv::partition_of("fits", 2)) other = k;
    }
    auto full = client->put_sync(other, bytes_of(value), kTimeout);
    REQUIRE_FALSE(full);
    CHECK(full.error().find("partition full") != std::string::npos);
    // Nothing was lost: the first value is intact.
    auto got = client->get_sync("fits", kTimeout);
    REQUIRE(got);
    REQUIRE(*got);
    CHECK(**got == value);
  }
}

TEST_CASE("the load generator runs a YCSB mix with no failures and no lost writes",
          "[any_transport]") {
  TestServer server(2);
  kv::LoadOptions opt;
  opt.workload =
      kv::WorkloadSpec{.mix = 'a', .keys = 2000, .value_bytes_min = 16, .value_bytes_max = 2000};
  opt.server = server.nexus.uri();
  opt.threads = 1;
  opt.outstanding = 4;
  opt.warmup = std::chrono::milliseconds(100);
  opt.duration = std::chrono::milliseconds(500);
  const kv::LoadResult r = kv::run_librpc_load(opt, test_transport(), "127.0.0.1:0");
  CHECK(r.failures == 0);
  CHECK(r.misses == 0);  // every record was preloaded
  CHECK(r.ops > 0);
  CHECK(r.get_ns.count() + r.put_ns.count() == r.ops);
  CHECK(server.keys(0) + server.keys(1) == 2000);
}
