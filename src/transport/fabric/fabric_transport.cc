// The `fabric` transport: libfabric FI_EP_RDM. See the header.
#include "transport/fabric/fabric_transport.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <rdma/fi_errno.h>
#include <strings.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "common/log.h"
#include "common/random.h"
#include "wire/pkt_hdr.h"

namespace rpc::detail {

namespace {

constexpr uint32_t kFabricApiVersion = FI_VERSION(1, 14);
constexpr size_t kMinPktBytes = kPktHeaderBytes + 64;
// mtu_bytes 0: at least kDefaultMtuBytes, at most a jumbo frame (a provider
// with a huge inject size would otherwise make the RX ring huge).
constexpr size_t kMaxAutoPktBytes = 9000;
// Sends refused for lack of resources (-FI_EAGAIN) are retried after
// driving progress this many times before the datagram is dropped (the RTO
// then recovers it), so a stuck peer cannot stall the event loop.
constexpr int kMaxTxRetries = 256;
// libfabric 1.17's ofi_rxm over verbs opens, at fi_enable, one device
// completion queue for all its connections, of FI_OFI_RXM_MSG_TX_SIZE x
// FI_UNIVERSE_SIZE entries plus the receive side: FI_OFI_RXM_MSG_RX_SIZE
// once with a shared receive context (4096, the default here: see
// default_fabric_settings), or FI_OFI_RXM_MSG_RX_SIZE x FI_UNIVERSE_SIZE
// without (128 each). With libfabric's FI_UNIVERSE_SIZE of 1024 that is
// 135,168 or 262,144 entries, and nothing in our hints changes it.
// Soft-RoCE (rdma_rxe) allows 32,767 entries per queue, so the default
// fails there (fi_enable: Invalid argument). 64 makes it 12,288 (16,384
// without the shared context): 64 peers with every queue full before it
// can overflow, and rxm drains it on every poll. FI_UNIVERSE_SIZE also
// sizes address vectors initially; they grow.
constexpr const char* kVerbsUniverseSize = "64";

[[noreturn]] void fail(const std::string& what, int errno_value = 0) {
  throw Error("fabric transport: " + what, errno_value);
}

std::string fi_error(ssize_t rc) { return fi_strerror(static_cast<int>(-rc)); }

FabricRoutingInfo fabric_info_of(const RoutingInfo& info) {
  FabricRoutingInfo f;
  std::memcpy(&f, info.bytes.data(), sizeof(f));
  return f;
}

// The address-vector handle of a resolved route: copied out of the bytes
// (an array of uint8_t), which may not be read as a FabricRoutingInfo in
// place (alignment, aliasing).
fi_addr_t fi_addr_of(const RoutingInfo& resolved) {
  fi_addr_t addr;
  std::memcpy(&addr, resolved.bytes.data() + offsetof(FabricRoutingInfo, fi_addr), sizeof(addr));
  return addr;
}

bool is_shm(const std::string& provider) { return provider.rfind("shm", 0) == 0; }
bool is_rxm_over_tcp(const std::string& provider) { return provider == "tcp;ofi_rxm"; }

// The hints: an RDM endpoint for untagged messages, the source of each
// message if it can say, every memory-registration mode we can follow, and
// for the bulk path RMA reads and writes if the provider has them (shm:
// tagged messages with receives directed at one peer instead).
fi_info* make_hints(const std::string& provider, size_t rx_ring_size, bool want_source,
                    bool want_bulk) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) fail("fi_allocinfo failed", ENOMEM);
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  if (want_source) hints->caps |= FI_SOURCE;
  if (want_bulk && is_shm(provider)) {
    hints->caps |= FI_TAGGED | FI_DIRECTED_RECV;
  } else if (want_bulk) {
    hints->caps |= FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  }
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode =
      FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_ENDPOINT;
  // shm (libfabric 1.17) with virtual addressing does RMA itself, through
  // CMA, at whatever address the initiator names, without checking keys or
  // access rights (a test read unexposed memory with guessed keys and wrote
  // through a read-only key). With offset addressing every RMA goes through
  // the target, which checks both.
  if (is_shm(provider)) hints->domain_attr->mr_mode &= ~FI_MR_VIRT_ADDR;
  hints->domain_attr->threading = FI_THREAD_DOMAIN;  // one Rpc, one thread
  hints->rx_attr->size = rx_ring_size;               // 0: the provider's default
  if (!provider.empty()) hints->fabric_attr->prov_name = strdup(provider.c_str());
  return hints;
}

bool is_verbs(const std::string& provider) { return provider.find("verbs") != std::string::npos; }

// libfabric reads FI_UNIVERSE_SIZE once, when the process first calls it,
// so the default can only be given before that: by the first fabric
// transport, if it may use verbs (named, or no provider named) and the
// user set nothing. Later transports, and processes that called libfabric
// before, keep what libfabric read; fi_enable's error then says what to set.
//
// The same goes for libfabric's memory-registration caches (verbs, efa):
// they hand every registration of the same pages one registration made
// with all access rights, so an exposure's key would also write, and reach
// the whole region (a test over verbs;ofi_rxm showed both). They are
// turned off unless the user set them; exposures_are_distinct() checks.
//
// ofi_rxm gets a shared receive context (FI_OFI_RXM_USE_SRX, read at every
// fi_getinfo) unless the user chose: tcp has one by default, verbs not, and
// without it libfabric (1.17 up to at least 2.3) closes a connection's
// endpoint and then processes the completions still queued for it,
// reposting each received buffer on the freed endpoint: SIGSEGV in fi_close
// (rxm_close_conn -> rxm_flush_msg_cq -> rxm_post_recv -> fi_recv) or in
// fi_av_remove whenever a peer's datagram arrived that we had not read yet.
// With the shared context buffers go back to it, which outlives the
// connections (docs/transports.md, "ofi_rxm's shared receive context").
void default_fabric_settings(const std::string& provider) {
  static std::once_flag once;
  std::call_once(once, [&provider] {
    if (provider.empty() || is_verbs(provider)) setenv("FI_UNIVERSE_SIZE", kVerbsUniverseSize, 0);
    setenv("FI_MR_CACHE_MAX_COUNT", "0", 0);
    setenv("FI_EFA_MR_CACHE_ENABLE", "0", 0);
    setenv("FI_OFI_RXM_USE_SRX", "1", 0);
  });
}

// libfabric's spellings of a false boolean.
bool is_false_word(const char* v) {
  for (const char* no : {"0", "false", "no", "off"}) {
    if (strcasecmp(v, no) == 0) return true;
  }
  return false;
}

// True when the user turned ofi_rxm's shared receive context off.
bool rxm_srx_off() {
  const char* v = std::getenv("FI_OFI_RXM_USE_SRX");
  return v != nullptr && is_false_word(v);
}

// Why shm would move a large tagged send without cross-memory attach, or
// nullptr. shm moves one by CMA (the reader's kernel copies from us, with
// the same right to read any of our memory) where the processes may
// ptrace each other; elsewhere it copies through shared buffers from our
// own progress, piece by piece, which would go on reading an exposure
// after its revoke (another message's bytes, once the buffer is reused).
// So tagged reads need CMA: not turned off, and Yama not restricting
// ptrace (scope 0, or no Yama). shm's regions are created 0600, so its
// peers run as the same user.
const char* shm_cma_unavailable() {
  if (const char* v = std::getenv("FI_SHM_DISABLE_CMA"); v != nullptr && !is_false_word(v)) {
    return "FI_SHM_DISABLE_CMA is set";
  }
  if (FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r"); f != nullptr) {
    int scope = -1;
    const int got = std::fscanf(f, "%d", &scope);
    std::fclose(f);
    if (got != 1 || scope != 0) return "Yama's ptrace_scope is not 0";
  }
  return nullptr;
}

