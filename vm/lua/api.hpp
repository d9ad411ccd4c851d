// The process-wide cr_api table (see ffi_api.h).
#pragma once
#include "vm/lua/ffi_api.h"

namespace cr {
const cr_api* api_table();
}
