// The layers above the runtime register their hook entries (vm/hooks.hpp): capture's, then the
// compiler's. Every VM calls it as it starts (LuaVM); a program that makes a cr::Context without
// a VM (the C++ tests) calls it first. Idempotent and thread-safe.
#pragma once

namespace cr {

void install_hooks();

}  // namespace cr
