// Catch2's implementation, compiled once for every test program: the
// standard main (catch_main.cc) and the verbs suite's own (verbs_main.cc)
// both call run_catch_session.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_run.h"

namespace rpc::test {

int run_catch_session(int argc, char** argv, const char* default_tests) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0) return rc;
  if (default_tests != nullptr && session.configData().testsOrTags.empty()) {
    session.configData().testsOrTags = {default_tests};
  }
  return session.run();
}

}  // namespace rpc::test
