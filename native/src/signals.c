/* A profile also when a signal ends the program: SIGINT, SIGTERM, SIGHUP and SIGQUIT, whose
 * default action ends a process without running its at-exit handlers.
 *
 * Active when a profile at exit is asked for in the environment (MIMALLOC_PROF_DUMP_AT_EXIT,
 * which `mimalloc-pprof run` sets). The program's view of these four signals is kept here, and
 * the kernel's disposition follows it, with one difference: where the program has SIG_DFL or a
 * handler, the kernel has this file's handler, with the program's mask and flags. When a
 * signal arrives:
 *  - the program's disposition is SIG_DFL: the profile is written (natively, so it works while
 *    the program's own code is busy, e.g. a JavaScript loop), then the signal is raised again
 *    with the default action, so the process ends exactly as it would have (status, core);
 *  - the program has a handler: it runs, with the arguments, mask and flags it asked for; an
 *    SA_RESETHAND handler is reset to SIG_DFL first, as the kernel would. (Node's own
 *    SIGINT/SIGTERM handler is such a one-shot handler that raises the signal again: the
 *    second delivery finds SIG_DFL and writes the profile.) A handler that lets the program go
 *    on changes nothing; one that calls exit() leaves the profile to the at-exit dump;
 *  - SIG_IGN is the kernel's too (exec must pass it on: nohup, background jobs).
 *
 * sigaction and signal are interposed so that the program sets and reads its own view; every
 * other signal goes straight to glibc. Not taken while this thread is inside the profiler (it
 * may hold a table lock): the signal then ends the program without a profile. The dump uses
 * only mmap, open, write, rename and dl_iterate_phdr. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>

#include "internal.h"

/* glibc's implementation under its exported internal name: no dlsym needed. */
extern int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);

static const int managed[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define MANAGED (sizeof(managed) / sizeof(*managed))

typedef struct view_s {
  atomic_uint seq;      /* odd while being written (a seqlock: the handler only reads) */
  struct sigaction act; /* the program's disposition */
} view_t;

static view_t views[MANAGED];
static atomic_bool active;
static atomic_flag writing = ATOMIC_FLAG_INIT;

static int slot_of(int sig) {
  for (unsigned i = 0; i < MANAGED; i++)
    if (managed[i] == sig) return (int)i;
  return -1;
}

static void read_view(int slot, struct sigaction* out) {
  view_t* v = &views[slot];
  for (unsigned tries = 0;; tries++) {
    unsigned a = atomic_load_explicit(&v->seq, memory_order_acquire);
    memcpy(out, &v->act, sizeof(*out));
    atomic_thread_fence(memory_order_acquire);
    if ((a & 1) == 0 && atomic_load_explicit(&v->seq, memory_order_relaxed) == a) return;
    if (tries > 1000) return; /* a writer interrupted by this very handler: take what is there */
  }
}

static void write_view(int slot, const struct sigaction* act) {
  view_t* v = &views[slot];
  atomic_fetch_add_explicit(&v->seq, 1, memory_order_acq_rel);
  memcpy(&v->act, act, sizeof(*act));
  atomic_fetch_add_explicit(&v->seq, 1, memory_order_release);
}

static void on_signal(int sig, siginfo_t* info, void* context);

/* The kernel's disposition for the program's `act`. */
static int apply(int sig, const struct sigaction* act) {
  if (act->sa_handler == SIG_IGN) return __sigaction(sig, act, NULL);
  struct sigaction k;
  memset(&k, 0, sizeof(k));
  k.sa_sigaction = on_signal;
  if (act->sa_handler == SIG_DFL) {
    sigemptyset(&k.sa_mask);
    k.sa_flags = SA_SIGINFO | SA_RESTART;
  } else {
    k.sa_mask = act->sa_mask;
    k.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
  }
  return __sigaction(sig, &k, NULL);
}

/* Writes the profile, then ends the process by `sig` with its default action. */
static void end_with_profile(int sig) {
  int saved = errno;
  if (!mp_tls.in_profiler && atomic_load(&mp_state.running) && mp_state.dump_at_exit[0] != 0) {
    if (mp_dump(mp_state.dump_at_exit, mp_state.dump_format)) atomic_store(&mp_state.running, false);
  }
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  __sigaction(sig, &dfl, NULL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  errno = saved;
  raise(sig);                                 /* pending while this handler blocks it */
  pthread_sigmask(SIG_UNBLOCK, &only, NULL); /* delivered now: the default action */
}

static void on_signal(int sig, siginfo_t* info, void* context) {
  int slot = slot_of(sig);
  struct sigaction prog;
  if (slot < 0) return;
  read_view(slot, &prog);
  if (prog.sa_handler == SIG_DFL) {
    end_with_profile(sig);
    return;
  }
  if (prog.sa_handler == SIG_IGN) return;
  if (prog.sa_flags & SA_RESETHAND) { /* one-shot: SIG_DFL from now on, as the kernel does */
    struct sigaction dfl = prog;
    dfl.sa_handler = SIG_DFL;
    dfl.sa_flags &= ~(SA_SIGINFO | SA_RESETHAND);
    write_view(slot, &dfl);
  }
  if (prog.sa_flags & SA_SIGINFO) prog.sa_sigaction(sig, info, context);
  else prog.sa_handler(sig);
}

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  int slot = atomic_load_explicit(&active, memory_order_acquire) ? slot_of(sig) : -1;
  if (slot < 0) return __sigaction(sig, act, old);
  while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire)) {}
  struct sigaction before;
  read_view(slot, &before);
  int rc = 0;
  if (act != NULL) {
    rc = apply(sig, act);
    if (rc == 0) write_view(slot, act);
  }
  atomic_flag_clear_explicit(&writing, memory_order_release);
  if (rc == 0 && old != NULL) *old = before;
  return rc;
}

/* glibc's signal(): BSD semantics (the signal blocked in its handler, calls restarted). Its
 * own signal() would reach the kernel without this file's sigaction. */
__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) {
  struct sigaction act, old;
  memset(&act, 0, sizeof(act));
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (sig > 0 && sig < NSIG) sigaddset(&act.sa_mask, sig);
  act.sa_flags = SA_RESTART;
  if (sigaction(sig, &act, &old) != 0) return SIG_ERR;
  return old.sa_handler;
}

void mp_signals_install(void) {
  for (unsigned i = 0; i < MANAGED; i++) {
    struct sigaction cur;
    if (__sigaction(managed[i], NULL, &cur) != 0) continue;
    write_view((int)i, &cur);
    if (cur.sa_handler != SIG_IGN) apply(managed[i], &cur);
  }
  atomic_store_explicit(&active, true, memory_order_release);
}
