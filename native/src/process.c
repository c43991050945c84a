/* fork: the profiler's state across it.
 *
 * fork: the prepare handler sets the reentrancy guard, lets other threads finish opening the
 * objects' files for their unwind tables (unwind.c, at most 1 ms), then takes the loader lock (first, as
 * a dump holds it while waiting for the loader, which may wait for a table lock), the
 * lifecycle lock, the thread registry, every table lock, the memory-events callback
 * table's writer lock and the record of mappings (resident.c), so the child inherits
 * consistent tables and a loader lock no dump of the parent holds. A signal that lands
 * between prepare and parent (the clone syscall is restarted after a handler) finds the
 * guard set, so a dump from its handler is skipped instead of waiting on the locks this
 * thread holds. The child resets the locks, keeps only itself on the registry and keeps
 * profiling (its heap is a copy of the parent's); it writes its own %p-named dump at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"

/* ---- fork ------------------------------------------------------------------------------------ */
static __thread bool fork_guard __attribute__((tls_model("initial-exec")));
static __thread bool fork_in_sample __attribute__((tls_model("initial-exec")));

static void fork_prepare(void) {
  fork_guard = mp_tls.in_profiler;
#ifdef MP_TEST_HOOKS
  if (!mp_test_hook("MP_TEST_SKIP_REENTRY_GUARD")) /* the signal tests' control */
#endif
    mp_tls.in_profiler = true;
  mp_lock(&mp_loader_lock);
  mp_lock(&mp_api_lock);
  mp_threads_lock();
  mp_table_lock_all();
  mp_events_fork_prepare();
  mp_window_fork_prepare();
  mp_resident_fork_prepare();
  mp_signals_fork_prepare();
  /* from here to the parent handler nothing waits: a fatal signal waits for it (signals.c) */
  fork_in_sample = mp_tls.in_sample;
  mp_tls.in_sample = true;
}

static void fork_parent(void) {
  mp_signals_fork_parent();
  mp_resident_fork_parent();
  mp_window_fork_parent();
  mp_events_fork_parent();
  mp_table_unlock_all();
  mp_threads_unlock();
  mp_unlock(&mp_api_lock);
  mp_unlock(&mp_loader_lock);
  mp_profiler_leave(&mp_tls, fork_guard);
  atomic_signal_fence(memory_order_seq_cst);
  mp_tls.in_sample = fork_in_sample;
}

static void fork_child(void) {
  mp_note_process_start();
  mp_resident_fork_child();
  mp_window_fork_child();
  mp_events_fork_child();
  mp_table_child_reinit();
  mp_jit_child_reinit();
  mp_rules_child_reinit();
  mp_threads_child_reinit();
  mp_lock_reset(&mp_api_lock);
  mp_lock_reset(&mp_loader_lock);
  mp_locks_forget();
  mp_signals_child_forget();
  mp_tls.deferred_signal = 0; /* it was sent to the parent */
  mp_tls.tid = 0;             /* the child is another thread of another process */
  mp_unwind_child_reinit();
  mp_stack_child_reinit();
  mp_fork_child_under_run();
  mp_tls.in_profiler = fork_guard;
  mp_tls.in_sample = fork_in_sample;
}

void mp_fork_install(void) {
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SKIP_FORK_HANDLERS")) return; /* the fork gate's control */
#endif
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}
