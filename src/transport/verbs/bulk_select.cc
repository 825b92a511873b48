#include "transport/verbs/bulk_select.h"

#include <fmt/format.h>

namespace rpc::detail {

namespace {

std::string why_no_dc(const BulkProbe& probe) {
  switch (probe.dc) {
    case DcAvailability::kNotBuilt:
      return "librpc was built without mlx5dv (infiniband/mlx5dv.h, Debian's libibverbs-dev)";
    case DcAvailability::kNotMlx5:
      return fmt::format("{} is not an mlx5 device (mlx5dv_is_supported is false)", probe.device);
    case DcAvailability::kRefused:
      return fmt::format("{} refused a DC target or initiator: {}", probe.device, probe.dc_error);
    case DcAvailability::kNotProbed:
      return "DC was not probed";
    case DcAvailability::kAvailable:
      break;
  }
  return {};
}

BulkChoice rc_or_none(const BulkProbe& probe, const std::string& why) {
  if (probe.rc_available) return BulkChoice{VerbsBulkKind::kRc, "RC READ" + why};
  return BulkChoice{VerbsBulkKind::kNone,
                    "no bulk path (no completion queue for RC); large messages go as datagrams"};
}

}  // namespace

bool wants_dc_probe(VerbsBulk wanted) {
  return wanted == VerbsBulk::kAuto || wanted == VerbsBulk::kDc;
}

Result<BulkChoice> choose_bulk_path(VerbsBulk wanted, const BulkProbe& probe) {
  switch (wanted) {
    case VerbsBulk::kOff:
      return BulkChoice{VerbsBulkKind::kNone, "bulk off (verbs_bulk = off): datagrams only"};
    case VerbsBulk::kRc:
      return rc_or_none(probe, fmt::format(" (verbs_bulk = {})", verbs_bulk_name(wanted)));
    case VerbsBulk::kDc:
      if (probe.dc == DcAvailability::kAvailable) {
        return BulkChoice{VerbsBulkKind::kDc,
                          fmt::format("DC READ (verbs_bulk = {})", verbs_bulk_name(wanted))};
      }
      return Failure{fmt::format("verbs_bulk = dc, but {}; use auto or rc", why_no_dc(probe))};
    case VerbsBulk::kAuto:
      if (probe.dc == DcAvailability::kAvailable) {
        return BulkChoice{VerbsBulkKind::kDc, "DC READ (auto: the device offers DC)"};
      }
      return rc_or_none(probe, fmt::format(" (auto: no DC, {})", why_no_dc(probe)));
  }
  return Failure{fmt::format("verbs_bulk: unknown mode {}", static_cast<int>(wanted))};
}

const char* verbs_bulk_name(VerbsBulk mode) {
  switch (mode) {
    case VerbsBulk::kAuto:
      return "auto";
    case VerbsBulk::kRc:
      return "rc";
    case VerbsBulk::kDc:
      return "dc";
    case VerbsBulk::kOff:
      return "off";
  }
  return "?";
}

}  // namespace rpc::detail
