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
 * Under `run` a signal can arrive twice: Ctrl-C reaches the whole foreground process group,
 * `run` included, and `run` forwards what it receives (it must: `kill -INT <run>` has to reach
 * the program). A forwarded signal (SI_USER from run's pid, MIMALLOC_PPROF_RUN_PID) within
 * 250 ms of the same signal from elsewhere, or the other way round, is one signal, delivered
 * once; a person pressing Ctrl-C twice is slower than that. A signal the process sends itself
 * takes no part in this.
 *
 * sigaction and signal are interposed so that the program sets and reads its own view; every
 * other signal goes straight to glibc. A signal that lands while its thread samples (it may
 * hold a table lock) is acted on when the sample is done, microseconds later: the program's
 * handler runs at once, the dump and the default action wait (end_with_profile). The dump
 * uses only mmap, open, write, rename and dl_iterate_phdr. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
static pid_t run_pid; /* `mimalloc-pprof run`, when it is this process's parent; else 0 */
/* when each signal last came from run (index 0) and from elsewhere (1), in ns */
static _Atomic(int64_t) last_seen[MANAGED][2];
#define MP_DUPLICATE_NS ((int64_t)250 * 1000 * 1000)
static atomic_flag writing = ATOMIC_FLAG_INIT;
static atomic_int ending; /* 0; 1 while a fatal signal's dump is written; 2 after it */

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

/* Writes the profile, then ends the process by `sig` with its default action. A thread
 * inside the profiler may hold a table lock the dump needs. In a sampler section (short,
 * never waiting for long) it goes on to the end of the section, which calls back here
 * (mp_profiler_leave, mp_signal_resume); elsewhere (a dump, an API call, fork's handlers,
 * exit's dump: possibly long, or stuck on a lock this very thread holds) the signal ends the
 * process at once, without a profile: it must never be kept from ending it. */
static void end_with_profile(int sig) {
  if (mp_tls.in_profiler && mp_tls.in_sample) {
#ifdef MP_TEST_HOOKS
    if (!mp_test_hook("MP_TEST_NO_SIGNAL_DEFER")) /* the deferral test's control: no profile */
#endif
    {
      mp_tls.deferred_signal = sig;
      return;
    }
  }
  int saved = errno;
  /* Past this point the process ends: no later signal is deferred on this thread (its dump is
   * not a sample), and one thread dumps. It blocks the managed signals meanwhile; a signal
   * that another thread takes waits for that dump (a few seconds at most), then ends the
   * process too, so a second Ctrl-C neither restarts the dump nor cuts it short. */
  mp_tls.in_sample = false;
  int idle = 0;
  if (atomic_compare_exchange_strong(&ending, &idle, 1)) {
    sigset_t managed_set;
    sigemptyset(&managed_set);
    for (unsigned i = 0; i < MANAGED; i++) sigaddset(&managed_set, managed[i]);
    pthread_sigmask(SIG_BLOCK, &managed_set, NULL);
    if (!mp_tls.in_profiler && atomic_load(&mp_state.running) && mp_state.dump_at_exit[0] != 0) {
      if (mp_env.dump_peak_at_exit[0] != 0) (void)mp_dump(mp_env.dump_peak_at_exit, mp_state.dump_format, true);
      if (mp_dump(mp_state.dump_at_exit, mp_state.dump_format, false)) atomic_store(&mp_state.running, false);
    }
    atomic_store(&ending, 2);
  } else {
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 5000 && atomic_load(&ending) == 1; i++) nanosleep(&ms, NULL);
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

void mp_signal_resume(void) {
  int sig = mp_tls.deferred_signal;
  mp_tls.deferred_signal = 0;
  mp_assert(!mp_tls.in_profiler);
  if (sig != 0) end_with_profile(sig); /* no return */
}

/* Whether this delivery is the other half of a signal that run forwarded (see above). */
static bool duplicate(int slot, const siginfo_t* info) {
  if (run_pid == 0 || info == NULL) return false;
  /* the program's own raise() or kill() (Node's handler re-raises to die by the signal) is
   * never the other half of a pair */
  if ((info->si_code == SI_USER || info->si_code == SI_TKILL) && info->si_pid == getpid()) return false;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  int64_t now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
  int from_run = info->si_code == SI_USER && info->si_pid == run_pid ? 0 : 1;
  int64_t other = atomic_load(&last_seen[slot][1 - from_run]);
  atomic_store(&last_seen[slot][from_run], now);
  if (other != 0 && now - other < MP_DUPLICATE_NS) {
    atomic_store(&last_seen[slot][1 - from_run], 0); /* one pair, one signal */
    atomic_store(&last_seen[slot][from_run], 0);
    return true;
  }
  return false;
}

static void on_signal(int sig, siginfo_t* info, void* context) {
  int slot = slot_of(sig);
  struct sigaction prog;
  if (slot < 0) return;
  int saved = errno;
  bool twice = duplicate(slot, info);
  errno = saved;
  if (twice) return;
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
  /* every signal blocked while `writing` is held: a handler that calls signal() or sigaction()
   * on this thread would otherwise spin on it forever */
  sigset_t all, before_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before_mask);
  while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire)) {}
  struct sigaction before;
  read_view(slot, &before);
  int rc = 0;
  if (act != NULL) {
    rc = apply(sig, act);
    if (rc == 0) write_view(slot, act);
  }
  atomic_flag_clear_explicit(&writing, memory_order_release);
  pthread_sigmask(SIG_SETMASK, &before_mask, NULL);
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
  pid_t run = mp_run_pid();
  if (run > 1 && run == getppid()) run_pid = run;
  for (unsigned i = 0; i < MANAGED; i++) {
    struct sigaction cur;
    if (__sigaction(managed[i], NULL, &cur) != 0) continue;
    write_view((int)i, &cur);
    if (cur.sa_handler != SIG_IGN) apply(managed[i], &cur);
  }
  atomic_store_explicit(&active, true, memory_order_release);
}
