// Convenience header: the whole public API of librpc.
#pragma once

#include "librpc/blocking.h"
#include "librpc/callback.h"
#include "librpc/config.h"
#include "librpc/coro.h"
#include "librpc/error.h"
#include "librpc/event_loop_thread.h"
#include "librpc/msg_buffer.h"
#include "librpc/nexus.h"
#include "librpc/owned_buffer.h"
#include "librpc/req_handle.h"
#include "librpc/rpc.h"
#include "librpc/stats.h"
#include "librpc/types.h"
#include "librpc/version.h"
