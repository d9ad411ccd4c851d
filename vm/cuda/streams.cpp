#include "vm/cuda/streams.hpp"

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "vm/cuda/checks.hpp"
#include "vm/error.hpp"

namespace cr::cuda {
namespace {

constexpr unsigned kNonBlocking = 1, kEventDisableTiming = 2;
constexpr int kNotReady = 600;  // CUDA_ERROR_NOT_READY: cuStreamQuery / cuEventQuery on unfinished work

struct Pool {
  std::array<std::atomic<CUstream>, kSlots> streams{};  // slot 0 stays null: the legacy default stream
  std::atomic<int> next{0};
};

// One pool per device, made once; a stream pointer is stored before its id is handed out.
Pool* pools() {
  static std::unique_ptr<Pool[]> p(new Pool[size_t(std::max(device_count(), 1))]);
  return p.get();
}

std::mutex g_create;

void check_id(int64_t id) {
  if (id < 0 || stream_device(id) >= device_count() || stream_slot(id) > kPoolStreams)
    fail(cat("cuda: no stream with id ", id));
}

thread_local std::vector<uint8_t> t_current;  // per device: the current stream's slot

struct Event {
  CUevent e = nullptr;
  int device = -1;
  bool timing = false, recorded = false;
};
std::mutex g_events_mutex;
std::vector<Event> g_events;  // an id is an index; a destroyed one (device -1) is reused

Event& event_at(int64_t id) {  // under g_events_mutex
  if (id < 0 || size_t(id) >= g_events.size() || g_events[size_t(id)].device < 0) fail(cat("cuda: no event with id ", id));
  return g_events[size_t(id)];
}

bool done(CUresult rc, const char* fn) {
  if (rc == kNotReady) return false;
  check(rc, fn);
  return true;
}

}  // namespace

CUstream stream_of(int64_t id) {
  check_id(id);
  return pools()[stream_device(id)].streams[size_t(stream_slot(id))].load(std::memory_order_acquire);
}

int current_slot(int index) { return size_t(index) < t_current.size() ? t_current[size_t(index)] : 0; }

CUstream current_stream(int index) {
  const int slot = current_slot(index);
  return slot ? pools()[index].streams[size_t(slot)].load(std::memory_order_acquire) : nullptr;
}

bool capturing(int index) {
  const Driver* d = driver();
  int status = 0;
  return d && d->cuStreamIsCapturing && d->cuStreamIsCapturing(current_stream(index), &status) == 0 && status != 0;
}

void set_current_stream(int64_t id) {
  check_id(id);
  const int d = stream_device(id);
  if (t_current.size() <= size_t(d)) t_current.resize(size_t(d) + 1, 0);
  t_current[size_t(d)] = uint8_t(stream_slot(id));
}

int64_t pool_stream(int index) {
  if (index < 0 || index >= device_count()) fail(cat("cuda: no device cuda:", index, " (", device_count(), " present)"));
  Pool& p = pools()[index];
  const int slot = 1 + p.next.fetch_add(1) % kPoolStreams;
  std::lock_guard<std::mutex> g(g_create);
  if (!p.streams[size_t(slot)].load()) {
    use_device(index);
    CUstream s = nullptr;
    CR_CU(cuStreamCreate(&s, kNonBlocking), cat("a stream of cuda:", index));
    p.streams[size_t(slot)].store(s, std::memory_order_release);
  }
  return int64_t(index) * kSlots + slot;
}

void stream_synchronize(int64_t id) {
  CUstream s = stream_of(id);
  use_device(stream_device(id));
  CR_CU(cuStreamSynchronize(s), "Stream:synchronize");
  check_deferred(stream_device(id), s, false);  // (as copy_to_host does)
}

bool stream_query(int64_t id) {
  CUstream s = stream_of(id);
  use_device(stream_device(id));
  return done(driver()->cuStreamQuery(s), "cuStreamQuery");
}

void stream_wait_stream(int64_t waiter, int64_t waited) {
  if (waiter == waited) return;
  const int64_t e = event_create(stream_device(waited), false);
  try {
    event_record(e, waited);
    stream_wait_event(waiter, e);
  } catch (...) {
    event_destroy(e);
    throw;
  }
  event_destroy(e);  // (the driver keeps what the wait needs)
}

int64_t event_create(int index, bool timing) {
  if (index < 0 || index >= device_count()) fail(cat("cuda: no device cuda:", index, " (", device_count(), " present)"));
  use_device(index);
  Event ev{nullptr, index, timing, false};
  CR_CU(cuEventCreate(&ev.e, timing ? 0 : kEventDisableTiming), "T.cuda.Event");
  std::lock_guard<std::mutex> g(g_events_mutex);
  for (size_t i = 0; i < g_events.size(); ++i)
    if (g_events[i].device < 0) {
      g_events[i] = ev;
      return int64_t(i);
    }
  g_events.push_back(ev);
  return int64_t(g_events.size() - 1);
}

void event_destroy(int64_t id) {
  std::lock_guard<std::mutex> g(g_events_mutex);
  Event& ev = event_at(id);
  driver()->cuEventDestroy(ev.e);
  ev = Event{};
}

void event_record(int64_t event, int64_t stream) {
  CUstream s = stream_of(stream);
  std::lock_guard<std::mutex> g(g_events_mutex);
  Event& ev = event_at(event);
  if (ev.device != stream_device(stream))
    fail(cat("Event:record: the event belongs to cuda:", ev.device, ", the stream to cuda:", stream_device(stream)));
  use_device(ev.device);
  CR_CU(cuEventRecord(ev.e, s), "Event:record");
  ev.recorded = true;
}

void stream_wait_event(int64_t stream, int64_t event) {
  CUstream s = stream_of(stream);
  std::lock_guard<std::mutex> g(g_events_mutex);
  Event& ev = event_at(event);
  use_device(stream_device(stream));  // (waiting on another device's event is allowed)
  CR_CU(cuStreamWaitEvent(s, ev.e, 0), "Stream:wait_event");
}

bool event_query(int64_t event) {
  std::lock_guard<std::mutex> g(g_events_mutex);
  Event& ev = event_at(event);
  use_device(ev.device);
  return done(driver()->cuEventQuery(ev.e), "cuEventQuery");
}

void event_synchronize(int64_t event) {
  CUevent e = nullptr;
  {
    std::lock_guard<std::mutex> g(g_events_mutex);
    Event& ev = event_at(event);
    use_device(ev.device);
    e = ev.e;
  }
  CR_CU(cuEventSynchronize(e), "Event:synchronize");
}

double event_elapsed_ms(int64_t start, int64_t end) {
  std::lock_guard<std::mutex> g(g_events_mutex);
  Event &a = event_at(start), &b = event_at(end);
  if (!a.timing || !b.timing)
    fail("Event:elapsed_time: both events must be created with {enable_timing = true}");
  if (!a.recorded || !b.recorded) fail("Event:elapsed_time: both events must be recorded first");
  use_device(a.device);
  float ms = 0;
  CR_CU(cuEventElapsedTime(&ms, a.e, b.e), "Event:elapsed_time");
  return double(ms);
}

}  // namespace cr::cuda
