// Which bulk path a verbs transport picks (bulk_select.h) for every
// configuration and every outcome of probing the device, without one: the
// DC branches cannot run on Soft-RoCE, so this is where they are covered.
#include <catch2/catch.hpp>

#include "transport/verbs/bulk_select.h"

using namespace rpc;
using namespace rpc::detail;

namespace {

BulkProbe probe(DcAvailability dc, bool rc = true) {
  return BulkProbe{"mlx5_0", rc, dc,
                   dc == DcAvailability::kRefused ? "Operation not supported" : ""};
}

}  // namespace

TEST_CASE("verbs bulk selection: auto prefers DC and falls back to RC, saying why", "[unit]") {
  CHECK(wants_dc_probe(VerbsBulk::kAuto));
  auto dc = choose_bulk_path(VerbsBulk::kAuto, probe(DcAvailability::kAvailable));
  REQUIRE(dc);
  CHECK(dc->kind == VerbsBulkKind::kDc);
  for (const DcAvailability why :
       {DcAvailability::kNotBuilt, DcAvailability::kNotMlx5, DcAvailability::kRefused}) {
    auto rc = choose_bulk_path(VerbsBulk::kAuto, probe(why));
    REQUIRE(rc);
    CHECK(rc->kind == VerbsBulkKind::kRc);
    CHECK_THAT(rc->reason, Catch::Contains("auto: no DC"));
  }
  auto not_mlx5 = choose_bulk_path(VerbsBulk::kAuto, probe(DcAvailability::kNotMlx5));
  CHECK_THAT(not_mlx5->reason, Catch::Contains("mlx5_0 is not an mlx5 device"));
  // Neither came up: datagrams only, not an error.
  auto none = choose_bulk_path(VerbsBulk::kAuto, probe(DcAvailability::kRefused, false));
  REQUIRE(none);
  CHECK(none->kind == VerbsBulkKind::kNone);
}

TEST_CASE("verbs bulk selection: dc is refused with the reason where DC is not available",
          "[unit]") {
  CHECK(wants_dc_probe(VerbsBulk::kDc));
  auto dc = choose_bulk_path(VerbsBulk::kDc, probe(DcAvailability::kAvailable));
  REQUIRE(dc);
  CHECK(dc->kind == VerbsBulkKind::kDc);
  auto not_built = choose_bulk_path(VerbsBulk::kDc, probe(DcAvailability::kNotBuilt));
  REQUIRE_FALSE(not_built);
  CHECK_THAT(not_built.error(), Catch::Contains("built without mlx5dv"));
  auto not_mlx5 = choose_bulk_path(VerbsBulk::kDc, probe(DcAvailability::kNotMlx5));
  REQUIRE_FALSE(not_mlx5);
  CHECK_THAT(not_mlx5.error(), Catch::Contains("verbs_bulk = dc, but mlx5_0 is not an mlx5"));
  auto refused = choose_bulk_path(VerbsBulk::kDc, probe(DcAvailability::kRefused));
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.error(), Catch::Contains("Operation not supported"));
}

TEST_CASE("verbs bulk selection: rc never probes DC, off turns bulk off", "[unit]") {
  CHECK_FALSE(wants_dc_probe(VerbsBulk::kRc));
  CHECK_FALSE(wants_dc_probe(VerbsBulk::kOff));
  auto rc = choose_bulk_path(VerbsBulk::kRc, probe(DcAvailability::kNotProbed));
  REQUIRE(rc);
  CHECK(rc->kind == VerbsBulkKind::kRc);
  auto rc_down = choose_bulk_path(VerbsBulk::kRc, probe(DcAvailability::kNotProbed, false));
  REQUIRE(rc_down);
  CHECK(rc_down->kind == VerbsBulkKind::kNone);
  auto off = choose_bulk_path(VerbsBulk::kOff, probe(DcAvailability::kAvailable));
  REQUIRE(off);
  CHECK(off->kind == VerbsBulkKind::kNone);
  CHECK(std::string(verbs_bulk_name(VerbsBulk::kOff)) == "off");
}
