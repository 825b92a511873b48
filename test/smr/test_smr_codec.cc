// apps/smr's wire formats and in-memory store: raft messages, client
// commands and replies, KV snapshots. Decoders face untrusted peers, so
// each is fed truncations, bad fields and random mutations of valid input.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kv_proto.h"
#include "memory_store.h"
#include "raft_codec.h"
#include "smr_common.h"

using namespace smr;

namespace {

std::vector<uint8_t> encode_all(const raft_message& m, raft_id sender) {
  const unsigned n = m.type == RAFT_IO_APPEND_ENTRIES ? m.append_entries.n_entries : 0;
  std::vector<uint8_t> out(encoded_size(m, n));
  REQUIRE(encode(m, sender, n, out.data()) == out.size());
  return out;
}

raft_message vote_msg() {
  raft_message m{};
  m.type = RAFT_IO_REQUEST_VOTE;
  m.server_id = 2;
  m.request_vote = {7, 1, 42, 6, false, true};
  return m;
}

// Three entries; the caller keeps `datas` alive.
raft_message append_msg(std::vector<std::string>& datas, std::vector<raft_entry>& entries) {
  datas = {"first", "", std::string(3000, 'x')};
  entries.clear();
  for (size_t i = 0; i < datas.size(); i++) {
    entries.push_back(raft_entry{5 + i, RAFT_COMMAND, {datas[i].data(), datas[i].size()}, nullptr});
  }
  entries[1].type = RAFT_BARRIER;
  raft_message m{};
  m.type = RAFT_IO_APPEND_ENTRIES;
  m.server_id = 3;
  m.append_entries = {9, 100, 8, 99, entries.data(), static_cast<unsigned>(entries.size())};
  return m;
}

raft_message snapshot_msg(raft_configuration& conf, std::string& data) {
  raft_configuration_init(&conf);
  REQUIRE(raft_configuration_add(&conf, 1, "10.0.0.1:31850", RAFT_VOTER) == 0);
  REQUIRE(raft_configuration_add(&conf, 2, "10.0.0.2:31850", RAFT_STANDBY) == 0);
  data = "snapshot bytes";
  raft_message m{};
  m.type = RAFT_IO_INSTALL_SNAPSHOT;
  m.server_id = 1;
  m.install_snapshot = {4, 1000, 3, conf, 900, {data.data(), data.size()}};
  return m;
}

}  // namespace

TEST_CASE("every raft message type decodes to what was encoded") {
  SECTION("request vote") {
    auto bytes = encode_all(vote_msg(), 1);
    DecodedMsg d;
    REQUIRE(decode(bytes, d));
    CHECK(d.msg.type == RAFT_IO_REQUEST_VOTE);
    CHECK(d.msg.server_id == 1);
    CHECK(d.destination == 2);
    CHECK(d.msg.request_vote.term == 7);
    CHECK(d.msg.request_vote.last_log_index == 42);
    CHECK(d.msg.request_vote.pre_vote);
    CHECK_FALSE(d.msg.request_vote.disrupt_leader);
  }
  SECTION("append entries: one batch holds every entry's data") {
    std::vector<std::string> datas;
    std::vector<raft_entry> entries;
    auto bytes = encode_all(append_msg(datas, entries), 1);
    DecodedMsg d;
    REQUIRE(decode(bytes, d));
    const auto& a = d.msg.append_entries;
    REQUIRE(a.n_entries == 3);
    CHECK(a.prev_log_index == 100);
    CHECK(a.leader_commit == 99);
    for (unsigned i = 0; i < 3; i++) {
      CHECK(a.entries[i].batch == a.entries[0].batch);
      CHECK(a.entries[i].term == 5 + i);
      CHECK(std::string(static_cast<char*>(a.entries[i].buf.base), a.entries[i].buf.len) ==
            datas[i]);
    }
    CHECK(a.entries[1].type == RAFT_BARRIER);
  }
  SECTION("install snapshot, with its configuration") {
    raft_configuration conf;
    std::string data;
    auto bytes = encode_all(snapshot_msg(conf, data), 2);
    raft_configuration_close(&conf);
    DecodedMsg d;
    REQUIRE(decode(bytes, d));
    const auto& s = d.msg.install_snapshot;
    CHECK(s.last_index == 1000);
    CHECK(s.conf_index == 900);
    REQUIRE(s.conf.n == 2);
    CHECK(std::string(s.conf.servers[1].address) == "10.0.0.2:31850");
    CHECK(s.conf.servers[1].role == RAFT_STANDBY);
    CHECK(std::string(static_cast<char*>(s.data.base), s.data.len) == data);
  }
  SECTION("results and timeout-now") {
    raft_message m{};
    m.type = RAFT_IO_APPEND_ENTRIES_RESULT;
    m.server_id = 1;
    m.append_entries_result = {3, 17, 16};
    DecodedMsg d;
    REQUIRE(decode(encode_all(m, 2), d));
    CHECK(d.msg.append_entries_result.rejected == 17);
    m = {};
    m.type = RAFT_IO_REQUEST_VOTE_RESULT;
    m.server_id = 1;
    m.request_vote_result = {3, true, raft_tribool_false};
    DecodedMsg v;
    REQUIRE(decode(encode_all(m, 2), v));
    CHECK(v.msg.request_vote_result.vote_granted);
    CHECK(v.msg.request_vote_result.pre_vote == raft_tribool_false);
    m = {};
    m.type = RAFT_IO_TIMEOUT_NOW;
    m.server_id = 1;
    m.timeout_now = {3, 10, 2};
    DecodedMsg t;
    REQUIRE(decode(encode_all(m, 2), t));
    CHECK(t.msg.timeout_now.last_log_index == 10);
  }
}

