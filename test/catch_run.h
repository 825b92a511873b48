// The test programs' mains run Catch2 through this, so that Catch2's
// implementation (catch_impl.cc, where Catch::Session is defined) is
// compiled once for all of them.
#pragma once

namespace rpc::test {

// Runs the test cases the command line names, or `default_tests` (a Catch2
// test spec, e.g. "[verbs],[any_transport]") when it names none and
// `default_tests` is not null. Returns Catch2's exit status.
int run_catch_session(int argc, char** argv, const char* default_tests = nullptr);

}  // namespace rpc::test