// What to do when fi_enable fails on ofi_rxm over verbs (see above).
std::string enable_advice(const std::string& provider) {
  if (!is_verbs(provider)) return "";
  const char* universe = std::getenv("FI_UNIVERSE_SIZE");
  return fmt::format(
      " (ofi_rxm over verbs opens a completion queue of FI_OFI_RXM_MSG_TX_SIZE x "
      "FI_UNIVERSE_SIZE + FI_OFI_RXM_MSG_RX_SIZE entries (the latter x FI_UNIVERSE_SIZE too "
      "without a shared receive context), which may exceed the device's "
      "max_cqe; FI_UNIVERSE_SIZE is {}: set it to {} before the process first calls libfabric)",
      universe != nullptr ? universe : "unset (1024)", kVerbsUniverseSize);
}

// An endpoint name peers cannot connect to: an IP provider's wildcard
// address, or a link-local IPv6 one (its interface index means nothing on
// another host). The verbs provider names its endpoint by the link-local
// address of the RDMA device's netdev when that has no IPv4 address
// (rdma_cm addresses by IP), and libfabric 1.17's rxm then crashes
// (SIGSEGV) when a peer connects: seen on Soft-RoCE.
bool unreachable_name(const uint8_t* addr, size_t len, uint32_t addr_format) {
  if (addr_format == FI_SOCKADDR_IN && len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    std::memcpy(&sin, addr, sizeof(sin));
    return sin.sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (addr_format == FI_SOCKADDR_IN6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, addr, sizeof(sin6));
    return IN6_IS_ADDR_UNSPECIFIED(&sin6.sin6_addr) || IN6_IS_ADDR_LINKLOCAL(&sin6.sin6_addr);
  }
  return false;
}

// An endpoint name for the log: ip:port where it is one, else hex.
std::string describe_name(const uint8_t* addr, size_t len, uint32_t addr_format) {
  char ip[INET6_ADDRSTRLEN] = "";
  if (addr_format == FI_SOCKADDR_IN && len >= sizeof(sockaddr_in)) {
    sockaddr_in sin;
    std::memcpy(&sin, addr, sizeof(sin));
    inet_ntop(AF_INET, &sin.sin_addr, ip, sizeof(ip));
    return fmt::format("{}:{}", ip, ntohs(sin.sin_port));
  }
  if (addr_format == FI_SOCKADDR_IN6 && len >= sizeof(sockaddr_in6)) {
    sockaddr_in6 sin6;
    std::memcpy(&sin6, addr, sizeof(sin6));
    inet_ntop(AF_INET6, &sin6.sin6_addr, ip, sizeof(ip));
    const std::string scope =
        sin6.sin6_scope_id != 0 ? fmt::format("%{}", sin6.sin6_scope_id) : std::string();
    return fmt::format("[{}{}]:{}", ip, scope, ntohs(sin6.sin6_port));
  }
  return fmt::format("{:02x}", fmt::join(addr, addr + len, ""));
}

// The providers that offer an RDM endpoint here, in libfabric's order of
// preference, for error messages and the log ("tcp;ofi_rxm, shm").
std::string rdm_providers() {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) return "(unknown)";
  hints->ep_attr->type = FI_EP_RDM;
  fi_info* list = nullptr;
  const int rc = fi_getinfo(kFabricApiVersion, nullptr, nullptr, 0, hints, &list);
  fi_freeinfo(hints);
  if (rc != 0) return "none";
  std::vector<std::string> names;
  for (const fi_info* i = list; i != nullptr; i = i->next) {
    const char* name = i->fabric_attr != nullptr ? i->fabric_attr->prov_name : nullptr;
    if (name != nullptr && std::find(names.begin(), names.end(), name) == names.end()) {
      names.emplace_back(name);
    }
  }
  fi_freeinfo(list);
  return names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

