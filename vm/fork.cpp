#include "vm/fork.hpp"

#include <pthread.h>

#include <atomic>
#include <new>
#include <thread>
#include <vector>

namespace cr {

namespace {

struct Guarded {
  std::mutex* m;
  std::vector<std::condition_variable*> cvs;
};

struct Registry {
  std::mutex m;  // registration; taken first in a fork
  std::vector<Guarded> guarded;
  std::vector<void (*)()> child;
};

std::atomic<bool> forked{false};

Registry& registry();

// All guarded locks, as std::lock takes two: a lock that is busy is waited for first in the next
// round, with the others released meanwhile (so a thread nesting two of them finishes).
void lock_all(std::vector<Guarded>& g) {
  if (g.empty()) return;
  for (size_t first = 0;;) {
    g[first].m->lock();
    size_t busy = g.size();
    for (size_t i = 0; i < g.size() && busy == g.size(); ++i)
      if (i != first && !g[i].m->try_lock()) busy = i;
    if (busy == g.size()) return;
    for (size_t i = 0; i < busy; ++i)
      if (i != first) g[i].m->unlock();
    g[first].m->unlock();
    first = busy;
    std::this_thread::yield();
  }
}

void prepare() {
  Registry& r = registry();
  r.m.lock();
  lock_all(r.guarded);
}

void parent() {
  Registry& r = registry();
  for (Guarded& g : r.guarded) g.m->unlock();
  r.m.unlock();
}

// The locks are made anew, not unlocked: a condition variable's waiters and a lock's owner are
// threads of the parent. (The old objects are not destroyed: glibc's would wait for them.)
void child() {
  Registry& r = registry();
  forked = true;
  for (Guarded& g : r.guarded) {
    new (g.m) std::mutex;
    for (std::condition_variable* cv : g.cvs) new (cv) std::condition_variable;
  }
  new (&r.m) std::mutex;
  for (void (*fn)() : r.child) fn();
}

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;  // never destroyed: a fork may come during exit
    ::pthread_atfork(prepare, parent, child);
    return reg;
  }();
  return *r;
}

}  // namespace

void fork_guard(std::mutex& m, std::initializer_list<std::condition_variable*> cvs) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.guarded.push_back({&m, cvs});
}

void on_fork_child(void (*fn)()) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.m);
  r.child.push_back(fn);
}

bool forked_child() { return forked.load(std::memory_order_relaxed); }

}  // namespace cr

// gcc says __SANITIZE_ADDRESS__, clang (the fuzz build) __has_feature(address_sanitizer).
#if defined(__SANITIZE_ADDRESS__)
#define CR_FORK_LSAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CR_FORK_LSAN 1
#endif
#endif
#if defined(CR_FORK_LSAN)
// LeakSanitizer's exit check, off in a fork()ed child: what the parent's other threads had
// allocated is reachable only from their stacks, which the child does not have.
extern "C" int __lsan_is_turned_off() { return cr::forked_child() ? 1 : 0; }
#endif
