// Convenience header: the whole public API of librpc.
#pragma once

#include "rpc/config.h"
#include "rpc/error.h"
#include "rpc/msg_buffer.h"
#include "rpc/nexus.h"
#include "rpc/req_handle.h"
#include "rpc/rpc.h"
#include "rpc/stats.h"
#include "rpc/types.h"
