// The benchmark request handlers.
#include "common/handlers.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "common/args.h"

namespace bench {

// The size in a kSizedRespType request is little-endian and copied as is.
static_assert(std::endian::native == std::endian::little, "the benchmarks assume little-endian");

namespace {

void count_request(rpc::ReqHandle& h) {
  auto* counters = static_cast<ServerCounters*>(h.context());
  if (counters == nullptr) return;
  counters->requests.store(counters->requests.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
}

// Sends `size` bytes, the first min(size, src_size) copied from src. Small
// responses go in the preallocated buffer; larger ones in a buffer the Rpc
// takes ownership of.
void respond(rpc::ReqHandle& h, std::size_t size, const std::uint8_t* src, std::size_t src_size) {
  rpc::MsgBuffer& pre = h.pre_resp_buffer();
  const std::size_t copy = std::min(size, src_size);
  if (size <= pre.max_size()) {
    if (copy != 0) std::memcpy(pre.data(), src, copy);
    pre.resize(size);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  rpc::MsgBuffer resp = h.rpc().alloc_msg_buffer(size);
  if (!resp.valid()) {
    // Out of memory (or too large): answer with an empty response; the
    // client reports the size mismatch.
    pre.resize(0);
    h.rpc().enqueue_response(h, pre);
    return;
  }
  if (copy != 0) std::memcpy(resp.data(), src, copy);
  h.rpc().enqueue_response(h, resp);
}

// The response size a kSizedRespType or kChecksumType request asks for (0
// when it is too short to say), at most the largest message.
std::size_t wanted_resp_size(rpc::ReqHandle& h) {
  const rpc::MsgBuffer& req = h.request();
  std::uint32_t wanted = 0;
  if (req.size() >= kSizedRespHeaderBytes) {
    std::memcpy(&wanted, req.data(), kSizedRespHeaderBytes);
  }
  return std::min<std::size_t>(wanted, h.rpc().max_msg_size());
}

}  // namespace

void echo_handler(rpc::ReqHandle& h) {
  count_request(h);
  const rpc::MsgBuffer& req = h.request();
  respond(h, req.size(), req.data(), req.size());
}

void sized_resp_handler(rpc::ReqHandle& h) {
  count_request(h);
  const rpc::MsgBuffer& req = h.request();
  respond(h, wanted_resp_size(h), req.data(), req.size());
}

void checksum_handler(rpc::ReqHandle& h) {
  count_request(h);
  const rpc::MsgBuffer& req = h.request();
  std::uint8_t sum[kChecksumBytes];
  const std::uint64_t checksum = request_checksum(req.data(), req.size());
  std::memcpy(sum, &checksum, kChecksumBytes);
  respond(h, wanted_resp_size(h), sum, kChecksumBytes);
}

void ServerCounters::FreePool::operator()(std::uint8_t* p) const { std::free(p); }

namespace {

constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// The next value of `size` bytes of the pool, made (and, for views,
// registered) at the first call; nullptr if it cannot be.
const std::uint8_t* next_pool_value(rpc::ReqHandle& h, std::size_t size, bool view) {
  auto* ctx = static_cast<ServerCounters*>(h.context());
  if (ctx == nullptr || size > kPoolBytes) return nullptr;
  if (ctx->pool == nullptr) {
    // 2 MiB aligned and backed by transparent hugepages where the system
    // has them, as the engine's own buffers are: a pool of 4 KiB pages costs
    // a one-sided reader (samehost's process_vm_readv, a NIC's page walk)
    // a page lookup per 4 KiB, which is not the copy this measures.
    void* mem = std::aligned_alloc(kHugePageBytes, kPoolBytes);
    if (mem == nullptr) return nullptr;
    (void)madvise(mem, kPoolBytes, MADV_HUGEPAGE);
    ctx->pool.reset(static_cast<std::uint8_t*>(mem));
    for (std::size_t k = 0; k < kPoolBytes; ++k) {
      ctx->pool.get()[k] = static_cast<std::uint8_t>('a' + k % 26);
    }
  }
  if (view && !ctx->pool_mem.valid()) {
    auto mem = h.rpc().register_memory(ctx->pool.get(), kPoolBytes);
    if (!mem) return nullptr;
    ctx->pool_mem = *mem;
  }
  if (ctx->next_value + size > kPoolBytes) ctx->next_value = 0;
  const std::uint8_t* value = ctx->pool.get() + ctx->next_value;
  ctx->next_value += size;
  return value;
}

}  // namespace

void pool_read_handler(rpc::ReqHandle& h) {
  count_request(h);
  const std::size_t size = wanted_resp_size(h);
  const std::uint8_t* value = next_pool_value(h, size, /*view=*/false);
  respond(h, value != nullptr ? size : 0, value, value != nullptr ? size : 0);
}

void pool_view_handler(rpc::ReqHandle& h) {
  count_request(h);
  const std::size_t size = wanted_resp_size(h);
  const std::uint8_t* value = next_pool_value(h, size, /*view=*/true);
  auto* ctx = static_cast<ServerCounters*>(h.context());
  rpc::MsgBuffer resp =
      value != nullptr
          ? h.rpc().app_msg_buffer(ctx->pool_mem, const_cast<std::uint8_t*>(value), size)
          : rpc::MsgBuffer();
  if (!resp.valid()) {  // the client reports the size mismatch
    respond(h, 0, nullptr, 0);
    return;
  }
  h.rpc().enqueue_response(h, resp);
}

std::uint64_t request_checksum(const std::uint8_t* data, std::size_t size) {
  // Four independent sums so that the loop is bound by loads, not by one
  // chain of additions.
  std::uint64_t lane[4] = {0, 0, 0, 0};
  constexpr std::size_t kStride = 4 * sizeof(std::uint64_t);
  std::size_t k = 0;
  for (; k + kStride <= size; k += kStride) {
    for (std::size_t j = 0; j < 4; ++j) {
      std::uint64_t w;
      std::memcpy(&w, data + k + j * sizeof(w), sizeof(w));
      lane[j] += w;
    }
  }
  std::uint64_t sum = size;
  for (const std::uint64_t l : lane) sum = std::rotl(sum, 17) ^ (l * 0x9e3779b97f4a7c15ULL);
  for (; k < size; ++k) sum = std::rotl(sum, 8) ^ data[k];
  return sum;
}

void register_bench_handlers(rpc::Nexus& nexus) {
  if (auto r = nexus.register_handler(kEchoType, echo_handler); !r) throw RunError(r.error());
  if (auto r = nexus.register_handler(kSizedRespType, sized_resp_handler); !r) {
    throw RunError(r.error());
  }
  if (auto r = nexus.register_handler(kChecksumType, checksum_handler); !r) {
    throw RunError(r.error());
  }
  if (auto r = nexus.register_handler(kPoolReadType, pool_read_handler); !r) {
    throw RunError(r.error());
  }
  if (auto r = nexus.register_handler(kPoolViewType, pool_view_handler); !r) {
    throw RunError(r.error());
  }
}

void set_wanted_resp_size(rpc::MsgBuffer& req, std::uint32_t resp_size) {
  std::memcpy(req.data(), &resp_size, kSizedRespHeaderBytes);
}

void fill_pattern(rpc::MsgBuffer& buf) {
  for (std::size_t k = 0; k < buf.size(); ++k)
    buf.data()[k] = static_cast<std::uint8_t>('a' + k % 26);
}

}  // namespace bench
