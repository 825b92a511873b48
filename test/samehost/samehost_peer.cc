// samehost_peer: the processes of the samehost hostile-peer tests
// (test/samehost/test_samehost_peers.cc): a server and a client over the
// `samehost` transport, either of which may be made hostile. Uses only the
// public API and links the shared library.
//
//   samehost_peer server [--uri 127.0.0.1:0] [--failure-timeout-ms N] [--max-seconds S]
//   samehost_peer client --server URI [--sessions N] [--window W]
//                        [--sizes 32,4K,64K,1M] [--requests N | --duration-ms D]
//                        [--request-timeout-ms N] [--failure-timeout-ms N] [--timeout-s S]
//                        [--expect-peer-exit | --allow-reset [--allow-bad-data]
//                         [--allow-no-progress]]
//   samehost_peer scribble --role server|client --scribble-s D [that role's options]
//
// A request is `size` bytes: an 8-byte little-endian id, then a pattern
// derived from the id. The server checks it and echoes it whole; the
// client checks every byte of every response.
//
// Both keep a canary: memory of their own (a heap block and a message
// buffer from their Rpc) filled with a known pattern, checked every
// kCanaryCheckPeriod and at exit. A changed canary prints "CANARY
// CORRUPTED" and exits 3 at once.
//
// Server: prints "listening on URI" when ready, one line per server
// session event ("server_session n=K event=E reason=R"; n counts the
// resets), and on SIGTERM/SIGINT (or after --max-seconds) "canary intact"
// and its counters, then exits 0.
//
// Client: opens --sessions sessions and keeps --window requests in flight
// on each, sizes in turn, until --requests completed or --duration-ms
// passed. Prints "streaming" once every size has come back right twice,
// "progress ..." every second, "session K ended: event=E reason=R" for
// each session that ends, and at the end its counts. Every continuation
// must run exactly once (a second run, or one that never came, fails).
//   default             every request completes kOk with correct data
//   --allow-reset       a request may also end kSessionReset or kTimedOut;
//                       a session that ends (or fails to connect) is
//                       opened again; at least one request must succeed
//   --allow-bad-data    (with --allow-reset) a kOk response with wrong bytes,
//                       or any other Errc, is counted, not a failure: a
//                       hostile server may rewrite a response (its bytes,
//                       size or status) in our ring before we copy it
//   --allow-no-progress (with --allow-reset) no request need succeed: a
//                       hostile server may stop answering altogether
//   --expect-peer-exit  stream until the server dies: every session must
//                       end with kReset and SmErr::kPeerExited, every request
//                       in flight with kSessionReset; prints "all_ended
//                       after_first_ms=T" when the last one has run
//
// Scribble: the same role, plus a thread that for --scribble-s seconds
// writes random bytes at random offsets into every mapping of a samehost
// region in this process (/proc/self/maps, "/memfd:librpc-samehost"),
// header page, consumer indices and slot words included, as fast as it
// can (in turns with phases aimed at packets only, and sparse ones: see
// Aim). Writes go through process_vm_writev on ourselves, so a region the
// Rpc unmaps meanwhile fails the write (EFAULT) instead of killing us.
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "librpc/rpc_all.h"

#include "cli.h"  // tools/measure: exit statuses, sizes with suffixes

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr rpc::ReqType kEchoReqType = 7;
constexpr size_t kIdBytes = 8;
constexpr auto kCanaryCheckPeriod = 200ms;
constexpr size_t kHeapCanaryBytes = 8 << 20;
constexpr size_t kBufferCanaryBytes = 2 << 20;
constexpr int kCanaryExit = 3;

std::atomic<bool> g_stop{false};

void on_stop_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

long long mono_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

// ------------------------------------------------------------- payloads

