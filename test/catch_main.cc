// The standard main of the test programs (what CATCH_CONFIG_MAIN would
// define); Catch2's implementation is catch_impl.cc.
#include "catch_run.h"

int main(int argc, char** argv) { return rpc::test::run_catch_session(argc, argv); }