FabricTransport::FabricTransport(const RpcConfig& config, const std::string& bind_ip) {
  if (config.rx_ring_size == 0) fail("rx_ring_size is 0", EINVAL);
  default_fabric_settings(config.fabric_provider);
  try {
    // Best first: sources and bulk; then without what the provider lacks.
    // Where the provider addresses by IP, bind to the Nexus's address.
    // A receive queue as deep as the ring is asked for too; a provider
    // whose queue is shorter refuses it, and gets asked without.
    int last_rc = 0;
    for (int attempt = 0; attempt < 16 && info_ == nullptr; attempt++) {
      const bool want_source = (attempt & 8) == 0;
      const bool want_bulk = (attempt & 4) == 0;
      const bool with_node = (attempt & 2) == 0;
      const bool want_depth = (attempt & 1) == 0;
      // shm's posted receives, tagged or not, come from one pool of the
      // receive queue's depth: tagged reads need room beside the ring.
      const size_t depth =
          config.rx_ring_size + (want_bulk && is_shm(config.fabric_provider) ? kTaggedRecvRoom : 0);
      fi_info* hints =
          make_hints(config.fabric_provider, want_depth ? depth : 0, want_source, want_bulk);
      const int rc = fi_getinfo(kFabricApiVersion, with_node ? bind_ip.c_str() : nullptr, nullptr,
                                with_node ? FI_SOURCE : 0, hints, &info_);
      fi_freeinfo(hints);
      if (rc != 0) {
        info_ = nullptr;
        last_rc = rc;
      } else if (with_node && info_->addr_format != FI_SOCKADDR_IN &&
                 info_->addr_format != FI_SOCKADDR_IN6) {
        // Not addressed by IP: shm would take the IP string as the name of
        // its shared-memory region, the same in every process.
        fi_freeinfo(info_);
        info_ = nullptr;
      }
    }
    if (info_ == nullptr) {
      fail(fmt::format("no RDM endpoint from provider '{}' ({}); providers with RDM endpoints "
                       "here: {}",
                       config.fabric_provider.empty() ? "any" : config.fabric_provider,
                       fi_error(last_rc), rdm_providers()),
           ENODEV);
    }
    provider_ = info_->fabric_attr->prov_name;
    if (config.fabric_provider.empty()) {
      RPC_LOG_INFO("fabric transport: no fabric_provider configured; picked {} (available: {})",
                   provider_, rdm_providers());
    }
    if (is_verbs(provider_) && rxm_srx_off()) {
      RPC_LOG_WARN(
          "fabric transport: FI_OFI_RXM_USE_SRX is off: libfabric's ofi_rxm over verbs may then "
          "crash (SIGSEGV) closing a connection with datagrams not yet read (fi_close, "
          "fi_av_remove); leave it unset");
    }
    // shm (libfabric 1.17) reports a sender it has no address-vector
    // entry for as fi_addr 0 instead of FI_ADDR_NOTAVAIL, i.e. as whichever
    // peer was inserted first (test_fabric.cc, "never resolved"), so its
    // sources cannot tell a peer from a stranger: not used.
    cq_sources_ = (info_->caps & FI_SOURCE) != 0;
    has_source_ = cq_sources_ && !is_shm(provider_);
    const uint64_t mr_mode = static_cast<uint64_t>(info_->domain_attr->mr_mode);
    virt_addr_ = (mr_mode & FI_MR_VIRT_ADDR) != 0;
    prov_key_ = (mr_mode & FI_MR_PROV_KEY) != 0;
    endpoint_mr_ = (mr_mode & FI_MR_ENDPOINT) != 0;
    const size_t key_size = info_->domain_attr->mr_key_size;
    if (key_size > 0 && key_size < sizeof(uint64_t)) key_mask_ = (1ull << (8 * key_size)) - 1;
    // Bulk needs RMA and keys that fit the 64 bits of the engine's control
    // packet (not raw keys). Without FI_MR_VIRT_ADDR remote addresses are
    // offsets into the exposed payload.
    caps_.bulk =
        (info_->caps & FI_RMA) != 0 && (mr_mode & FI_MR_RAW) == 0 && key_size <= sizeof(uint64_t);
    // No RMA on shm. With virtual addressing it checks no keys (see
    // make_hints); with offset addressing it checks them, but never answers
    // an RMA it refuses, so a sender naming a bad key would stall our read
    // (and hold its buffer) for good. Reads go by tagged message instead,
    // checked and answered by our own code (tagged_read.h); they need the
    // sources of requests (to answer them) and receives directed at one
    // peer. Without those, large messages go as datagrams.
    if (is_shm(provider_)) {
      const uint64_t tagged_caps = FI_TAGGED | FI_DIRECTED_RECV;
      tagged_bulk_ = (info_->caps & tagged_caps) == tagged_caps && cq_sources_;
      if (const char* why = shm_cma_unavailable(); tagged_bulk_ && why != nullptr) {
        RPC_LOG_INFO(
            "fabric transport: {}, so shm would not move large messages by cross-memory "
            "attach; no bulk path (docs/transports.md, \"Bulk on shm\")",
            why);
        tagged_bulk_ = false;
      }
      caps_.bulk = tagged_bulk_;
      if (virt_addr_) {
        RPC_LOG_WARN(
            "fabric transport: shm came with virtual addressing, under which it does RMA "
            "without checking memory keys: peers on this host can read and write this "
            "process's memory through it. Name the provider 'shm' to get offset addressing");
      }
    }

    // mtu_bytes 0: a packet the provider sends without a rendezvous where
    // it says how large one may be (its inject size, shm: 4096: eight
    // times fewer packets than 1500 for 3-4x the goodput on shm), else an
    // Ethernet frame's worth. Larger packets go through the provider's
    // segmentation or rendezvous and lose more than they save (shm at
    // 8192: less than half the goodput of 4096).
    // tcp;ofi_rxm says 64, but sends up to its bounce buffers' size
    // (FI_OFI_RXM_BUFFER_SIZE, 16 KiB) eagerly, in one write to its
    // socket: at 1500 a 4 KB echo took three request packets and a
    // request for each response packet after the first, a 150 µs round
    // trip against 40 at 9000 (8 KiB: 240-300 against 43).
    const size_t auto_mtu =
        is_rxm_over_tcp(provider_)
            ? kMaxAutoPktBytes
            : std::clamp<size_t>(info_->tx_attr->inject_size, kDefaultMtuBytes, kMaxAutoPktBytes);
    caps_.max_pkt_bytes =
        std::min(config.mtu_bytes == 0 ? auto_mtu : config.mtu_bytes, info_->ep_attr->max_msg_size);
    if (caps_.max_pkt_bytes < kMinPktBytes) {
      fail(fmt::format("packet size {} (mtu_bytes or the provider's max_msg_size) is below {}",
                       caps_.max_pkt_bytes, kMinPktBytes),
           EINVAL);
    }
    caps_.max_data_per_pkt = caps_.max_pkt_bytes - kPktHeaderBytes;
    // The ring is as deep as the provider's receive queue allows (shm:
    // 1024, tcp;ofi_rxm: 2048); the engine admits sessions accordingly.
    const size_t queue_depth = info_->rx_attr->size;
    if (tagged_bulk_ && queue_depth < 2 * kTaggedRecvRoom) tagged_bulk_ = caps_.bulk = false;
    caps_.rx_ring_size =
        std::min(config.rx_ring_size, queue_depth - (tagged_bulk_ ? kTaggedRecvRoom : 0));
    if (caps_.rx_ring_size < config.rx_ring_size) {
      RPC_LOG_INFO("fabric transport: {} receives at most {} posted buffers; RX ring {} not {}",
                   provider_, info_->rx_attr->size, caps_.rx_ring_size, config.rx_ring_size);
    }
    caps_.min_rto_us = kMinRtoUs;
    // shm moves bytes between processes' memory: no network, nothing to
    // congest (as samehost). Timely's RTT there measures the peer's
    // scheduling and, with bulk reads, their length: it paced an 8 MiB
    // stream's session down to about 120 Mbit/s, and 32 B requests at
    // window 32 ran 1.07-1.09x as fast without it (three interleaved pairs).
    caps_.congestion_free = is_shm(provider_);
    caps_.max_inline_bytes = std::min(info_->tx_attr->inject_size, sizeof(PendingSend::copy));
    if (info_->tx_attr->iov_limit < 2) fail("the provider cannot send two iovecs at once", EINVAL);
    if (caps_.max_inline_bytes < kPktHeaderBytes)
      fail("the provider cannot inject a header", EINVAL);

    int rc = fi_fabric(info_->fabric_attr, &fabric_, nullptr);
    if (rc != 0) fail("fi_fabric: " + fi_error(rc));
    rc = fi_domain(fabric_, info_, &domain_, nullptr);
    if (rc != 0) fail("fi_domain: " + fi_error(rc));
    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    rc = fi_av_open(domain_, &av_attr, &av_, nullptr);
    if (rc != 0) fail("fi_av_open: " + fi_error(rc));
    const size_t tx_depth = std::max<size_t>(info_->tx_attr->size, kMaxBatch);
    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_CONTEXT;
    cq_attr.wait_obj = FI_WAIT_NONE;
    cq_attr.size = tx_depth;
    rc = fi_cq_open(domain_, &cq_attr, &tx_cq_, nullptr);
    if (rc != 0) fail("fi_cq_open (tx): " + fi_error(rc));
    cq_attr.format = FI_CQ_FORMAT_MSG;
    // Tagged reads complete there too: our receives of answers (at most
    // one per context) and the peers' requests.
    cq_attr.size = caps_.rx_ring_size + (tagged_bulk_ ? tx_depth + kReadRequestBuffers : 0);
    rc = fi_cq_open(domain_, &cq_attr, &rx_cq_, nullptr);
    if (rc != 0) fail("fi_cq_open (rx): " + fi_error(rc));
    rc = fi_endpoint(domain_, info_, &ep_, nullptr);
    if (rc != 0) fail("fi_endpoint: " + fi_error(rc));
    rc = fi_ep_bind(ep_, &av_->fid, 0);
    if (rc == 0) rc = fi_ep_bind(ep_, &tx_cq_->fid, FI_TRANSMIT);
    if (rc == 0) rc = fi_ep_bind(ep_, &rx_cq_->fid, FI_RECV);
    if (rc != 0) fail("fi_ep_bind: " + fi_error(rc));
    rc = fi_enable(ep_);
    if (rc != 0) fail("fi_enable: " + fi_error(rc) + enable_advice(provider_));
    size_t addr_len = local_addr_.size();
    rc = fi_getname(&ep_->fid, local_addr_.data(), &addr_len);
    if (rc != 0) {
      fail(fmt::format("fi_getname: {} (the address must fit in {} bytes)", fi_error(rc),
                       local_addr_.size()));
    }
    local_addr_len_ = addr_len;
    if (unreachable_name(local_addr_.data(), addr_len, info_->addr_format)) {
      fail(fmt::format("{} named the endpoint {}, which peers cannot connect to (verbs: give the "
                       "RDMA device's network device an IPv4 address)",
                       provider_, describe_name(local_addr_.data(), addr_len, info_->addr_format)),
           EADDRNOTAVAIL);
    }

    tx_ctx_.resize(tx_depth);
    tx_free_.reserve(tx_depth);
    for (OpContext& c : tx_ctx_) tx_free_.push_back(&c);
    bulk_done_.reserve(tx_depth);
    pending_.resize(kMaxPending);
    if (const char* chunk = std::getenv("LIBRPC_FABRIC_READ_CHUNK_BYTES"); chunk != nullptr) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(chunk, &end, 10);
      if (end == chunk || *end != '\0' || v > UINT32_MAX) {
        fail(fmt::format("LIBRPC_FABRIC_READ_CHUNK_BYTES '{}' is not a byte count", chunk));
      }
      read_chunk_bytes_ = static_cast<uint32_t>(v);
    }

    ring_mem_.assign(caps_.rx_ring_size * caps_.max_pkt_bytes, 0);
    auto ring_reg = register_memory(ring_mem_.data(), ring_mem_.size());
    if (!ring_reg) fail(ring_reg.error());
    ring_desc_ = ring_reg->desc;
    if (caps_.bulk && !tagged_bulk_ && !exposures_are_distinct(*ring_reg)) {
      caps_.bulk = false;
      RPC_LOG_WARN(
          "fabric transport: {} hands out one registration for registrations of the same "
          "pages (a registration cache: FI_MR_CACHE_MAX_COUNT, FI_EFA_MR_CACHE_ENABLE), so an "
          "exposure would not be read-only or bounded; large messages go as datagrams",
          provider_);
    }
    rx_ctx_.resize(caps_.rx_ring_size);
    handed_out_.assign(caps_.rx_ring_size, 0);
    for (uint32_t i = 0; i < caps_.rx_ring_size; i++) {
      rx_ctx_[i].kind = OpKind::kRecv;
      rx_ctx_[i].index = i;
      post_recv(i);
    }
    if (tagged_bulk_) {
      pending_requests_.reserve(kMaxTaggedReads);
      req_mem_.assign(size_t{kReadRequestBuffers} * kReadRequestBufBytes, 0);
      auto req_reg = register_memory(req_mem_.data(), req_mem_.size());
      if (!req_reg) fail(req_reg.error());
      req_desc_ = req_reg->desc;
      req_ctx_.resize(kReadRequestBuffers);
      for (uint32_t i = 0; i < kReadRequestBuffers; i++) {
        req_ctx_[i].kind = OpKind::kReadRequest;
        req_ctx_[i].index = i;
        post_read_request_recv(i);
      }
    }
  } catch (...) {
    cleanup();
    throw;
  }
  RPC_LOG_INFO(
      "fabric transport: provider {}, endpoint {}, {} B packets, inject {} B, sources {}, bulk {} "
      "({})",
      provider_, describe_name(local_addr_.data(), local_addr_len_, info_->addr_format),
      caps_.max_pkt_bytes, caps_.max_inline_bytes, has_source_, caps_.bulk,
      tagged_bulk_ ? "reads by tagged message"
                   : (virt_addr_ ? "virtual addresses" : "offset addresses"));
}