uint64_t mix64(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint8_t pattern_byte(uint64_t h, size_t i) {
  return static_cast<uint8_t>((h >> ((i & 7) * 8)) + i * 131 + (i >> 8));
}

// A message of `size` bytes (>= kIdBytes): the id, then its pattern.
void fill_message(uint8_t* p, size_t size, uint64_t id) {
  for (size_t i = 0; i < kIdBytes; i++) p[i] = static_cast<uint8_t>(id >> (8 * i));
  const uint64_t h = mix64(id);
  for (size_t i = kIdBytes; i < size; i++) p[i] = pattern_byte(h, i);
}

uint64_t load_id(const uint8_t* p) {
  uint64_t id = 0;
  for (size_t i = 0; i < kIdBytes; i++) id |= uint64_t{p[i]} << (8 * i);
  return id;
}

bool check_message(const uint8_t* p, size_t size, uint64_t id) {
  if (size < kIdBytes || load_id(p) != id) return false;
  const uint64_t h = mix64(id);
  for (size_t i = kIdBytes; i < size; i++) {
    if (p[i] != pattern_byte(h, i)) return false;
  }
  return true;
}

// ------------------------------------------------------------- canary

// Memory of our own that nothing should ever write: one block from the
// heap, one message buffer from the Rpc's allocator (where bulk reads and
// multi-packet messages land).
class Canary {
 public:
  explicit Canary(rpc::Rpc& rpc) : rpc_(rpc), heap_(kHeapCanaryBytes) {
    buf_ = rpc.alloc_msg_buffer(kBufferCanaryBytes);
    fill_message(heap_.data(), heap_.size(), kHeapSeed);
    if (buf_.valid()) fill_message(buf_.data(), buf_.size(), kBufferSeed);
  }
  ~Canary() { rpc_.free_msg_buffer(buf_); }
  Canary(const Canary&) = delete;
  Canary& operator=(const Canary&) = delete;

  bool intact() const {
    return buf_.valid() && buf_.size() == kBufferCanaryBytes &&
           check_message(heap_.data(), heap_.size(), kHeapSeed) &&
           check_message(buf_.data(), buf_.size(), kBufferSeed);
  }
  // Every kCanaryCheckPeriod: exits the process when it changed.
  void check_now_and_then() {
    if (Clock::now() < next_check_) return;
    next_check_ = Clock::now() + kCanaryCheckPeriod;
    check_or_exit();
  }
  void check_or_exit() const {
    if (intact()) return;
    std::printf("CANARY CORRUPTED\n");
    std::fflush(stdout);
    std::_Exit(kCanaryExit);
  }

 private:
  static constexpr uint64_t kHeapSeed = 0xc0ffee;
  static constexpr uint64_t kBufferSeed = 0xbadcafe;
  rpc::Rpc& rpc_;
  std::vector<uint8_t> heap_;
  rpc::MsgBuffer buf_;
  Clock::time_point next_check_ = Clock::now();
};

// ------------------------------------------------------------- scribbler

// The transport's region geometry with its default 4096-byte packets
// (samehost_ring.h), to aim some writes at slot words.
constexpr size_t kRegionPageBytes = 4096;
constexpr size_t kSlotStride = (16 + 4096 + 63) / 64 * 64;

struct Region {
  uintptr_t start;
  size_t bytes;
};

std::vector<Region> samehost_regions() {
  std::vector<Region> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:librpc-samehost") == std::string::npos) continue;
    unsigned long long lo = 0;
    unsigned long long hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2 || hi <= lo) continue;
    out.push_back(Region{static_cast<uintptr_t>(lo), static_cast<size_t>(hi - lo)});
  }
  return out;
}

