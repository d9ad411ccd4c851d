// Streams and events: T.cuda.Stream / T.cuda.Event, as PyTorch has them.
//
// Every launch, copy, fill and matmul of device `i` goes to the calling thread's current stream
// of `i`: the legacy default stream (null) unless T.cuda.set_stream / T.cuda.stream chose
// another. The others come from a pool of 32 per device, created on first use with
// CU_STREAM_NON_BLOCKING and never destroyed - torch.cuda.Stream() hands out its streams
// round-robin from the same kind of pool. Work on them runs concurrently with the default
// stream's; ordering between streams is the caller's (wait_stream / wait_event / record_stream),
// as in PyTorch. The allocator keeps each stream's freed blocks apart (vm/cuda/memory.hpp).
//
// A stream is named by an id, device * kSlots + slot (slot 0: the default stream), so Lua holds
// it as a number; an event by an id into a table of driver events.
#pragma once
#include <cstdint>

#include "vm/cuda/driver.hpp"

namespace cr::cuda {

constexpr int kSlots = 64, kPoolStreams = 32;

inline int stream_device(int64_t id) { return int(id / kSlots); }
inline int stream_slot(int64_t id) { return int(id % kSlots); }
CUstream stream_of(int64_t id);   // checks the id
int current_slot(int index);      // the calling thread's current stream of device `index`
CUstream current_stream(int index);  // (every launch asks: no checks)
bool capturing(int index);  // whether device index's current stream records a CUDA graph
void set_current_stream(int64_t id);
int64_t pool_stream(int index);  // the next stream of device `index`'s pool

void stream_synchronize(int64_t id);  // then raises what its kernels' checks found (vm/cuda/checks.hpp)
bool stream_query(int64_t id);  // whether all its work is done
void stream_wait_stream(int64_t waiter, int64_t waited);  // waiter's later work waits for waited's work so far

int64_t event_create(int index, bool timing);
void event_destroy(int64_t event);
void event_record(int64_t event, int64_t stream);
void stream_wait_event(int64_t stream, int64_t event);
bool event_query(int64_t event);
void event_synchronize(int64_t event);
double event_elapsed_ms(int64_t start, int64_t end);

}  // namespace cr::cuda