FabricTransport::~FabricTransport() { cleanup(); }

void FabricTransport::cleanup() noexcept {
  // Endpoint first: it cancels what is still posted.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
  for (Region& r : regions_) {
    if (r.mr != nullptr) fi_close(&r.mr->fid);
    r = Region{};
  }
  exposures_.drain([](fid_mr* mr) { fi_close(&mr->fid); });
  tagged_exposures_.drain([](TaggedExposure&) {});
  pending_requests_.clear();
  if (av_ != nullptr) fi_close(&av_->fid);
  if (tx_cq_ != nullptr) fi_close(&tx_cq_->fid);
  if (rx_cq_ != nullptr) fi_close(&rx_cq_->fid);
  av_ = nullptr;
  tx_cq_ = rx_cq_ = nullptr;
  if (domain_ != nullptr) fi_close(&domain_->fid);
  domain_ = nullptr;
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  fabric_ = nullptr;
  if (info_ != nullptr) fi_freeinfo(info_);
  info_ = nullptr;
}

void FabricTransport::post_recv(uint32_t index) {
  uint8_t* buf = ring_mem_.data() + size_t{index} * caps_.max_pkt_bytes;
  for (int attempt = 0; attempt < kMaxTxRetries; attempt++) {
    const ssize_t rc =
        fi_recv(ep_, buf, caps_.max_pkt_bytes, ring_desc_, FI_ADDR_UNSPEC, &rx_ctx_[index].fi);
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) {
      RPC_LOG_ERROR("fabric transport: fi_recv: {}", fi_error(rc));
      return;
    }
    progress_tx();
  }
  RPC_LOG_ERROR("fabric transport: fi_recv kept refusing; RX ring buffer {} lost", index);
}

void FabricTransport::post_recvs(size_t n) {
  const size_t ring = handed_out_.size();
  for (size_t i = 0; i < n && handed_count_ > 0; i++) {
    post_recv(handed_out_[handed_head_]);
    handed_head_ = (handed_head_ + 1) % ring;
    handed_count_--;
  }
}

uint64_t FabricTransport::make_src_key(fi_addr_t addr) const {
  // Without FI_SOURCE every packet has key 0, as has every peer: the
  // provider cannot tell us who sent what (see docs/transports.md).
  if (!has_source_) return 0;
  return addr == FI_ADDR_NOTAVAIL ? UINT64_MAX : addr + 1;
}

size_t FabricTransport::rx_burst(std::span<RxPacket> out) {
  // Reap send and bulk completions only while some are outstanding: on
  // tcp;ofi_rxm every CQ read polls the sockets, and injected packets
  // complete without an entry. Reading the RX CQ below drives progress.
  if (tx_free_.size() < tx_ctx_.size()) progress_tx();
  if (pending_count_ > 0) drain_pending();
  const size_t want = std::min(out.size(), kMaxBatch);
  std::array<fi_cq_msg_entry, kMaxBatch> entries;
  std::array<fi_addr_t, kMaxBatch> sources;
  const ssize_t n = cq_sources_ ? fi_cq_readfrom(rx_cq_, entries.data(), want, sources.data())
                                : fi_cq_read(rx_cq_, entries.data(), want);
  const size_t ring = handed_out_.size();
  auto hand_out = [&](uint32_t index) {
    handed_out_[(handed_head_ + handed_count_) % ring] = index;
    handed_count_++;
  };
  if (n == -FI_EAVAIL) {
    // A receive failed (e.g. truncated): hand its buffer out empty, so the
    // engine counts it and returns it like any other.
    fi_cq_err_entry err{};
    if (fi_cq_readerr(rx_cq_, &err, 0) != 1 || err.op_context == nullptr) return 0;
    auto* ctx = static_cast<OpContext*>(err.op_context);
    RPC_LOG_DEBUG("fabric transport: receive failed: {}", fi_strerror(err.err));
    if (ctx->kind != OpKind::kRecv) {  // a tagged read's answer or a peer's request
      handle_tagged_completion(ctx, 0, FI_ADDR_NOTAVAIL, err.err != 0 ? err.err : FI_EOTHER);
      return 0;
    }
    out[0] = RxPacket{ring_mem_.data() + size_t{ctx->index} * caps_.max_pkt_bytes, 0, 0};
    hand_out(ctx->index);
    return 1;
  }
  if (n <= 0) return 0;
  size_t got = 0;
  for (size_t i = 0; i < static_cast<size_t>(n); i++) {
    auto* ctx = static_cast<OpContext*>(entries[i].op_context);
    if (ctx->kind != OpKind::kRecv) [[unlikely]] {
      handle_tagged_completion(ctx, entries[i].len, cq_sources_ ? sources[i] : FI_ADDR_NOTAVAIL, 0);
      continue;
    }
    out[got++] = RxPacket{ring_mem_.data() + size_t{ctx->index} * caps_.max_pkt_bytes,
                          static_cast<uint32_t>(entries[i].len),
                          make_src_key(has_source_ ? sources[i] : FI_ADDR_UNSPEC)};
    hand_out(ctx->index);
  }
  return got;
}