struct ScribbleStats {
  std::atomic<uint64_t> writes{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> faults{0};
  std::atomic<uint64_t> regions_seen{0};
};

uint64_t xorshift(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// What a batch of writes aims at. Run flat out over everything, the
// scribbler breaks a ring's sequence words within microseconds and the
// other side only ever sees a ring that stalls; so it also spends time on
// packets only (headers and payloads in their slots: corrupt packets that
// reach the engine) and writing sparsely (most packets intact, a few
// wrong), a phase of kPhase each, in turn.
enum class Aim : uint8_t { kAnything, kPackets, kSparse };
constexpr auto kPhase = 500ms;
constexpr size_t kBatch = 512;
constexpr auto kSparsePause = 200us;
constexpr size_t kPktHdrBytes = 16;

// Where one write goes and how long it is, within region r.
iovec aim_write(const Region& r, Aim aim, uint64_t& rng) {
  const uint64_t pick = xorshift(rng);
  const size_t slots = std::max<size_t>((r.bytes - kRegionPageBytes) / kSlotStride, 1);
  const size_t slot = kRegionPageBytes + (pick >> 24) % slots * kSlotStride;
  size_t off;
  size_t len = 1 + (pick >> 8) % 8;
  switch (aim == Aim::kPackets ? 4 + pick % 4 : pick % 8) {
    case 0:  // a consumer index, whole
      off = (pick >> 16 & 1) != 0 ? 64 : 128;
      len = 8;
      break;
    case 1:  // the header page
      off = (pick >> 16) % kRegionPageBytes;
      break;
    case 2:  // a slot's sequence or length word
      off = slot + ((pick >> 12 & 1) != 0 ? 8 : 0);
      len = (pick >> 12 & 1) != 0 ? 4 : 8;
      break;
    case 4:
    case 5:  // one byte of a packet header
      off = slot + kPktHdrBytes + (pick >> 16) % kPktHdrBytes;
      len = 1;
      break;
    case 6:
    case 7:  // a packet's payload
      off = slot + 2 * kPktHdrBytes + (pick >> 16) % (kSlotStride - 2 * kPktHdrBytes);
      break;
    default:  // anywhere
      off = (pick >> 16) % r.bytes;
      break;
  }
  off = std::min(off, r.bytes - 1);
  return iovec{reinterpret_cast<void*>(r.start + off), std::min(len, r.bytes - off)};
}

// One batch of n random writes into `regions`. Returns false when a write
// failed (a region went away: time to look again).
bool scribble_batch(const std::vector<Region>& regions, Aim aim, size_t n, uint64_t& rng,
                    ScribbleStats& st) {
  std::array<uint8_t, kBatch * 8> data;
  std::array<iovec, kBatch> remote;
  for (size_t i = 0; i < data.size(); i += 8) {
    const uint64_t v = xorshift(rng);
    std::memcpy(&data[i], &v, 8);
  }
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    remote[i] = aim_write(regions[xorshift(rng) % regions.size()], aim, rng);
    total += remote[i].iov_len;
  }
  // One buffer of random bytes feeds every write.
  iovec local{data.data(), total};
  const ssize_t got = process_vm_writev(getpid(), &local, 1, remote.data(), n, 0);
  st.writes.fetch_add(n, std::memory_order_relaxed);
  if (got > 0) st.bytes.fetch_add(static_cast<uint64_t>(got), std::memory_order_relaxed);
  if (got != static_cast<ssize_t>(total)) {
    st.faults.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void scribble(double seconds, const std::atomic<bool>& stop, ScribbleStats& st) {
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  uint64_t rng = mix64(static_cast<uint64_t>(getpid()) ^ 0x5c71bb1e) | 1;
  std::vector<Region> regions;
  auto next_scan = Clock::now();
  while (!stop.load(std::memory_order_relaxed) && Clock::now() < end) {
    if (Clock::now() >= next_scan) {
      regions = samehost_regions();
      st.regions_seen.store(regions.size(), std::memory_order_relaxed);
      next_scan = Clock::now() + 5ms;
    }
    if (regions.empty()) {
      std::this_thread::sleep_for(1ms);
      continue;
    }
    const auto aim = static_cast<Aim>((Clock::now() - start) / kPhase % 3);
    const bool sparse = aim == Aim::kSparse;
    if (!scribble_batch(regions, aim, sparse ? 1 : kBatch, rng, st)) next_scan = Clock::now();
    if (sparse) std::this_thread::sleep_for(kSparsePause);
  }
}

// Starts the scribbler thread when seconds > 0; joins it with the object.
class Scribbler {
 public:
  explicit Scribbler(double seconds) {
    if (seconds > 0) thread_ = std::thread([this, seconds] { scribble(seconds, stop_, stats_); });
  }
  ~Scribbler() { stop(); }
  Scribbler(const Scribbler&) = delete;
  Scribbler& operator=(const Scribbler&) = delete;
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) {
      thread_.join();
      std::printf("scribbled writes=%llu bytes=%llu faults=%llu regions=%llu\n",
                  static_cast<unsigned long long>(stats_.writes.load()),
                  static_cast<unsigned long long>(stats_.bytes.load()),
                  static_cast<unsigned long long>(stats_.faults.load()),
                  static_cast<unsigned long long>(stats_.regions_seen.load()));
    }
  }

 private:
  std::atomic<bool> stop_{false};
  ScribbleStats stats_;
  std::thread thread_;
};

// ------------------------------------------------------------- options

struct Options {
  // both
  uint64_t failure_timeout_ms = 60000;  // far longer than any test: death is noticed otherwise
  double scribble_s = 0;
  // server
  std::string uri = "127.0.0.1:0";
  uint64_t max_seconds = 300;
  // client
  std::string server;
  uint64_t sessions = 4;
  uint64_t window = 4;
  std::vector<size_t> sizes{32, 4 << 10, 64 << 10, 1 << 20};
  uint64_t requests = 0;
  uint64_t duration_ms = 0;
  uint64_t request_timeout_ms = 30000;
  uint64_t timeout_s = 60;
  bool expect_peer_exit = false;
  bool allow_reset = false;
  bool allow_bad_data = false;
  bool allow_no_progress = false;
};

rpc::NexusConfig nexus_config(const std::string& uri, uint64_t failure_timeout_ms) {
  return rpc::NexusConfig{.uri = uri,
                          .heartbeat_interval_ms = 100,
                          .failure_timeout_ms = static_cast<uint32_t>(failure_timeout_ms)};
}

// ------------------------------------------------------------- server

struct ServerState {
  uint64_t handler_runs = 0;
  uint64_t bad_data = 0;  // requests that were not what an honest client sends
  uint64_t resets = 0;
};

void handle_echo(rpc::ReqHandle& h) {
  auto& st = *static_cast<ServerState*>(h.context());
  st.handler_runs++;
  const rpc::MsgBuffer& req = h.request();
  const size_t size = req.size();
  if (size < kIdBytes || !check_message(req.data(), size, load_id(req.data()))) st.bad_data++;
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  if (size <= pre.max_size()) {
    std::memcpy(pre.data(), req.data(), size);
    pre.resize(size);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer resp = h.rpc().alloc_msg_buffer(size);
  if (!resp.valid()) {  // an empty response fails the client's check
    st.bad_data++;
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  std::memcpy(resp.data(), req.data(), size);
  h.rpc().enqueue_response(h, resp);
}

int run_server(const Options& o) {
  ServerState st;
  try {
    rpc::Nexus nexus(nexus_config(o.uri, o.failure_timeout_ms));
    if (auto ok = nexus.register_handler(kEchoReqType, handle_echo); !ok) {
      std::fprintf(stderr, "samehost_peer server: %s\n", ok.error().c_str());
      return 1;
    }
    auto on_session = [&st](const rpc::ServerSessionEvent& e) {
      if (e.event == rpc::SessionEvent::kReset) st.resets++;
      std::printf("server_session n=%llu event=%s reason=%s client=%s t_ms=%lld\n",
                  static_cast<unsigned long long>(st.resets),
                  std::string(rpc::to_string(e.event)).c_str(),
                  std::string(rpc::to_string(e.reason)).c_str(), e.client_uri.c_str(), mono_ms());
    };
    rpc::Rpc rpc(nexus, rpc::RpcConfig{.rpc_id = 0,
                                       .transport = "samehost",
                                       .server_session_callback = on_session,
                                       .context = &st});
    Canary canary(rpc);
    canary.check_or_exit();
    Scribbler scribbler(o.scribble_s);
    std::printf("listening on %s\n", nexus.uri().c_str());
    const auto end = Clock::now() + std::chrono::seconds(o.max_seconds);
    while (!g_stop.load(std::memory_order_relaxed) && Clock::now() < end) {
      rpc.run_event_loop(10ms);
      canary.check_now_and_then();
    }
    scribbler.stop();
    canary.check_or_exit();
    std::printf("canary intact\n");
    const rpc::RpcStats& s = rpc.stats();
    std::printf(
        "server_stats handler_runs=%llu bad_data=%llu resets=%llu rx_pkts=%llu "
        "drops_bad_magic=%llu drops_bad_header=%llu drops_unknown_session=%llu "
        "drops_wrong_source=%llu bulk_paths_failed=%llu bulk_reads=%llu duplicate_requests=%llu\n",
        static_cast<unsigned long long>(st.handler_runs),
        static_cast<unsigned long long>(st.bad_data), static_cast<unsigned long long>(st.resets),
        static_cast<unsigned long long>(s.rx_pkts),
        static_cast<unsigned long long>(s.drops.bad_magic),
        static_cast<unsigned long long>(s.drops.bad_header),
        static_cast<unsigned long long>(s.drops.unknown_session),
        static_cast<unsigned long long>(s.drops.wrong_source),
        static_cast<unsigned long long>(s.bulk_paths_failed),
        static_cast<unsigned long long>(s.bulk_reads),
        static_cast<unsigned long long>(s.duplicate_requests));
    std::fflush(stdout);
  } catch (const rpc::Error& e) {
    std::fprintf(stderr, "samehost_peer server: %s\n", e.what());
    return 1;
  }
  return 0;
}

// ------------------------------------------------------------- client

struct Client;

struct Call {
  Client* client = nullptr;
  size_t session = 0;  // index into Client::sessions
  rpc::MsgBuffer req;
  rpc::MsgBuffer resp;
  uint64_t id = 0;
  size_t size = 0;
  bool busy = false;
};

struct Session {
  rpc::SessionNum sn = rpc::kInvalidSessionNum;
  bool connected = false;
  bool ended = false;  // reset, disconnected or connect failed
  rpc::SessionEvent end_event = rpc::SessionEvent::kConnected;
  rpc::SmErr reason = rpc::SmErr::kNone;
  size_t in_flight = 0;
  uint64_t opened = 0;
};

struct Client {
  const Options* o = nullptr;
  std::vector<Session> sessions;
  std::vector<Call> calls;
  std::vector<uint64_t> ok_by_size;
  uint64_t next_id = 0;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  uint64_t ok = 0;
  uint64_t reset = 0;
  uint64_t timed_out = 0;
  uint64_t bad_data = 0;
  uint64_t other_errors = 0;
  uint64_t double_runs = 0;  // a continuation for a request not in flight
  uint64_t sessions_ended = 0;
  uint64_t ended_not_peer_exit = 0;
  std::string first_error;
  std::map<std::string, uint64_t> errors;  // other_errors by Errc
  long long first_reset_ms = -1;

  Session* session_of(rpc::SessionNum sn) {
    for (Session& s : sessions) {
      if (s.sn == sn && !s.ended) return &s;
    }
    return nullptr;
  }

  void on_session_event(rpc::SessionNum sn, rpc::SessionEvent e, rpc::SmErr err) {
    Session* s = session_of(sn);
    if (s == nullptr) return;
    if (e == rpc::SessionEvent::kConnected) {
      s->connected = true;
      return;
    }
    s->connected = false;
    s->ended = true;
    s->end_event = e;
    s->reason = err;
    sessions_ended++;
    if (e != rpc::SessionEvent::kReset || err != rpc::SmErr::kPeerExited) ended_not_peer_exit++;
    if (first_reset_ms < 0) first_reset_ms = mono_ms();
    std::printf("session %zu ended: event=%s reason=%s t_ms=%lld\n",
                static_cast<size_t>(s - sessions.data()), std::string(rpc::to_string(e)).c_str(),
                std::string(rpc::to_string(err)).c_str(), mono_ms());
  }

  static void on_done(rpc::Rpc&, const rpc::Completion& c) {
    Call& call = *static_cast<Call*>(c.tag);
    Client& cl = *call.client;
    if (!call.busy) {
      cl.double_runs++;
      return;
    }
    call.busy = false;
    cl.sessions[call.session].in_flight--;
    cl.completed++;
    if (c.errc == rpc::Errc::kOk) {
      if (c.resp_size == call.size && call.resp.size() == call.size &&
          check_message(call.resp.data(), call.size, call.id)) {
        cl.ok++;
        cl.ok_by_size[call.id % cl.o->sizes.size()]++;
      } else {
        cl.bad_data++;
      }
    } else if (c.errc == rpc::Errc::kSessionReset) {
      cl.reset++;
    } else if (c.errc == rpc::Errc::kTimedOut) {
      cl.timed_out++;
    } else {
      cl.other_errors++;
      cl.errors[std::string(rpc::to_string(c.errc))]++;
      if (cl.first_error.empty()) cl.first_error = std::string(rpc::to_string(c.errc));
    }
  }

  bool send(rpc::Rpc& rpc, size_t si) {
    for (Call& call : calls) {
      if (call.busy || call.session != si) continue;
      call.id = next_id;
      call.size = std::max(kIdBytes, o->sizes[call.id % o->sizes.size()]);
      call.req.resize(call.size);
      fill_message(call.req.data(), call.size, call.id);
      call.resp.resize(call.resp.max_size());
      const rpc::Errc e =
          rpc.enqueue_request(sessions[si].sn, kEchoReqType, call.req, call.resp, on_done, &call);
      if (e != rpc::Errc::kOk) {
        other_errors++;
        if (first_error.empty()) first_error = "enqueue: " + std::string(rpc::to_string(e));
        return false;
      }
      next_id++;
      call.busy = true;
      sessions[si].in_flight++;
      enqueued++;
      return true;
    }
    return false;
  }

  bool open(rpc::Rpc& rpc, size_t si) {
    auto sn = rpc.create_session(o->server, 0);
    if (!sn) {
      std::fprintf(stderr, "samehost_peer client: create_session: %s\n", sn.error().c_str());
      return false;
    }
    sessions[si] = Session{.sn = *sn, .opened = sessions[si].opened + 1};
    return true;
  }

  bool streaming() const {
    return std::all_of(ok_by_size.begin(), ok_by_size.end(), [](uint64_t n) { return n >= 2; });
  }
  size_t in_flight() const {
    size_t n = 0;
    for (const Session& s : sessions) n += s.in_flight;
    return n;
  }
};

int run_client(const Options& o) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(o.timeout_s);
  Client cl;
  cl.o = &o;
  cl.sessions.resize(o.sessions);
  cl.ok_by_size.assign(o.sizes.size(), 0);
  bool pass = true;
  std::string why;
  uint64_t ended_while_running = 0;  // sessions that ended before we left
  try {
    rpc::Nexus nexus(nexus_config("127.0.0.1:0", o.failure_timeout_ms));
    rpc::Rpc rpc(
        nexus, rpc::RpcConfig{
                   .rpc_id = 0,
                   .transport = "samehost",
                   .request_timeout_ms = static_cast<uint32_t>(o.request_timeout_ms),
                   .session_callback = [&cl](rpc::SessionNum s, rpc::SessionEvent e,
                                             rpc::SmErr err) { cl.on_session_event(s, e, err); }});
    Canary canary(rpc);
    canary.check_or_exit();
    const size_t max_size = std::max(kIdBytes, *std::max_element(o.sizes.begin(), o.sizes.end()));
    if (max_size > rpc.max_msg_size()) {
      std::fprintf(stderr, "samehost_peer client: size %zu exceeds max_msg_size %zu\n", max_size,
                   rpc.max_msg_size());
      return 2;
    }
    cl.calls.resize(o.sessions * o.window);
    for (size_t i = 0; i < cl.calls.size(); i++) {
      Call& call = cl.calls[i];
      call.client = &cl;
      call.session = i / o.window;
      call.req = rpc.alloc_msg_buffer(max_size);
      call.resp = rpc.alloc_msg_buffer(max_size);
      if (!call.req.valid() || !call.resp.valid()) {
        std::fprintf(stderr, "samehost_peer client: cannot allocate buffers\n");
        return 1;
      }
    }
    for (size_t si = 0; si < cl.sessions.size(); si++) {
      if (!cl.open(rpc, si)) return 1;
    }
    while (Clock::now() < deadline && !g_stop.load() &&
           !std::all_of(cl.sessions.begin(), cl.sessions.end(),
                        [](const Session& s) { return s.connected || s.ended; })) {
      rpc.run_event_loop_once();
    }
    // With --allow-reset a session that could not connect (a hostile
    // server's region) is opened again below, like one that ended.
    if (!o.allow_reset && !std::all_of(cl.sessions.begin(), cl.sessions.end(),
                                       [](const Session& s) { return s.connected; })) {
      std::printf("FAILED: could not connect every session\n");
      return 1;
    }
    std::printf("connected to %s\n", o.server.c_str());
    Scribbler scribbler(o.scribble_s);

    const auto stream_end =
        o.duration_ms != 0 ? start + std::chrono::milliseconds(o.duration_ms) : deadline;
    bool streaming_printed = false;
    auto next_progress = Clock::now() + 1s;
    for (;;) {
      const auto now = Clock::now();
      if (g_stop.load() || now > deadline) break;
      const bool sending = now < stream_end && (o.requests == 0 || cl.enqueued < o.requests);
      if (o.expect_peer_exit) {
        if (cl.sessions_ended == cl.sessions.size() && cl.in_flight() == 0) break;
      } else if (!sending && cl.in_flight() == 0) {
        break;
      }
      if (!o.allow_reset && !o.expect_peer_exit && cl.sessions_ended != 0) break;
      for (size_t si = 0; si < cl.sessions.size(); si++) {
        Session& s = cl.sessions[si];
        if (s.ended && o.allow_reset && s.in_flight == 0 && sending) {
          if (!cl.open(rpc, si)) break;
          continue;
        }
        while (sending && s.connected && s.in_flight < o.window &&
               (o.requests == 0 || cl.enqueued < o.requests)) {
          if (!cl.send(rpc, si)) break;
        }
      }
      if ((cl.other_errors > 0 && !o.allow_bad_data) || cl.double_runs > 0) break;
      rpc.run_event_loop_once();
      canary.check_now_and_then();
      if (!streaming_printed && cl.streaming()) {
        std::printf("streaming\n");
        streaming_printed = true;
      }
      if (Clock::now() >= next_progress) {
        next_progress += 1s;
        std::printf("progress ok=%llu reset=%llu timed_out=%llu bad_data=%llu in_flight=%zu\n",
                    static_cast<unsigned long long>(cl.ok),
                    static_cast<unsigned long long>(cl.reset),
                    static_cast<unsigned long long>(cl.timed_out),
                    static_cast<unsigned long long>(cl.bad_data), cl.in_flight());
      }
    }
    if (o.expect_peer_exit && cl.sessions_ended == cl.sessions.size() && cl.in_flight() == 0) {
      std::printf("all_ended after_first_ms=%lld t_ms=%lld\n", mono_ms() - cl.first_reset_ms,
                  mono_ms());
    }
    scribbler.stop();
    ended_while_running = cl.sessions_ended;
    // Leave politely (best effort) so the server frees its ends now.
    if (cl.in_flight() == 0) {
      for (Session& s : cl.sessions) {
        if (s.connected) (void)rpc.destroy_session(s.sn);
      }
      const auto leave_by = Clock::now() + 2s;
      while (Clock::now() < leave_by && std::any_of(cl.sessions.begin(), cl.sessions.end(),
                                                    [](const Session& s) { return s.connected; })) {
        rpc.run_event_loop_once();
      }
    }
    canary.check_or_exit();
    std::printf("canary intact\n");
    const rpc::RpcStats& s = rpc.stats();
    std::printf(
        "client_stats tx_pkts=%llu rx_pkts=%llu retransmissions=%llu bulk_reads=%llu "
        "bulk_reads_failed=%llu drops_bad_magic=%llu drops_bad_header=%llu drops_stale=%llu "
        "drops_out_of_order=%llu drops_wrong_source=%llu\n",
        static_cast<unsigned long long>(s.tx_pkts), static_cast<unsigned long long>(s.rx_pkts),
        static_cast<unsigned long long>(s.retransmissions),
        static_cast<unsigned long long>(s.bulk_reads),
        static_cast<unsigned long long>(s.bulk_reads_failed),
        static_cast<unsigned long long>(s.drops.bad_magic),
        static_cast<unsigned long long>(s.drops.bad_header),
        static_cast<unsigned long long>(s.drops.stale),
        static_cast<unsigned long long>(s.drops.out_of_order),
        static_cast<unsigned long long>(s.drops.wrong_source));
    const size_t left = cl.in_flight();
    if (left != 0) {
      pass = false;
      why = std::to_string(left) + " requests still in flight";
    }
    // ~Rpc runs the continuations of anything still outstanding; the
    // buffers are freed with the process.
  } catch (const rpc::Error& e) {
    std::fprintf(stderr, "samehost_peer client: %s\n", e.what());
    return 1;
  }
  std::printf(
      "completed=%llu enqueued=%llu ok=%llu reset=%llu timed_out=%llu bad_data=%llu "
      "other_errors=%llu double_runs=%llu sessions_ended=%llu elapsed_ms=%lld\n",
      static_cast<unsigned long long>(cl.completed), static_cast<unsigned long long>(cl.enqueued),
      static_cast<unsigned long long>(cl.ok), static_cast<unsigned long long>(cl.reset),
      static_cast<unsigned long long>(cl.timed_out), static_cast<unsigned long long>(cl.bad_data),
      static_cast<unsigned long long>(cl.other_errors),
      static_cast<unsigned long long>(cl.double_runs),
      static_cast<unsigned long long>(ended_while_running),
      static_cast<long long>(
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()));
  auto fail = [&](const std::string& w) {
    if (pass) why = w;
    pass = false;
  };
  if (cl.completed != cl.enqueued) fail("continuations missing");
  if (cl.double_runs != 0) fail("a continuation ran twice");
  for (const auto& [errc, n] : cl.errors) {
    std::printf("errors %s: %llu\n", errc.c_str(), static_cast<unsigned long long>(n));
  }
  if (cl.other_errors != 0 && !o.allow_bad_data) fail("request failed: " + cl.first_error);
  if (cl.bad_data != 0 && !o.allow_bad_data) fail("wrong response data");
  if (o.expect_peer_exit) {
    if (cl.sessions_ended != cl.sessions.size()) fail("not every session ended");
    if (cl.ended_not_peer_exit != 0) fail("a session ended otherwise than kReset/kPeerExited");
    if (cl.reset == 0) fail("no request completed with kSessionReset");
    if (cl.timed_out != 0) fail("a request timed out");
  } else if (o.allow_reset) {
    if (cl.ok == 0 && !o.allow_no_progress) fail("no request got through");
  } else {
    if (ended_while_running != 0) fail("a session ended");
    if (cl.ok != cl.completed) fail("a request did not complete kOk");
    if (o.requests != 0 && cl.ok != o.requests) fail("not every request completed");
  }
  if (!pass) std::printf("FAILED: %s\n", why.c_str());
  std::fflush(stdout);
  return pass ? 0 : 1;
}

void add_common_options(CLI::App& app, Options& o) {
  app.add_option("--failure-timeout-ms", o.failure_timeout_ms, "Nexus heartbeat failure timeout")
      ->check(CLI::Range(uint64_t{1}, uint64_t{UINT32_MAX}))
      ->capture_default_str();
}

void add_server_options(CLI::App& app, Options& o) {
  app.add_option("--uri", o.uri, "this server's Nexus address IP:PORT")->capture_default_str();
  app.add_option("--max-seconds", o.max_seconds, "stop after this long")->capture_default_str();
}

void add_client_options(CLI::App& app, Options& o) {
  app.add_option("--server", o.server, "the server's Nexus address IP:PORT");
  app.add_option("--sessions", o.sessions, "sessions to open")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--window", o.window, "requests in flight per session")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  measure::add_sizes_option(app, "--sizes", o.sizes, "request sizes, used in turn", kIdBytes);
  app.add_option("--requests", o.requests, "requests to send (0: until --duration-ms)");
  app.add_option("--duration-ms", o.duration_ms, "stop sending after this long (0: no limit)");
  app.add_option("--request-timeout-ms", o.request_timeout_ms, "RpcConfig::request_timeout_ms")
      ->check(CLI::Range(uint64_t{0}, uint64_t{UINT32_MAX}))
      ->capture_default_str();
  app.add_option("--timeout-s", o.timeout_s, "give up after this long")->capture_default_str();
  app.add_flag("--expect-peer-exit", o.expect_peer_exit, "stream until the server dies");
  app.add_flag("--allow-reset", o.allow_reset, "sessions may end; they are opened again");
  app.add_flag("--allow-bad-data", o.allow_bad_data, "wrong response bytes are not a failure");
  app.add_flag("--allow-no-progress", o.allow_no_progress,
               "with --allow-reset: no request need succeed (a hostile server may stop answering)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli("The processes of the samehost hostile-peer tests.", "samehost_peer");
  cli.require_subcommand(1);
  Options o;
  CLI::App* server_cmd = cli.add_subcommand("server", "an echo server over samehost");
  add_common_options(*server_cmd, o);
  add_server_options(*server_cmd, o);
  CLI::App* client_cmd = cli.add_subcommand("client", "checked echo traffic over samehost");
  add_common_options(*client_cmd, o);
  add_client_options(*client_cmd, o);
  std::string role;
  CLI::App* scribble_cmd =
      cli.add_subcommand("scribble", "a server or client that scribbles into its regions");
  scribble_cmd->add_option("--role", role, "server or client")
      ->required()
      ->check(CLI::IsMember({"server", "client"}));
  scribble_cmd->add_option("--scribble-s", o.scribble_s, "seconds of scribbling")->required();
  add_common_options(*scribble_cmd, o);
  add_server_options(*scribble_cmd, o);
  add_client_options(*scribble_cmd, o);

  if (auto status = measure::parse_command_line(cli, argc, argv)) return *status;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the test reads our lines while we run
  install_stop_signals();
  const bool server = server_cmd->parsed() || (scribble_cmd->parsed() && role == "server");
  if (!server && o.server.empty()) {
    std::fprintf(stderr, "samehost_peer: a client needs --server\n");
    return 2;
  }
  return server ? run_server(o) : run_client(o);
}
