#include "librpc/msg_buffer.h"

#include <algorithm>

#include "memory/allocator.h"

namespace rpc {
namespace detail {

size_t MsgBufferAccess::alloc_bytes(size_t max_data, size_t data_per_pkt) {
  return tail_hdr_offset_for(max_data) +
         (detail::pkts_for_size(max_data, data_per_pkt) - 1) * kPktHeaderBytes;
}

MsgBuffer MsgBufferAccess::make(const Allocation& a, size_t max_data, size_t data_per_pkt) {
  // A failed allocation gives an invalid buffer rather than one whose sizes
  // promise memory that is not there.
  if (a.buf == nullptr) return MsgBuffer();
  MsgBuffer m = make_view(a.buf, max_data, data_per_pkt);
  m.region_ = a.region;
  m.data_region_ = a.region;
  m.lkey_ = a.region != nullptr ? a.region->reg.lkey : 0;
  m.size_class_ = a.size_class;
  return m;
}

MsgBuffer MsgBufferAccess::make_app_view(const Allocation& hdrs, AppRegion& app, uint8_t* data,
                                         size_t size, size_t data_per_pkt) {
  if (hdrs.buf == nullptr) return MsgBuffer();
  MsgBuffer m = make_view(hdrs.buf, size, data_per_pkt);
  m.data_ = data;
  // Header 1 follows header 0 in the block: no data area between them.
  m.tail_hdr_offset_ = static_cast<uint32_t>(kPktHeaderBytes);
  m.region_ = hdrs.region;
  m.size_class_ = hdrs.size_class;
  m.data_region_ = &app;
  m.lkey_ = app.reg.lkey;
  m.app_gen_ = app.gen;
  return m;
}

Allocation MsgBufferAccess::allocation_of(const MsgBuffer& m) {
  const size_t len = m.is_app_view() ? view_hdr_bytes(m.max_data_size_, m.data_per_pkt_)
                                     : alloc_bytes(m.max_data_size_, m.data_per_pkt_);
  return {m.buf_, len, m.region_, m.size_class_};
}

}  // namespace detail
}  // namespace rpc
