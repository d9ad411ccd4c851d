// The autograd entries of the cr_api table (cr_autograd_api), for stdlib/autograd.lua.
#pragma once
#include "vm/lua/ffi_api.h"

namespace cr::autograd {
const cr_autograd_api* api_table();
}  // namespace cr::autograd