FabricTransport::OpContext* FabricTransport::take_tx_context() {
  for (int attempt = 0; tx_free_.empty() && attempt < kMaxTxRetries; attempt++) progress_tx();
  if (tx_free_.empty()) return nullptr;
  OpContext* ctx = tx_free_.back();
  tx_free_.pop_back();
  return ctx;
}

void FabricTransport::progress_tx() {
  std::array<fi_cq_entry, kMaxBatch> entries;
  for (;;) {
    const ssize_t n = fi_cq_read(tx_cq_, entries.data(), entries.size());
    if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(tx_cq_, &err, 0) != 1) return;
      auto* ctx = static_cast<OpContext*>(err.op_context);
      RPC_LOG_DEBUG("fabric transport: operation failed: {}", fi_strerror(err.err));
      if (ctx == nullptr) continue;
      if (ctx->kind == OpKind::kBulk) {
        finish_bulk_part(ctx, false);
      } else {
        if (ctx->kind == OpKind::kExposeSend) finish_expose_send(ctx);
        tx_free_.push_back(ctx);
      }
      continue;
    }
    if (n <= 0) return;
    for (size_t i = 0; i < static_cast<size_t>(n); i++) {
      auto* ctx = static_cast<OpContext*>(entries[i].op_context);
      if (ctx->kind == OpKind::kBulk) {
        finish_bulk_part(ctx, true);
      } else {
        if (ctx->kind == OpKind::kExposeSend) finish_expose_send(ctx);
        tx_free_.push_back(ctx);
      }
    }
  }
}

FabricTransport::SendResult FabricTransport::try_send(const PendingSend& p) {
  const size_t total = kPktHeaderBytes + p.data_len;
  if (total <= caps_.max_inline_bytes) {
    // Small: the provider copies it now; no completion, no registration.
    const ssize_t rc = fi_inject(ep_, p.copy.data(), total, p.dest);
    if (rc == 0) return SendResult::kSent;
    if (rc == -FI_EAGAIN) return SendResult::kAgain;
    RPC_LOG_DEBUG("fabric transport: fi_inject: {}", fi_error(rc));
    return SendResult::kFailed;
  }
  if (tx_free_.empty()) return SendResult::kAgain;
  OpContext* ctx = tx_free_.back();
  ctx->kind = OpKind::kSend;
  // Zero copy: header and data straight from the registered MsgBuffer.
  // (A view of application memory has its data in another registration.)
  void* descs[2] = {p.hdr_lkey < regions_.size() ? regions_[p.hdr_lkey].desc : nullptr,
                    p.lkey < regions_.size() ? regions_[p.lkey].desc : nullptr};
  const iovec iov[2] = {{const_cast<uint8_t*>(p.hdr), kPktHeaderBytes},
                        {const_cast<uint8_t*>(p.data), p.data_len}};
  const ssize_t rc = fi_sendv(ep_, iov, descs, 2, p.dest, &ctx->fi);
  if (rc == 0) {
    tx_free_.pop_back();
    return SendResult::kSent;
  }
  if (rc == -FI_EAGAIN) return SendResult::kAgain;
  RPC_LOG_DEBUG("fabric transport: fi_sendv: {}", fi_error(rc));
  return SendResult::kFailed;
}

void FabricTransport::queue_pending(const TxItem& item) {
  if (pending_count_ == kMaxPending) {
    tx_dropped_++;  // datagram semantics: the RTO recovers it
    return;
  }
  PendingSend& p = pending_[(pending_head_ + pending_count_) % kMaxPending];
  p.dest = fi_addr_of(*item.route);
  p.hdr = item.hdr;
  p.data = item.data;
  p.data_len = item.data_len;
  p.lkey = item.data_lkey;
  p.hdr_lkey = item.hdr_lkey;
  if (kPktHeaderBytes + item.data_len <= caps_.max_inline_bytes) {
    // The engine reuses control-packet headers after the burst: copy.
    std::memcpy(p.copy.data(), item.hdr, kPktHeaderBytes);
    if (item.data_len > 0) std::memcpy(p.copy.data() + kPktHeaderBytes, item.data, item.data_len);
  }
  pending_count_++;
}

// Sends what waits, oldest first, until the provider pushes back.
void FabricTransport::drain_pending() {
  while (pending_count_ > 0) {
    SendResult r = try_send(pending_[pending_head_]);
    if (r == SendResult::kAgain) {
      progress_tx();  // reap completions, let the provider move
      r = try_send(pending_[pending_head_]);
      if (r == SendResult::kAgain) return;  // still busy: next burst or poll
    }
    if (r == SendResult::kFailed) tx_dropped_++;
    pending_head_ = (pending_head_ + 1) % kMaxPending;
    pending_count_--;
  }
}

void FabricTransport::tx_burst(std::span<const TxItem> items) {
  if (ep_ == nullptr) return;  // quiesced: the Rpc is going away
  // Every datagram goes through the FIFO, so they leave in order even when
  // the provider pushes back; normally the FIFO is empty again at once.
  for (const TxItem& item : items) queue_pending(item);
  drain_pending();
}

void FabricTransport::fill_local_routing_info(RoutingInfo& out) const {
  out = RoutingInfo{};
  FabricRoutingInfo f{};
  f.magic = kFabricRoutingMagic;
  f.addr_len = static_cast<uint8_t>(local_addr_len_);
  std::memcpy(f.addr, local_addr_.data(), local_addr_len_);
  std::memcpy(out.bytes.data(), &f, kFabricRoutingWireBytes);
}

bool FabricTransport::resolve_remote_routing_info(RoutingInfo& info) {
  FabricRoutingInfo f = fabric_info_of(info);
  if (f.magic != kFabricRoutingMagic || f.addr_len == 0 || f.addr_len > sizeof(f.addr)) {
    return false;
  }
  // Bytes past the wire part must be zero: the info came off the network.
  for (size_t i = kFabricRoutingWireBytes; i < RoutingInfo::kMaxBytes; i++) {
    if (info.bytes[i] != 0) return false;
  }
  std::string key(reinterpret_cast<const char*>(f.addr), f.addr_len);
  auto it = av_entries_.find(key);
  if (it == av_entries_.end()) {
    fi_addr_t addr = FI_ADDR_NOTAVAIL;
    const int n = fi_av_insert(av_, f.addr, 1, &addr, 0, nullptr);
    if (n != 1 || addr == FI_ADDR_NOTAVAIL) {
      RPC_LOG_INFO("fabric transport: a peer's address was refused by the address vector");
      return false;
    }
    it = av_entries_.emplace(std::move(key), AvEntry{addr, 0}).first;
  }
  it->second.refs++;
  f.fi_addr = it->second.addr;
  if (tagged_bulk_ && f.fi_addr < (fi_addr_t{1} << 24) && f.fi_addr >= answers_to_peer_.size()) {
    answers_to_peer_.resize(f.fi_addr + 1, 0);
  }
  std::memcpy(info.bytes.data(), &f, sizeof(f));
  return true;
}

