// The benchmark request handlers.
#include "common/handlers.h"

#include <algorithm>
#include <bit>
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
}

void set_wanted_resp_size(rpc::MsgBuffer& req, std::uint32_t resp_size) {
  std::memcpy(req.data(), &resp_size, kSizedRespHeaderBytes);
}

void fill_pattern(rpc::MsgBuffer& buf) {
  for (std::size_t k = 0; k < buf.size(); ++k)
    buf.data()[k] = static_cast<std::uint8_t>('a' + k % 26);
}

}  // namespace bench
