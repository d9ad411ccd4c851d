// The T.distributed entries of the cr_api table (cr_dist_api), for stdlib/distributed.lua.
#pragma once
#include "vm/lua/ffi_api.h"

namespace cr {
const cr_dist_api* dist_api_table();
}  // namespace cr