void FabricTransport::release_remote_routing_info(const RoutingInfo& resolved) {
  const FabricRoutingInfo f = fabric_info_of(resolved);
  if (f.magic != kFabricRoutingMagic || f.addr_len == 0 || f.addr_len > sizeof(f.addr)) return;
  auto it = av_entries_.find(std::string(reinterpret_cast<const char*>(f.addr), f.addr_len));
  if (it == av_entries_.end() || it->second.addr != f.fi_addr) {
    RPC_LOG_WARN("fabric transport: released routing info that was never resolved");
    return;
  }
  if (--it->second.refs > 0) return;
  // The last session to this peer is gone. Sends still queued for it would
  // otherwise go to whichever peer the address vector gives its slot next.
  const fi_addr_t addr = it->second.addr;
  drop_pending_to(addr);
  fail_pending_rma_to(addr);
  if (tagged_bulk_) forget_tagged_peer(addr);
  fi_addr_t to_remove = addr;
  const int rc = fi_av_remove(av_, &to_remove, 1, 0);
  if (rc != 0) RPC_LOG_WARN("fabric transport: fi_av_remove: {}", fi_error(rc));
  av_entries_.erase(it);
}

void FabricTransport::drop_pending_to(fi_addr_t dest) {
  // Compacts the FIFO in place, keeping the order of what stays.
  size_t kept = 0;
  for (size_t i = 0; i < pending_count_; i++) {
    const PendingSend& p = pending_[(pending_head_ + i) % kMaxPending];
    if (p.dest == dest) {
      tx_dropped_++;
      continue;
    }
    if (kept != i) pending_[(pending_head_ + kept) % kMaxPending] = p;
    kept++;
  }
  pending_count_ = kept;
}

uint64_t FabricTransport::src_key_of(const RoutingInfo& resolved) const {
  return make_src_key(fabric_info_of(resolved).fi_addr);
}

int FabricTransport::register_region(const void* addr, size_t len, uint64_t access, fid_mr** mr) {
  int rc = -FI_ENOKEY;
  // Where we choose keys they are random: a peer cannot guess the key of an
  // exposure. Taken keys are rare (64 random bits, or mr_key_size's).
  for (int attempt = 0; attempt < 8 && rc == -FI_ENOKEY; attempt++) {
    const uint64_t key = prov_key_ ? 0 : random_u64() & key_mask_;
    rc = fi_mr_reg(domain_, addr, len, access, 0, key, 0, mr, nullptr);
  }
  if (rc == 0 && endpoint_mr_) {
    rc = fi_mr_bind(*mr, &ep_->fid, 0);
    if (rc == 0) rc = fi_mr_enable(*mr);
  }
  if (rc != 0 && *mr != nullptr) {
    fi_close(&(*mr)->fid);
    *mr = nullptr;
  }
  return rc;
}

Result<MemReg> FabricTransport::register_memory(void* addr, size_t len) {
  // Local access only: sends from it, receives and reads into it. Peers
  // read what expose_for_read grants, nothing else.
  uint64_t access = FI_SEND | FI_RECV;
  if ((info_->caps & FI_RMA) != 0) access |= FI_READ | FI_WRITE;
  fid_mr* mr = nullptr;
  const int rc = register_region(addr, len, access, &mr);
  if (rc != 0) {
    return Failure{
        fmt::format("fabric transport: registering {} bytes failed: {}", len, fi_error(rc))};
  }
  uint32_t id;
  if (free_region_ids_.empty()) {
    id = static_cast<uint32_t>(regions_.size());
    regions_.emplace_back();
  } else {
    id = free_region_ids_.back();
    free_region_ids_.pop_back();
  }
  regions_[id] = Region{mr, fi_mr_desc(mr)};
  return MemReg{id, regions_[id].desc};
}

void FabricTransport::deregister_memory(const MemReg& reg) {
  if (reg.lkey >= regions_.size() || regions_[reg.lkey].mr == nullptr) return;
  fi_close(&regions_[reg.lkey].mr->fid);
  regions_[reg.lkey] = Region{};
  free_region_ids_.push_back(reg.lkey);
}

bool FabricTransport::expose_for_read(const RoutingInfo& reader, const void* addr, size_t len,
                                      const MemReg& reg, Exposure& out) {
  if (tagged_bulk_) return expose_tagged(reader, addr, len, reg, out);
  (void)reader;
  (void)reg;
  return expose(addr, len, out);
}

bool FabricTransport::expose(const void* addr, size_t len, Exposure& out) {
  if (!caps_.bulk) return false;
  fid_mr* mr = nullptr;
  const int rc = register_region(addr, len, FI_REMOTE_READ, &mr);
  if (rc != 0) {
    RPC_LOG_DEBUG("fabric transport: exposing {} bytes failed: {}", len, fi_error(rc));
    return false;
  }
  out = Exposure{virt_addr_ ? reinterpret_cast<uint64_t>(addr) : 0, fi_mr_key(mr),
                 exposures_.add(mr)};
  return true;
}

// An exposure must be a registration of its own: with a registration
// cache, exposing part of the RX ring returns the ring's registration (same
// key), made with every access right and covering the whole ring.
bool FabricTransport::exposures_are_distinct(const MemReg& ring) {
  Exposure e;
  if (!expose(ring_mem_.data(), caps_.max_pkt_bytes, e)) return false;
  const bool distinct = e.key != fi_mr_key(regions_[ring.lkey].mr);
  revoke_exposure(e);
  return distinct;
}

void FabricTransport::revoke_exposure(Exposure& exposure) {
  if (!exposure.active()) return;
  if (tagged_bulk_) {
    // Answers already sent finish; no request is served from now on.
    (void)tagged_exposures_.take(exposure.handle);
  } else if (fid_mr* mr = exposures_.take(exposure.handle); mr != nullptr) {
    fi_close(&mr->fid);
  }
  exposure = Exposure{};
}

// libfabric cannot cancel an RMA operation; closing the endpoint ends them
// all (the Rpc is going away, so nothing else needs it). Completions of
// operations the close discarded, and those never posted, are never
// reported.
void FabricTransport::quiesce_bulk() {
  if (ep_ != nullptr) fi_close(&ep_->fid);
  ep_ = nullptr;
  bulk_done_.clear();
  pending_rma_.clear();
  pending_requests_.clear();
  tagged_reads_posted_ = 0;
  for (OpContext& c : tx_ctx_) c.posted_ns = 0;
  parents_.drain([](BulkParent&) {});
  pending_count_ = 0;
}