TEST_CASE("every truncation of a raft message is refused") {
  std::vector<std::string> datas;
  std::vector<raft_entry> entries;
  raft_configuration conf;
  std::string data;
  std::vector<std::vector<uint8_t>> valid = {encode_all(vote_msg(), 1),
                                             encode_all(append_msg(datas, entries), 1),
                                             encode_all(snapshot_msg(conf, data), 1)};
  raft_configuration_close(&conf);
  for (const auto& bytes : valid) {
    for (size_t len = 0; len < bytes.size(); len++) {
      DecodedMsg d;
      INFO("length " << len << " of " << bytes.size());
      CHECK_FALSE(decode({bytes.data(), len}, d));
    }
    // And one byte too many.
    auto longer = bytes;
    longer.push_back(0);
    DecodedMsg d;
    std::string why;
    CHECK_FALSE(decode(longer, d, &why));
    // A snapshot's data runs to the end: an extra byte is a bad data length.
    CHECK((why == "trailing bytes" || why == "bad snapshot data length"));
  }
}

TEST_CASE("raft messages with bad fields are refused") {
  auto good = encode_all(vote_msg(), 1);
  auto refuse = [](std::vector<uint8_t> bytes, const std::string& want) {
    DecodedMsg d;
    std::string why;
    CHECK_FALSE(decode(bytes, d, &why));
    CHECK(why == want);
  };
  auto b = good;
  b[0] ^= 1;
  refuse(b, "bad magic");
  b = good;
  b[4] = 2;
  refuse(b, "unknown version");
  b = good;
  b[5] = 7;
  refuse(b, "unknown message type");
  b = good;
  b[5] = 0;
  refuse(b, "unknown message type");
  b = good;
  b[6] = 1;
  refuse(b, "reserved bits set");
  b = good;
  std::memset(b.data() + 8, 0, 8);
  refuse(b, "server id 0");
  b = good;
  b.back() = 4;  // vote flags beyond the two defined bits
  refuse(b, "bad vote flags");

  std::vector<std::string> datas;
  std::vector<raft_entry> entries;
  auto ae = encode_all(append_msg(datas, entries), 1);
  const size_t count_at = kRaftMsgHeaderBytes + 32;
  b = ae;
  b[count_at + 3] = 0x10;  // 2^28 entries claimed
  refuse(b, "too many entries");
  b = ae;
  b[count_at + 1] = 200;  // 51200 entries: more than bytes for their headers
  refuse(b, "entry count exceeds the message");
  b = ae;
  b[count_at + 4 + 8] = 9;  // first entry's type
  refuse(b, "bad entry type");
  b = ae;
  std::memset(b.data() + count_at + 4, 0, 8);  // first entry's term
  refuse(b, "entry with term 0");
  b = ae;
  b[count_at + 4 + 9 + 3] = 0x7f;  // first entry's length far past the end
  refuse(b, "truncated entry");

  raft_configuration conf;
  std::string data;
  auto snap = encode_all(snapshot_msg(conf, data), 1);
  raft_configuration_close(&conf);
  const size_t n_at = kRaftMsgHeaderBytes + 32;
  b = snap;
  b[n_at] = 0;
  refuse(b, "bad configuration size");
  b = snap;
  b[n_at + 4 + 24] = 1;  // second server's id (after 8+1+1+14 bytes): 1, a duplicate
  refuse(b, "bad configuration server");
  b = snap;
  b[n_at + 4 + 8] = 7;  // first server's role
  refuse(b, "bad configuration server");
  b = snap;
  b[n_at + 4 + 10] = 0;  // a NUL inside the first address
  refuse(b, "bad server address");
  b = snap;
  b[b.size() - data.size() - 8] += 1;  // data length one past the end
  refuse(b, "bad snapshot data length");
}

