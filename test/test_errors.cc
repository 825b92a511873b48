// Error model: rpc::Error messages and Result<T>.
#include <catch2/catch.hpp>
#include <cerrno>
#include <string>

#include "librpc/error.h"

TEST_CASE("an Error without errno says only its context") {
  const rpc::Error e("transport 'verbs' is not implemented");
  CHECK(std::string(e.what()) == "transport 'verbs' is not implemented");
  CHECK(e.code().value() == 0);
}

TEST_CASE("an Error with errno adds the system's text and keeps the code") {
  const rpc::Error e("bind 1.2.3.4:5", EADDRNOTAVAIL);
  CHECK(std::string(e.what()).rfind("bind 1.2.3.4:5: ", 0) == 0);
  CHECK(e.code().value() == EADDRNOTAVAIL);
}

TEST_CASE("a Result holds either a value or a failure message") {
  rpc::Result<int> ok = 7;
  rpc::Result<int> bad = rpc::Failure{"no such session"};
  REQUIRE(ok);
  CHECK(*ok == 7);
  REQUIRE_FALSE(bad);
  CHECK(bad.error() == "no such session");
}