// A long read goes as parts of about read_chunk_bytes_, all posted at once
// (as many as free contexts allow, at most kMaxReadParts), so the provider
// streams them instead of one request/response per message; each part has
// its own context, and the operation completes with its last part.
bool FabricTransport::post_rma(const BulkOp& op, bool write) {
  if (!caps_.bulk || ep_ == nullptr) return false;
  if (tagged_bulk_ && write) {  // no remote write exists on this path
    bulk_done_.push_back(BulkCompletion{op.cookie, false});
    return true;
  }
  size_t parts = 1;
  if (!write && read_chunk_bytes_ != 0 && op.len > read_chunk_bytes_) {
    parts = std::min<size_t>((op.len + read_chunk_bytes_ - 1) / read_chunk_bytes_, kMaxReadParts);
  }
  std::array<OpContext*, kMaxReadParts> ctxs;
  size_t got = 0;
  ctxs[got] = take_tx_context();  // may make progress to free one
  if (ctxs[got] == nullptr) return false;
  for (got = 1; got < parts && !tx_free_.empty(); got++) {
    ctxs[got] = tx_free_.back();  // the rest only if free now
    tx_free_.pop_back();
  }
  parts = got;
  const uint32_t part_len = static_cast<uint32_t>((op.len + parts - 1) / parts);
  const uint32_t parent = parents_.add(BulkParent{op.cookie, static_cast<uint32_t>(parts), false});
  const fi_addr_t peer = fi_addr_of(*op.route);
  for (size_t i = 0; i < parts; i++) {
    OpContext* ctx = ctxs[i];
    ctx->kind = OpKind::kBulk;
    ctx->parent = parent;
    const uint32_t offset = static_cast<uint32_t>(i) * part_len;
    const PendingRma r{ctx,
                       peer,
                       op.local_addr + offset,
                       op.local_desc,
                       op.remote_addr + offset,
                       op.remote_key,
                       std::min(part_len, op.len - offset),
                       write};
    // Behind others that wait, in order; else at once.
    const ssize_t rc = pending_rma_.empty() ? issue_rma(r) : -FI_EAGAIN;
    if (rc == -FI_EAGAIN) {
      pending_rma_.push_back(r);
      continue;
    }
    if (rc == 0) continue;
    RPC_LOG_WARN("fabric transport: {}: {}", write ? "fi_write" : "fi_read", fi_error(rc));
    if (i == 0) {  // nothing posted: refuse the whole operation
      for (size_t j = 0; j < parts; j++) tx_free_.push_back(ctxs[j]);
      (void)parents_.take(parent);
      return false;
    }
    finish_bulk_part(ctx, false);  // the operation fails when its posted parts are done
  }
  return true;
}

// One part of a bulk operation is over: its context is free, and the
// operation is reported when it was the last.
void FabricTransport::finish_bulk_part(OpContext* ctx, bool ok) {
  const uint32_t parent = ctx->parent;
  tx_free_.push_back(ctx);
  BulkParent* p = parents_.get(parent);
  if (p == nullptr) return;  // quiesced
  if (!ok) p->failed = true;
  if (--p->outstanding > 0) return;
  bulk_done_.push_back(BulkCompletion{p->cookie, !p->failed});
  (void)parents_.take(parent);
}

ssize_t FabricTransport::issue_rma(const PendingRma& r) {
  if (tagged_bulk_) return issue_tagged_read(r);
  return r.write ? fi_write(ep_, r.local_addr, r.len, r.local_desc, r.peer, r.remote_addr,
                            r.remote_key, &r.ctx->fi)
                 : fi_read(ep_, r.local_addr, r.len, r.local_desc, r.peer, r.remote_addr,
                           r.remote_key, &r.ctx->fi);
}

// Posts what waits, oldest first, until the provider pushes back; one it
// refuses for good is reported failed (the engine retries the transfer).
void FabricTransport::drain_pending_rma() {
  size_t done = 0;
  for (; done < pending_rma_.size(); done++) {
    const PendingRma& r = pending_rma_[done];
    const ssize_t rc = issue_rma(r);
    if (rc == -FI_EAGAIN) break;
    if (rc != 0) {
      RPC_LOG_WARN("fabric transport: {}: {}", r.write ? "fi_write" : "fi_read", fi_error(rc));
      finish_bulk_part(r.ctx, false);
    }
  }
  pending_rma_.erase(pending_rma_.begin(), pending_rma_.begin() + static_cast<ptrdiff_t>(done));
}

// The peer's address-vector entry is going away: what still waits for it
// fails rather than reach whoever gets the entry next.
void FabricTransport::fail_pending_rma_to(fi_addr_t peer) {
  std::erase_if(pending_rma_, [&](const PendingRma& r) {
    if (r.peer != peer) return false;
    finish_bulk_part(r.ctx, false);
    return true;
  });
}

size_t FabricTransport::poll_bulk(std::span<BulkCompletion> out) {
  progress_tx();
  if (!pending_rma_.empty() && ep_ != nullptr) drain_pending_rma();
  if (!pending_requests_.empty() && ep_ != nullptr) drain_read_requests();
  // The clock only now and then, and only while reads wait for answers.
  if (tagged_reads_posted_ > 0 && ++polls_since_expiry_check_ >= 1024) {
    polls_since_expiry_check_ = 0;
    expire_tagged_reads();
  }
  const size_t n = std::min(out.size(), bulk_done_.size());
  std::copy_n(bulk_done_.begin(), n, out.begin());
  bulk_done_.erase(bulk_done_.begin(), bulk_done_.begin() + static_cast<ptrdiff_t>(n));
  return n;
}

// --- tagged reads (shm): see tagged_read.h ---

bool FabricTransport::expose_tagged(const RoutingInfo& reader, const void* addr, size_t len,
                                    const MemReg& reg, Exposure& out) {
  // Bound to the reader where it is a route we resolved (the engine's
  // case); tests expose to no one in particular.
  const FabricRoutingInfo f = fabric_info_of(reader);
  const fi_addr_t bound = f.magic == kFabricRoutingMagic ? f.fi_addr : FI_ADDR_UNSPEC;
  // (A key from the start: an entry equal to TaggedExposure{} reads as free.)
  const uint32_t handle = tagged_exposures_.add(TaggedExposure{
      static_cast<const uint8_t*>(addr), len, kTaggedDataBit, reg.desc, bound, false, 0});
  if (handle > kExposureHandleMask) {  // more live exposures than keys can name
    (void)tagged_exposures_.take(handle);
    return false;
  }
  // Bit 63 keeps every key non-zero (an entry with key 0 reads as free).
  const uint64_t key = (random_u64() & ~kExposureHandleMask) | kTaggedDataBit | handle;
  tagged_exposures_.get(handle)->key = key;
  out = Exposure{0, key, handle};  // offsets from the payload's first byte
  return true;
}

// The peer's address-vector entry goes away (and may be given to another
// peer): nothing of ours is sent to it any more, and our reads from it fail.
void FabricTransport::forget_tagged_peer(fi_addr_t peer) {
  tagged_exposures_.for_each([&](TaggedExposure& e) {
    if (e.reader == peer) e.reader_gone = true;
  });
  if (ep_ == nullptr) return;  // quiesced: nothing is posted any more
  // A request waiting to go names a read still posted (a read's completion
  // takes its request out of the queue), which the cancel fails.
  std::erase_if(pending_requests_, [&](const PendingRequest& p) { return p.owner == peer; });
  for (OpContext& c : tx_ctx_) {
    if (c.kind == OpKind::kBulk && c.posted_ns != 0 && c.peer == peer) {
      (void)fi_cancel(&ep_->fid, &c.fi);
    }
  }
}

void FabricTransport::post_read_request_recv(uint32_t index) {
  uint8_t* buf = req_mem_.data() + size_t{index} * kReadRequestBufBytes;
  for (int attempt = 0; attempt < kMaxTxRetries; attempt++) {
    const ssize_t rc = fi_trecv(ep_, buf, kReadRequestBufBytes, req_desc_, FI_ADDR_UNSPEC,
                                kReadRequestTag, 0, &req_ctx_[index].fi);
    if (rc == 0) return;
    if (rc != -FI_EAGAIN) break;
    progress_tx();
  }
  RPC_LOG_ERROR("fabric transport: could not post read-request buffer {}", index);
}