TEST_CASE("an AppendEntries too large for one message is cut to the entries that fit") {
  std::vector<std::string> datas;
  std::vector<raft_entry> entries;
  raft_message m = append_msg(datas, entries);
  const size_t all = encoded_size(m, 3);
  CHECK(entries_that_fit(m, all) == 3);
  CHECK(entries_that_fit(m, all - 1) == 2);
  CHECK(entries_that_fit(m, encoded_size(m, 1)) == 1);
  CHECK(entries_that_fit(m, encoded_size(m, 0)) == 0);
  std::vector<uint8_t> two(encoded_size(m, 2));
  encode(m, 1, 2, two.data());
  DecodedMsg d;
  REQUIRE(decode(two, d));
  CHECK(d.msg.append_entries.n_entries == 2);
}

TEST_CASE("an AppendEntries on the wire never lets a follower commit past what it carries") {
  // Given a leader whose commit index is past the entries this message
  // carries (a follower catching up, or a message cut to fit)
  std::vector<std::string> datas;
  std::vector<raft_entry> entries;
  raft_message m = append_msg(datas, entries);  // prev_log_index 100, 3 entries
  m.append_entries.leader_commit = 150;
  // Expect leader_commit capped at the last index carried
  CHECK(wire_message(m, 3).append_entries.leader_commit == 103);
  CHECK(wire_message(m, 1).append_entries.leader_commit == 101);
  CHECK(wire_message(m, 0).append_entries.leader_commit == 100);
  // and left alone when it is below that, and for other types
  m.append_entries.leader_commit = 99;
  CHECK(wire_message(m, 3).append_entries.leader_commit == 99);
  raft_configuration conf;
  std::string data;
  raft_message snap = snapshot_msg(conf, data);
  CHECK(wire_message(snap, 0).install_snapshot.last_index == 1000);
  raft_configuration_close(&conf);
}

TEST_CASE("random mutations of raft messages never crash the decoder") {
  std::vector<std::string> datas;
  std::vector<raft_entry> entries;
  raft_configuration conf;
  std::string data;
  std::vector<std::vector<uint8_t>> seeds = {encode_all(vote_msg(), 1),
                                             encode_all(append_msg(datas, entries), 1),
                                             encode_all(snapshot_msg(conf, data), 1)};
  raft_configuration_close(&conf);
  std::mt19937 rng(12345);
  size_t accepted = 0;
  for (int i = 0; i < 30000; i++) {
    auto bytes = seeds[static_cast<size_t>(i) % seeds.size()];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; f++) {
      const size_t at = rng() % bytes.size();
      bytes[at] = static_cast<uint8_t>(rng() % 3 == 0 ? bytes[at] ^ (1u << (rng() % 8)) : rng());
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    // Whatever decodes must re-encode to the same bytes (aborts otherwise).
    if (fuzz_decode_roundtrip(bytes.data(), bytes.size())) accepted++;
  }
  // Mutations of payload bytes keep the message valid; of headers, not.
  CHECK(accepted > 0);
  CHECK(accepted < 30000);
}

TEST_CASE("client commands, replies and snapshots round-trip and refuse bad input") {
  KvCommand put{KvOp::kPut, "key", "value"};
  auto bytes = encode_command(put);
  auto back = decode_command(bytes);
  REQUIRE(back);
  CHECK(back->key == "key");
  CHECK(back->value == "value");
  for (size_t len = 0; len < bytes.size(); len++) {
    CHECK_FALSE(decode_command({bytes.data(), len}));
  }
  auto b = bytes;
  b[0] = 3;
  CHECK_FALSE(decode_command(b));  // unknown op
  b = encode_command(KvCommand{KvOp::kGet, "k", ""});
  b[3] = 1;  // a get with a value length
  CHECK_FALSE(decode_command(b));
  CHECK_FALSE(decode_command(encode_command(KvCommand{KvOp::kPut, std::string(300, 'k'), ""})));
  // Log entries are padded to 8 bytes (raft_uv needs it): zeros only.
  for (size_t key = 0; key < 20; key++) {
    auto padded = encode_command(KvCommand{KvOp::kPut, std::string(key, 'k'), "v"});
    CHECK(padded.size() % 8 == 0);
    REQUIRE(decode_command(padded));
    if (padded.size() > 7 + key + 1) {
      padded.back() = 1;  // a non-zero pad byte
      CHECK_FALSE(decode_command(padded));
    }
    padded.resize(padded.size() + 8);  // a whole extra word of zeros
    CHECK_FALSE(decode_command(padded));
  }

  KvReply rep{KvStatus::kNotLeader, 3, "10.0.0.3:1", 0, false, ""};
  auto rb = encode_reply(rep);
  auto rback = decode_reply(rb);
  REQUIRE(rback);
  CHECK(rback->status == KvStatus::kNotLeader);
  CHECK(rback->leader_id == 3);
  CHECK(rback->leader_address == "10.0.0.3:1");
  rb[0] = 9;
  CHECK_FALSE(decode_reply(rb));

  KvMap map{{"a", "1"}, {"bb", std::string(100, 'z')}};
  auto sb = encode_snapshot(map);
  auto sback = decode_snapshot(sb);
  REQUIRE(sback);
  CHECK(*sback == map);
  for (size_t len = 0; len < sb.size(); len++) CHECK_FALSE(decode_snapshot({sb.data(), len}));
  sb[4] = 0xff;  // a pair count far beyond the bytes
  CHECK_FALSE(decode_snapshot(sb));
}

