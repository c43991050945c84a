/* The process around the profiler: fork, and the signals that end a program.
 *
 * fork: the prepare handler sets the reentrancy guard, then takes the loader lock (first, as
 * a dump holds it while waiting for the loader, which may wait for a table lock), the
 * lifecycle lock, the thread registry and every table lock, so the child inherits
 * consistent tables and a loader lock no dump of the parent holds. A signal that lands
 * between prepare and parent (the clone syscall is restarted after a handler) finds the
 * guard set, so a dump from its handler is skipped instead of waiting on the locks this
 * thread holds. The child resets the locks, keeps only itself on the registry and keeps
 * profiling (its heap is a copy of the parent's); it writes its own %p-named dump at exit.
 *
 * Signals: see on_terminate. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "internal.h"

/* ---- fork ------------------------------------------------------------------------------------ */
static __thread bool fork_guard __attribute__((tls_model("initial-exec")));

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
}

static void fork_parent(void) {
  mp_table_unlock_all();
  mp_threads_unlock();
  mp_unlock(&mp_api_lock);
  mp_unlock(&mp_loader_lock);
  mp_tls.in_profiler = fork_guard;
}

static void fork_child(void) {
  mp_table_child_reinit();
  mp_threads_child_reinit();
  mp_lock_reset(&mp_api_lock);
  mp_lock_reset(&mp_loader_lock);
  mp_locks_forget();
  mp_tls.in_profiler = fork_guard;
}

void mp_fork_install(void) {
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SKIP_FORK_HANDLERS")) return; /* the fork gate's control */
#endif
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* A program ended by SIGINT or SIGTERM runs no at-exit handler. Under `mimalloc-pprof run`,
 * where the signal's disposition is the default at load, this handler writes the at-exit
 * profile and re-raises the signal with the default action, so the process still ends by
 * it. A program that installs its own handler replaces this one (and Node does: its exit
 * hook covers it). Not taken while this thread is inside the profiler (it may hold a table
 * lock); the dump itself uses only mmap, open, write and rename. */
static void on_terminate(int sig) {
  int saved = errno;
  if (!mp_tls.in_profiler && atomic_load(&mp_state.running) && mp_state.dump_at_exit[0] != 0) {
    if (mp_dump(mp_state.dump_at_exit, mp_state.dump_format)) atomic_store(&mp_state.running, false);
  }
  signal(sig, SIG_DFL);
  errno = saved;
  raise(sig);
}

void mp_signals_install(void) {
  static const int signals[] = {SIGINT, SIGTERM};
  for (size_t i = 0; i < sizeof(signals) / sizeof(*signals); i++) {
    struct sigaction current;
    if (sigaction(signals[i], NULL, &current) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction act;
    memset(&act, 0, sizeof(act));
    act.sa_handler = on_terminate;
    sigemptyset(&act.sa_mask);
    sigaction(signals[i], &act, NULL);
  }
}