// The reader's side of one part: a receive for exactly this part from the
// owner, under a fresh random tag, then the request naming it.
ssize_t FabricTransport::issue_tagged_read(const PendingRma& r) {
  // Our receives share the queue with the ring: at most kMaxTaggedReads.
  if (tagged_reads_posted_ >= kMaxTaggedReads) return -FI_EAGAIN;
  const uint64_t tag = kTaggedDataBit | (random_u64() >> 1);
  r.ctx->expected_len = r.len;
  r.ctx->peer = r.peer;
  r.ctx->timed_out = false;
  const ssize_t rc = fi_trecv(ep_, r.local_addr, r.len, r.local_desc, r.peer, tag, 0, &r.ctx->fi);
  if (rc != 0) return rc;
  r.ctx->posted_ns = now_ns();
  tagged_reads_posted_++;
  const PendingRequest p{
      r.peer, {kTaggedReadMagic, r.len, r.remote_key, r.remote_addr, tag}, r.ctx};
  // (At most one per posted read: the reserved room is never exceeded.)
  if (!send_read_request(p)) pending_requests_.push_back(p);
  return 0;
}

// False when the provider cannot take it yet; a request it refuses for good
// cancels the part's receive, which then fails.
bool FabricTransport::send_read_request(const PendingRequest& p) {
  std::array<uint8_t, kTaggedReadRequestBytes> bytes;
  encode_tagged_read_request(p.req, bytes.data());
  const ssize_t rc = fi_tinject(ep_, bytes.data(), bytes.size(), p.owner, kReadRequestTag);
  if (rc == -FI_EAGAIN) return false;
  if (rc != 0) {
    RPC_LOG_WARN("fabric transport: fi_tinject (read request): {}", fi_error(rc));
    (void)fi_cancel(&ep_->fid, &p.ctx->fi);
  }
  return true;
}

bool FabricTransport::send_read_request_for_testing(const RoutingInfo& owner, const uint8_t* bytes,
                                                    size_t len) {
  progress_tx();
  return fi_tinject(ep_, bytes, len, fi_addr_of(owner), kReadRequestTag) == 0;
}

// Sends what waits; an owner that cannot take one yet (e.g. one that has
// not polled since we first wrote to it) holds up only its own requests.
void FabricTransport::drain_read_requests() {
  std::erase_if(pending_requests_, [&](const PendingRequest& p) { return send_read_request(p); });
}

void FabricTransport::handle_tagged_completion(OpContext* ctx, size_t len, fi_addr_t source,
                                               int err) {
  switch (ctx->kind) {
    case OpKind::kReadRequest:
      if (err == 0) {
        serve_read_request(ctx->index, len, source);
      } else {
        tagged_stats_.malformed++;  // e.g. longer than a request: truncated
        post_read_request_recv(ctx->index);
      }
      return;
    case OpKind::kBulk:
      break;
    default:
      return;
  }
  if (!pending_requests_.empty()) {  // a request still waiting names this part
    std::erase_if(pending_requests_, [&](const PendingRequest& p) { return p.ctx == ctx; });
  }
  if (ctx->posted_ns != 0) {
    ctx->posted_ns = 0;
    tagged_reads_posted_--;
  }
  // Cancelled unanswered. An answer may still come (an owner that was
  // descheduled): shm keeps it as unexpected, under a tag nothing posts
  // again. No small receive can take it in: shm 1.17 retries a truncated
  // cross-memory copy for good, stalling the whole queue.
  if (ctx->timed_out && err == FI_ECANCELED) tagged_stats_.timed_out++;
  // A shorter answer (the owner's refusal is empty) fails the part; a
  // longer one was truncated, an error.
  finish_bulk_part(ctx, err == 0 && len == ctx->expected_len);
}

// The owner's side: a request is untrusted bytes from any endpoint on the
// host. It is served only for a live exposure of ours with that key, from
// the exposure's reader, inside the exposure, and answered to its source;
// and only while the reader has fewer than kMaxAnswersPerPeer answers it
// has not taken in, and contexts are left for our datagrams.
void FabricTransport::serve_read_request(uint32_t index, size_t len, fi_addr_t source) {
  const std::optional<TaggedReadRequest> req =
      decode_tagged_read_request(req_mem_.data() + size_t{index} * kReadRequestBufBytes, len);
  post_read_request_recv(index);  // the request was copied out
  if (!req) {
    tagged_stats_.malformed++;
    return;
  }
  if (source == FI_ADDR_NOTAVAIL || source == FI_ADDR_UNSPEC || source >= answers_to_peer_.size()) {
    tagged_stats_.malformed++;  // nobody we know to answer
    return;
  }
  const uint32_t handle = exposure_handle_of_key(req->key);
  TaggedExposure* e = tagged_exposures_.get(handle);
  const bool allowed = e != nullptr && e->key == req->key && !e->reader_gone &&
                       (e->reader == FI_ADDR_UNSPEC || e->reader == source) &&
                       tagged_read_within(req->offset, req->len, e->len) &&
                       e->sends_in_flight < kMaxSendsPerExposure &&
                       answers_to_peer_[source] < kMaxAnswersPerPeer &&
                       tx_free_.size() > kContextsKeptForSends;
  if (!allowed) {
    refuse_read(source, req->tag);
    return;
  }
  OpContext* ctx = tx_free_.back();
  ctx->kind = OpKind::kExposeSend;
  ctx->index = handle;
  ctx->key = req->key;
  ctx->peer = source;
  const ssize_t rc =
      fi_tsend(ep_, e->addr + req->offset, req->len, e->desc, source, req->tag, &ctx->fi);
  if (rc != 0) {
    RPC_LOG_DEBUG("fabric transport: fi_tsend (read answer): {}", fi_error(rc));
    refuse_read(source, req->tag);
    return;
  }
  tx_free_.pop_back();
  e->sends_in_flight++;
  answers_to_peer_[source]++;
  tagged_stats_.served++;
}

// An empty message under the reader's tag: its read fails at once instead
// of waiting for the timeout (an honest reader whose peer revoked the
// exposure: a request given up, a session ended).
void FabricTransport::refuse_read(fi_addr_t source, uint64_t tag) {
  tagged_stats_.refused++;
  for (int attempt = 0; attempt < 4; attempt++) {
    const ssize_t rc = fi_tinject(ep_, nullptr, 0, source, tag);
    if (rc != -FI_EAGAIN) return;
    progress_tx();
  }
}

void FabricTransport::finish_expose_send(const OpContext* ctx) {
  if (ctx->peer < answers_to_peer_.size() && answers_to_peer_[ctx->peer] > 0) {
    answers_to_peer_[ctx->peer]--;
  }
  TaggedExposure* e = tagged_exposures_.get(ctx->index);
  if (e != nullptr && e->key == ctx->key && e->sends_in_flight > 0) e->sends_in_flight--;
}

// Reads whose answer has not come in tagged_read_timeout_ns_ are cancelled:
// their receives complete as cancelled and fail (a cancel that comes too
// late, the answer already arriving, changes nothing).
void FabricTransport::expire_tagged_reads() {
  const uint64_t now = now_ns();
  for (OpContext& c : tx_ctx_) {
    if (c.kind != OpKind::kBulk || c.posted_ns == 0 ||
        now - c.posted_ns < tagged_read_timeout_ns_) {
      continue;
    }
    c.posted_ns = now;  // at most one cancel per timeout
    c.timed_out = true;
    (void)fi_cancel(&ep_->fid, &c.fi);
  }
}

}  // namespace rpc::detail
