// The in-process `fake` transport: deterministic delivery between Rpcs of
// one process through a FakeNetwork, with scripted drop / hold (reorder) /
// duplicate verdicts and TX capture for protocol tests. Bulk operations are
// memcpy between registered regions.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace rpc::detail {

struct FakePacket {
  uint32_t src = 0;  // endpoint ids
  uint32_t dst = 0;
  std::vector<uint8_t> bytes;  // header + data
};

enum class FakeVerdict : uint8_t {
  kDeliver,    // deliver now
  kDrop,       // lose it
  kHold,       // keep it aside until release_held()
  kDuplicate,  // deliver twice
};

// Process-wide switchboard. Thread-safe (one mutex; this is a test transport).
class FakeNetwork {
 public:
  using Filter = std::function<FakeVerdict(const FakePacket&)>;

  static FakeNetwork& instance();

  // The filter sees every packet sent, in order, under the network lock; it
  // must not call back into the network.
  void set_filter(Filter filter);
  // Clears the filter, the capture and held packets.
  void reset();

  // Every packet sent (before the filter) is appended here while enabled.
  void set_capture(bool enabled);
  std::vector<FakePacket> captured();
  void clear_captured();

  size_t num_held();
  // Delivers held packets, oldest first or in reverse order.
  void release_held(bool reverse = false);

  // --- used by FakeTransport ---
  // An endpoint whose inbox holds at most ring_size packets, like a NIC's
  // receive queue: what arrives beyond is dropped and counted.
  uint32_t attach(size_t ring_size);
  void detach(uint32_t endpoint);
  void send(FakePacket packet);
  // Moves up to max packets for endpoint into out; returns how many.
  // ring_full_drops: the endpoint's drops on a full inbox so far.
  size_t receive(uint32_t endpoint, size_t max, std::vector<FakePacket>& out,
                 uint64_t& ring_full_drops);
  // The endpoint's drops on a full inbox so far.
  uint64_t ring_full_drops(uint32_t endpoint);
  uint32_t register_region();
  // Makes [base, base + len) readable by peers under a fresh random key
  // (0: refused, see set_refuse_exposures).
  uint64_t expose(const uint8_t* base, size_t len);
  void revoke(uint64_t key);
  size_t num_exposures();
  // Copies from a peer's exposure into local memory. False if
  // [remote_addr, remote_addr + len) is not inside the exposure `key`, and
  // always for writes: nothing is exposed for remote write.
  bool copy_remote(uint64_t key, uint64_t remote_addr, uint8_t* local, size_t len, bool read);
  // While held, reads are posted but neither copied nor completed: tests
  // end requests and sessions while reads are in flight. Releasing makes
  // them run (and complete) at the next poll.
  void set_hold_bulk(bool hold);
  bool hold_bulk();
  // While set, expose_for_read fails (a transport out of resources).
  void set_refuse_exposures(bool refuse);

 private:
  void deliver_locked(FakePacket packet);

  std::mutex mutex_;
  Filter filter_;
  bool capture_ = false;
  std::vector<FakePacket> captured_;
  std::vector<FakePacket> held_;
  uint32_t next_endpoint_ = 1;
  struct Inbox {
    std::deque<FakePacket> packets;
    size_t capacity = 0;
    uint64_t ring_full_drops = 0;
  };
  std::unordered_map<uint32_t, Inbox> inboxes_;
  struct Region {
    const uint8_t* base;
    size_t len;
  };
  uint32_t next_region_id_ = 1;
  std::unordered_map<uint64_t, Region> exposures_;
  bool hold_bulk_ = false;
  bool refuse_exposures_ = false;
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(const RpcConfig& config);
  ~FakeTransport() override;

  const char* name() const override { return "fake"; }
  TransportCaps caps() const override { return caps_; }
  void refresh_rx_drops() override;
  void tx_burst(std::span<const TxItem> items) override;
  size_t rx_burst(std::span<RxPacket> out) override;
  void post_recvs(size_t n) override;
  void fill_local_routing_info(RoutingInfo& out) const override;
  bool resolve_remote_routing_info(RoutingInfo& info) override;
  void release_remote_routing_info(const RoutingInfo& resolved) override;
  uint64_t src_key_of(const RoutingInfo& resolved) const override;
  Result<MemReg> register_memory(void* addr, size_t len) override;
  void deregister_memory(const MemReg& reg) override;
  bool expose_for_read(const RoutingInfo& reader, const void* addr, size_t len, const MemReg& reg,
                       Exposure& out) override;
  void revoke_exposure(Exposure& exposure) override;
  bool post_read(const BulkOp& op) override;
  // Not part of Transport (the engine never writes to a peer): tests act
  // as a hostile peer with it. A write into an exposure fails.
  bool post_write(const BulkOp& op);
  size_t poll_bulk(std::span<BulkCompletion> out) override;
  void quiesce_bulk() override { posted_reads_.clear(); }

  uint32_t endpoint() const { return endpoint_; }
  // Successful resolves not yet released, and releases without a matching
  // resolve: tests check that every session gives back what it took.
  size_t live_resolutions() const { return live_resolutions_; }
  size_t unmatched_releases() const { return unmatched_releases_; }
  // The most packets the engine handed over in one tx_burst.
  size_t largest_tx_burst() const { return largest_tx_burst_; }

 private:
  TransportCaps caps_;
  uint32_t endpoint_;
  // RX ring: fixed buffers handed out in order, returned by post_recvs.
  std::vector<std::vector<uint8_t>> ring_;
  size_t ring_head_ = 0;    // next buffer to fill
  size_t ring_in_use_ = 0;  // handed out, not yet returned
  std::vector<FakePacket> scratch_;
  std::vector<BulkCompletion> bulk_done_;
  std::vector<BulkOp> posted_reads_;                      // not yet copied (see set_hold_bulk)
  std::unordered_map<uint32_t, uint64_t> exposure_keys_;  // handle -> key
  uint32_t next_exposure_handle_ = 0;
  size_t live_resolutions_ = 0;
  size_t unmatched_releases_ = 0;
  size_t largest_tx_burst_ = 0;
};

}  // namespace rpc::detail
