// The request handlers every benchmark server registers, so that one server
// process can serve latency, small_rpc_tput and large_rpc_tput clients.
// All run in the server's event loop (foreground) and count what they
// handle in the ServerCounters their Rpc's RpcConfig::context points to.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "librpc/rpc_all.h"

namespace bench {

// The response is a copy of the request, same size.
inline constexpr rpc::ReqType kEchoType = 1;
// The response is N bytes, N being the little-endian uint32 in the request's
// first kSizedRespHeaderBytes (see set_wanted_resp_size()).
inline constexpr rpc::ReqType kSizedRespType = 2;
inline constexpr std::size_t kSizedRespHeaderBytes = 4;
// Like kSizedRespType, but the handler first reads every byte of the
// request: it puts request_checksum() of the whole request into the
// response's first kChecksumBytes (fewer if the response is shorter). A
// transport that hands requests over in place (mapped, not copied) gets no
// goodput for bytes nobody reads; this type makes the server pay for them.
inline constexpr rpc::ReqType kChecksumType = 3;
inline constexpr std::size_t kChecksumBytes = 8;
// Like kSizedRespType, but the N bytes are a value of a pool the server
// keeps (a KV server's GET; successive requests read successive values of
// kPoolBytes): kPoolReadType copies the value into a MsgBuffer,
// kPoolViewType answers with a view of the pool, registered with the Rpc
// as application memory (Rpc::app_msg_buffer), so no copy. The pool is
// made at the first such request.
inline constexpr rpc::ReqType kPoolReadType = 4;
inline constexpr rpc::ReqType kPoolViewType = 5;
inline constexpr std::size_t kPoolBytes = std::size_t{32} << 20;

// Requests handled by one server Rpc. Written by that Rpc's thread only, read
// by any thread: a relaxed load and store, no read-modify-write, keeps the
// handler's cost at one plain store. On a cache line of its own so that
// servers on different cores do not share it.
struct alignas(64) ServerCounters {
  std::atomic<std::uint64_t> requests{0};
  // The pool of kPoolReadType and kPoolViewType (the Rpc's thread only),
  // registered for views; it outlives the Rpc.
  struct FreePool {
    void operator()(std::uint8_t* p) const;
  };
  std::unique_ptr<std::uint8_t, FreePool> pool;
  rpc::AppMemory pool_mem;
  std::size_t next_value = 0;  // offset of the next value served
};

void echo_handler(rpc::ReqHandle& h);
void sized_resp_handler(rpc::ReqHandle& h);
void checksum_handler(rpc::ReqHandle& h);
void pool_read_handler(rpc::ReqHandle& h);
void pool_view_handler(rpc::ReqHandle& h);

// A 64-bit checksum of every byte of [data, data + size): sums of the
// little-endian 64-bit words in four lanes, mixed, then the tail bytes.
// Reads at memory speed; the compiler cannot skip it, since the result
// travels in the response.
std::uint64_t request_checksum(const std::uint8_t* data, std::size_t size);

// Registers the handlers. REQUIRES: no Rpc created on the Nexus yet.
// Throws RunError.
void register_bench_handlers(rpc::Nexus& nexus);

// Asks a kSizedRespType server for a response of resp_size bytes.
// REQUIRES: req.size() >= kSizedRespHeaderBytes.
void set_wanted_resp_size(rpc::MsgBuffer& req, std::uint32_t resp_size);

// Fills a request with a recognisable pattern ('a'..'z').
void fill_pattern(rpc::MsgBuffer& buf);

}  // namespace bench
