// Which bulk path a verbs transport uses (RpcConfig::verbs_bulk): pure
// logic over what the device turned out to offer, with no ibverbs types,
// so the unit tests cover every combination without an RDMA device; the
// transport probes the device (verbs_rc.cc, verbs_dc.cc) and asks here.
#pragma once

#include <string>

#include "librpc/config.h"
#include "librpc/error.h"
#include "transport/verbs/verbs_routing.h"

namespace rpc::detail {

// Whether Dynamically Connected transport can be used, as far as it was
// probed (in this order: how librpc was built, the device's provider, the
// device itself).
enum class DcAvailability : uint8_t {
  kNotProbed,  // the configuration did not ask for it
  kNotBuilt,   // librpc was built without infiniband/mlx5dv.h
  kNotMlx5,    // mlx5dv_is_supported() is false for the device
  kRefused,    // an mlx5 device that would not create a DC target/initiator
  kAvailable,
};

// What the transport knows when it picks: the device's name (for
// messages), whether an RC bulk path came up (its completion queue), and
// DC as probed, with the device's error when it refused.
struct BulkProbe {
  std::string device;
  bool rc_available = false;
  DcAvailability dc = DcAvailability::kNotProbed;
  std::string dc_error;
};

struct BulkChoice {
  VerbsBulkKind kind = VerbsBulkKind::kNone;
  std::string reason;  // for people: the log and transport_provider()
};

// Whether the configuration needs the DC probe (auto and dc do).
bool wants_dc_probe(VerbsBulk wanted);

// kOff: no bulk path. kRc: RC, or none when RC did not come up (large
// messages then go as datagrams, as before RC READ existed). kDc: DC, or a
// Failure that says why not. kAuto: DC when available, else RC, else none.
Result<BulkChoice> choose_bulk_path(VerbsBulk wanted, const BulkProbe& probe);

// "auto", "rc", "dc", "off".
const char* verbs_bulk_name(VerbsBulk mode);

}  // namespace rpc::detail
