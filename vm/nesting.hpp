// The op calls a kernel makes while its op runs (a kernel written as registry ops, e.g.
// _cross_entropy's forward) are part of that op: a capture does not record them, and the joint
// trace does not observe them (vm/autograd/call.cpp). dispatch (vm/registry.cpp) counts the depth.
#pragma once

namespace cr {

extern thread_local int dispatch_depth;

struct DispatchNest {
  DispatchNest() { ++dispatch_depth; }
  ~DispatchNest() { --dispatch_depth; }
  DispatchNest(const DispatchNest&) = delete;
  DispatchNest& operator=(const DispatchNest&) = delete;
};

}  // namespace cr
