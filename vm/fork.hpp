// fork() of a process that has used crescent (a host loads a model, then forks its workers; a Lua
// program forks through the FFI): the child has only the thread that forked, and a copy of every
// lock as the other threads held it. Each subsystem with threads, locks or helper processes makes
// itself ready here (docs/architecture.md, "fork()"):
// - its locks are guarded: fork() waits until no other thread is inside one (all are taken, in no
//   fixed order, so code that nests them never deadlocks a fork); the child gets them new;
// - a child handler forgets what the child does not have: threads (started again lazily), the
//   parent's compiler processes, work in flight.
// The handlers run in the pthread_atfork order of this file's registration: the first use of any.
#pragma once
#include <condition_variable>
#include <initializer_list>
#include <mutex>

namespace cr {

// `m` (and the condition variables waited on with it, remade in the child) for the life of the
// process: fork() holds it while the process is copied, the parent releases it.
void fork_guard(std::mutex& m, std::initializer_list<std::condition_variable*> cvs = {});
// Runs `fn` in a fork()ed child, once its guarded locks are new, before fork() returns there.
void on_fork_child(void (*fn)());
// Whether this process is a fork() child of one that had used crescent.
bool forked_child();

}  // namespace cr
