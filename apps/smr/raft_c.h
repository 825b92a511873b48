// <raft.h> for C++: libraft 0.15's header has no extern "C" block, so C++
// code that includes it directly gets mangled names and fails to link
// (raft_strerror(int) undefined). Include this instead.
#pragma once

extern "C" {
#include <raft.h>
}