TEST_CASE("the in-memory store gives back what it was given") {
  MemoryStore store;
  raft_configuration conf;
  raft_configuration_init(&conf);
  REQUIRE(raft_configuration_add(&conf, 1, "a:1", RAFT_VOTER) == 0);
  REQUIRE(store.bootstrap(conf) == 0);
  CHECK(store.bootstrap(conf) == RAFT_CANTBOOTSTRAP);
  raft_configuration_close(&conf);
  store.set_term(3);
  store.set_vote(2);
  std::string d[4] = {"e2", "e3", "e4", "e5"};
  raft_entry es[4];
  for (int i = 0; i < 4; i++)
    es[i] = raft_entry{3, RAFT_COMMAND, {d[i].data(), d[i].size()}, nullptr};
  store.append(es, 4);
  CHECK(store.last_index() == 5);
  store.truncate(5);  // drops e5
  CHECK(store.last_index() == 4);

  raft_term term;
  raft_id vote;
  raft_snapshot* snap;
  raft_index start;
  raft_entry* entries;
  size_t n;
  REQUIRE(store.load(&term, &vote, &snap, &start, &entries, &n) == 0);
  CHECK(term == 3);
  CHECK(vote == 2);
  CHECK(snap == nullptr);
  CHECK(start == 1);
  REQUIRE(n == 4);
  CHECK(entries[0].type == RAFT_CHANGE);
  CHECK(std::string(static_cast<char*>(entries[3].buf.base), entries[3].buf.len) == "e4");
  raft_free(entries[0].batch);
  raft_free(entries);

  // A snapshot at 3 keeping 1 trailing entry: entries 3 and 4 remain.
  raft_snapshot s{};
  s.index = 3;
  s.term = 3;
  raft_configuration_init(&s.configuration);
  REQUIRE(raft_configuration_add(&s.configuration, 1, "a:1", RAFT_VOTER) == 0);
  std::string sd = "state";
  raft_buffer buf{sd.data(), sd.size()};
  s.bufs = &buf;
  s.n_bufs = 1;
  REQUIRE(store.snapshot_put(1, s) == 0);
  CHECK(store.start_index() == 3);
  CHECK(store.num_entries() == 2);
  // An installed snapshot (trailing 0) replaces the whole log.
  s.index = 10;
  REQUIRE(store.snapshot_put(0, s) == 0);
  CHECK(store.num_entries() == 0);
  CHECK(store.start_index() == 11);
  raft_configuration_close(&s.configuration);
  REQUIRE(store.load(&term, &vote, &snap, &start, &entries, &n) == 0);
  REQUIRE(snap != nullptr);
  CHECK(snap->index == 10);
  CHECK(start == 11);
  CHECK(n == 0);
  CHECK(std::string(static_cast<char*>(snap->bufs[0].base), snap->bufs[0].len) == "state");
  raft_configuration_close(&snap->configuration);
  raft_free(snap->bufs[0].base);
  raft_free(snap->bufs);
  raft_free(snap);
}

TEST_CASE("--peers lists are parsed strictly") {
  auto p = parse_peers("1=10.0.0.1:1,2=10.0.0.2:1,3=10.0.0.3:1");
  REQUIRE(p);
  CHECK(p->size() == 3);
  CHECK(p->at(2) == "10.0.0.2:1");
  CHECK_FALSE(parse_peers(""));
  CHECK_FALSE(parse_peers("1=a:1,1=b:1"));  // duplicate id
  CHECK_FALSE(parse_peers("1=a:1,2=a:1"));  // duplicate address
  CHECK_FALSE(parse_peers("0=a:1"));        // id 0
  CHECK_FALSE(parse_peers("x=a:1"));
  CHECK_FALSE(parse_peers("1=nocolon"));
  CHECK_FALSE(parse_peers("1=a:1,"));
}
