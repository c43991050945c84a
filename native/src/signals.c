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
 * The program's handlers of every other signal it can catch asynchronously are kept here too
 * (wrapped_signal), in every process the library watches, profile at exit or not: the kernel
 * has this file's handler with the program's mask and flags, and it calls the program's at
 * once, unless the thread holds a profiler lock. Then the signal is held back until the lock is
 * released (hold_back): a handler that leaves by siglongjmp (an interpreter's timer) would take
 * the lock with it. Where the program has SIG_DFL or SIG_IGN the kernel has it too.
 *
 * Every glibc call that sets a disposition is interposed: sigaction, signal (bsd_signal,
 * ssignal), sysv_signal (__sysv_signal, which `signal` is under strict X/Open), sigset,
 * sigignore, and siginterrupt, whose set bsd_signal reads. For the signals kept here, once
 * active, each does what glibc's does through this file's sigaction; for the faults, and before
 * activation, each is glibc's own (the next definition, looked up at load), so that its
 * semantics are glibc's exactly. What is reported (flags, mask) is what the kernel reports for
 * the program's disposition. A disposition set behind this file's back all the same (a raw
 * rt_sigaction, an old binary's sigvec) is found when the view is next read, and adopted.
 *
 * A signal that lands while its thread samples (it may hold a table lock) is acted on when
 * the sample is done, microseconds later: the program's handler runs at once, the dump and the
 * default action wait (end_with_profile). A sample that never ends (a handler left it with
 * siglongjmp) is recognised by where the interrupted code runs (signals.h), and else a
 * deferral comes due after DEFER_NS all the same. The dump uses only mmap, open, write,
 * rename and dl_iterate_phdr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "internal.h"
#include "signals.h"

#ifdef __GLIBC__
/* glibc's implementation under its exported internal name: no dlsym needed. */
extern int __sigaction(int sig, const struct sigaction* act, struct sigaction* old);
#else
/* musl exports no internal name: its sigaction, found once past this library (musl's dlsym
 * does not allocate). */
static int mp_next_sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  typedef int (*sigaction_fn)(int, const struct sigaction*, struct sigaction*);
  static sigaction_fn next;
  sigaction_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
  if (f == NULL) {
    f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    if (f == NULL) {
      errno = ENOSYS;
      return -1;
    }
    __atomic_store_n(&next, f, __ATOMIC_RELEASE);
  }
  return f(sig, act, old);
}
#define __sigaction mp_next_sigaction
#endif

#ifndef SA_INTERRUPT
#define SA_INTERRUPT 0x20000000 /* glibc's sysv_signal sets it: a historical no-op */
#endif

__thread uintptr_t mp_sample_frame __attribute__((tls_model("initial-exec")));

/* The signals whose profile-at-exit handling is described above. */
static const int exit_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
#define EXIT_SIGNALS (sizeof(exit_signals) / sizeof(*exit_signals))
#define MAX_SIG 64

typedef struct view_s {
  atomic_uint seq;      /* odd while being written (a seqlock: the handler only reads) */
  struct sigaction act; /* the program's disposition, as the kernel would report it */
} view_t;

static view_t views[MAX_SIG + 1]; /* by signal number */
static atomic_bool active;
static atomic_bool exit_profile; /* a dump at exit is asked for: the four signals above end with one */
static pid_t run_pid; /* `mimalloc-pprof run`, when it is this process's parent; else 0 */
/* when each exit signal last came from run (index 0) and from elsewhere (1), in ns */
static _Atomic(int64_t) last_seen[EXIT_SIGNALS][2];
#define MP_DUPLICATE_NS ((int64_t)250 * 1000 * 1000)
static atomic_flag writing = ATOMIC_FLAG_INIT;
static atomic_int ending; /* 0; 1 while a fatal signal's dump is written; 2 after it */
/* siginterrupt's set, bit sig-1: glibc keeps its own (bsd_signal reads it, hidden) and this one
 * follows it for the signals this file answers for. Updated by every siginterrupt call. */
static _Atomic(uint64_t) interruptible;

__thread uint64_t mp_held_signals __attribute__((tls_model("initial-exec")));
__thread uint64_t mp_section_block_until __attribute__((tls_model("initial-exec")));
__thread uint64_t mp_section_blocked __attribute__((tls_model("initial-exec")));

/* A deferral is acted on at the latest this long after it began: a sampler section takes
 * microseconds, so one still running then was left by a jump, or is stuck. */
#define DEFER_NS (100L * 1000 * 1000)
/* A dump made after such a deadline may wait on a lock the abandoned section took with it:
 * the process ends by its signal, without the profile, when the dump takes longer than this. */
#define WATCHDOG_NS (2L * 1000 * 1000 * 1000)

static int exit_index(int sig) {
  for (unsigned i = 0; i < EXIT_SIGNALS; i++)
    if (exit_signals[i] == sig) return (int)i;
  return -1;
}

/* Whether this file keeps the program's disposition of `sig`: every signal a program can catch
 * asynchronously. Not the faults a thread raises on itself (its handler must run at the
 * faulting instruction, and a fault in the profiler's own code is no program's to handle),
 * not abort's SIGABRT, not the two glibc keeps for itself (32, 33). */
static bool wrapped_signal(int sig) {
  switch (sig) {
  case SIGKILL: case SIGSTOP: case SIGSEGV: case SIGBUS: case SIGFPE: case SIGILL: case SIGTRAP: case SIGSYS: case SIGABRT:
    return false;
  default:
    return sig >= 1 && sig <= MAX_SIG && (sig < 32 || sig >= SIGRTMIN);
  }
}

/* Whether SIG_DFL of `sig` is this file's handler in the kernel: the profile before the end. */
static bool ends_with_profile(int sig) { return atomic_load_explicit(&exit_profile, memory_order_relaxed) && exit_index(sig) >= 0; }

/* The view of a signal this file answers for now; -1 for any other (glibc's own code). */
static int managed_slot(int sig) { return atomic_load_explicit(&active, memory_order_acquire) && wrapped_signal(sig) ? sig : -1; }

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

/* Whether the kernel's disposition `k` is the one apply() makes for the view `v`. */
static bool kernel_follows(int sig, const struct sigaction* v, const struct sigaction* k) {
  if (v->sa_handler == SIG_IGN) return k->sa_handler == SIG_IGN;
  if (v->sa_handler == SIG_DFL && !ends_with_profile(sig)) return k->sa_handler == SIG_DFL;
  return (k->sa_flags & SA_SIGINFO) && k->sa_sigaction == on_signal;
}

/* Sets the kernel's disposition for the program's `act` and stores in `view` what the kernel
 * would report for `act` itself (glibc adds SA_RESTORER, the kernel drops flags it does not
 * know and SIGKILL/SIGSTOP from the mask): the bits that the kernel added to or removed from
 * what was set, applied to the program's flags. */
static int apply(int sig, const struct sigaction* act, struct sigaction* view) {
  struct sigaction k, back;
  if (act->sa_handler == SIG_IGN || (act->sa_handler == SIG_DFL && !ends_with_profile(sig))) {
    int rc = __sigaction(sig, act, NULL);
    if (rc == 0 && __sigaction(sig, NULL, view) != 0) *view = *act;
    return rc;
  }
  memset(&k, 0, sizeof(k));
  k.sa_sigaction = on_signal;
  if (act->sa_handler == SIG_DFL) {
    sigemptyset(&k.sa_mask);
    k.sa_flags = SA_SIGINFO | SA_RESTART;
  } else {
    k.sa_mask = act->sa_mask;
    k.sa_flags = (act->sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
  }
  int rc = __sigaction(sig, &k, NULL);
  if (rc != 0) return rc;
  *view = *act;
  if (__sigaction(sig, NULL, &back) != 0) return 0;
  int added = back.sa_flags & ~k.sa_flags, removed = k.sa_flags & ~back.sa_flags;
  view->sa_flags = (act->sa_flags | added) & ~removed;
  if (act->sa_handler == SIG_DFL) {
    sigdelset(&view->sa_mask, SIGKILL);
    sigdelset(&view->sa_mask, SIGSTOP);
  } else {
    view->sa_mask = back.sa_mask;
  }
  view->sa_restorer = back.sa_restorer;
  return 0;
}

/* ---- sections left by a jump, deferrals that come due ------------------------------------- */

static inline bool on_stack(const mp_thread_t* t, uintptr_t a) { return t->stack_lo <= a && a < t->stack_hi; }

/* The hostile-signals test's controls: the old signal() (SA_RESTART always, through this
 * file's sigaction, for every signal), and the old view (sigset, sysv_signal, sigignore and
 * siginterrupt straight to glibc, nothing adopted). */
#define OLD_SIGNAL "MP_TEST_OLD_SIGNAL"
#define OLD_VIEW "MP_TEST_OLD_SIGNAL_VIEW"

static bool test_hook(const char* name) {
#ifdef MP_TEST_HOOKS
  return mp_test_hook(name);
#else
  (void)name;
  return false;
#endif
}

static bool recovery_off(void) {
#ifdef MP_TEST_HOOKS
  return mp_test_hook("MP_TEST_NO_SAMPLE_RECOVERY"); /* the hostile-signals test's control: the old behaviour */
#else
  return false;
#endif
}

/* The stack pointer of the code a signal interrupted; 0 when not known. */
static uintptr_t interrupted_sp(const void* context) {
  if (context == NULL) return 0;
  const ucontext_t* uc = context;
#if defined(__x86_64__)
  return (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#elif defined(__aarch64__)
  return (uintptr_t)uc->uc_mcontext.sp;
#else
  return 0;
#endif
}

/* Whether the thread's sampler section was left by a jump, judged from the stack pointer of
 * the code a signal interrupted (signals.h: a running section keeps it at or below its frame). */
static bool left_at(const mp_thread_t* t, uintptr_t sp) {
  uintptr_t f = mp_sample_frame;
  return f != 0 && sp != 0 && on_stack(t, f) && on_stack(t, sp) && sp > f;
}

/* The section's flags cleared, in the order leave_sample clears them. Only for a section that
 * holds no profiler lock: one held by it would never be released (debug builds know, through
 * mp_locks_held; production builds do not track locks, where the watchdog bounds a dump). */
static void forget_section(mp_thread_t* t) {
  t->in_profiler = false;
  atomic_signal_fence(memory_order_seq_cst);
  mp_sample_frame = 0;
  atomic_signal_fence(memory_order_seq_cst);
  t->in_sample = false;
}

bool mp_sample_recover(mp_thread_t* t, uintptr_t frame) {
  uintptr_t f = mp_sample_frame;
  if (!t->in_sample || f == 0 || !on_stack(t, f) || !on_stack(t, frame) || frame < f) return false;
  if (recovery_off() || mp_locks_held() != 0) return false;
  forget_section(t);
  if (t->deferred_signal != 0) mp_signal_resume(); /* a fatal signal waited for this section: no return */
  return true;
}

/* One POSIX timer per thread that deferred a signal, sending that signal to that thread, its
 * value `timer_token`: the deadline of a deferral, then the watchdog of the dump. A fork child
 * has no timers (the pid says whose it is). Made and armed with system calls only (glibc's
 * timer_create is not async-signal-safe for every kind of notification). */
static char timer_token;
static __thread int timer_id __attribute__((tls_model("initial-exec")));
static __thread int timer_sig __attribute__((tls_model("initial-exec")));
static __thread pid_t timer_pid __attribute__((tls_model("initial-exec")));
static __thread bool dumping_here __attribute__((tls_model("initial-exec"))); /* a watched dump runs on this thread */

static bool arm_timer(int sig, long ns) {
  pid_t pid = getpid();
  if (timer_pid != pid || timer_sig != sig) {
    if (timer_pid == pid) (void)syscall(SYS_timer_delete, timer_id);
    timer_pid = 0;
    struct sigevent ev;
    memset(&ev, 0, sizeof(ev));
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = sig;
    ev.sigev_value.sival_ptr = &timer_token;
#ifdef sigev_notify_thread_id /* musl, and glibc with _GNU_SOURCE since 2.36 */
    ev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
#else
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
#endif
    int id = 0;
    if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &ev, &id) != 0) return false;
    timer_id = id;
    timer_sig = sig;
    timer_pid = pid;
  }
  struct itimerspec when;
  memset(&when, 0, sizeof(when));
  when.it_value.tv_sec = ns / 1000000000L;
  when.it_value.tv_nsec = ns % 1000000000L;
  return syscall(SYS_timer_settime, timer_id, 0, &when, NULL) == 0;
}

static bool from_timer(const siginfo_t* info) {
  return info != NULL && info->si_code == SI_TIMER && info->si_value.sival_ptr == &timer_token && timer_pid != 0;
}

/* Acts on `sig` with its default action, from its handler (sig blocked): for the signals whose
 * default ends a process, ends it. The kernel's disposition is SIG_DFL afterwards, as the
 * view's is where this is called for a signal that lives on (a disposition being changed). */
static void die_by(int sig) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  __sigaction(sig, &dfl, NULL);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  raise(sig);                                 /* pending while this handler blocks it */
  pthread_sigmask(SIG_UNBLOCK, &only, NULL); /* delivered now: the default action */
}

/* Writes the profile, then ends the process by `sig` with its default action. A thread
 * inside the profiler may hold a table lock the dump needs. In a sampler section (short,
 * never waiting for long) it goes on to the end of the section, which calls back here
 * (mp_profiler_leave, mp_signal_resume); elsewhere (a dump, an API call, fork's handlers,
 * exit's dump: possibly long, or stuck on a lock this very thread holds) the signal ends the
 * process at once, without a profile: it must never be kept from ending it.
 * A section that the interrupted code is above (`context`) was left by a jump: it is forgotten
 * and the signal acted on now. A deferral whose deadline came (`overdue`) is acted on as if its
 * section had been left; a dump after either is watched (WATCHDOG_NS). */
static void end_with_profile(int sig, const void* context, bool overdue) {
  mp_thread_t* t = &mp_tls;
  bool watched = false;
  if (t->in_profiler && t->in_sample) {
    bool recover = !recovery_off() && mp_locks_held() == 0;
    if (recover && left_at(t, interrupted_sp(context))) {
      forget_section(t);
      watched = true;
    } else if (!overdue) {
#ifdef MP_TEST_HOOKS
      if (!mp_test_hook("MP_TEST_NO_SIGNAL_DEFER")) /* the deferral test's control: no profile */
#endif
      {
        t->deferred_signal = sig;
        if (!recovery_off()) (void)arm_timer(sig, DEFER_NS);
        return;
      }
    } else if (mp_sample_frame == 0) {
      (void)arm_timer(sig, DEFER_NS); /* fork's window (process.c), not a section: it ends by itself */
      return;
    } else if (recover) {
      forget_section(t);
      watched = true;
    } else { /* the section took a profiler lock with it: a dump would wait for it forever */
      mp_write_stderr("a signal handler left the profiler holding a lock (siglongjmp?): no profile written");
    }
  }
  t->deferred_signal = 0;
  int saved = errno;
  /* Past this point the process ends: no later signal is deferred on this thread (its dump is
   * not a sample), and one thread dumps. It blocks the managed signals meanwhile; a signal
   * that another thread takes waits for that dump (a few seconds at most), then ends the
   * process too, so a second Ctrl-C neither restarts the dump nor cuts it short. A watched
   * dump leaves its own signal unblocked for the watchdog's timer, and ignores the rest. */
  t->in_sample = false;
  int idle = 0;
  if (atomic_compare_exchange_strong(&ending, &idle, 1)) {
    sigset_t managed_set;
    sigemptyset(&managed_set);
    for (unsigned i = 0; i < EXIT_SIGNALS; i++) sigaddset(&managed_set, exit_signals[i]);
    pthread_sigmask(SIG_BLOCK, &managed_set, NULL);
    if (!t->in_profiler && atomic_load(&mp_state.running) && mp_state.dump_at_exit[0] != 0) {
      if (watched && arm_timer(sig, WATCHDOG_NS)) {
        sigset_t only;
        sigemptyset(&only);
        sigaddset(&only, sig);
        dumping_here = true;
        pthread_sigmask(SIG_UNBLOCK, &only, NULL);
      }
      if (mp_env.dump_peak_at_exit[0] != 0) (void)mp_dump(mp_env.dump_peak_at_exit, mp_state.dump_format, true);
      if (mp_dump(mp_state.dump_at_exit, mp_state.dump_format, false)) atomic_store(&mp_state.running, false);
      pthread_sigmask(SIG_BLOCK, &managed_set, NULL);
    }
    atomic_store(&ending, 2);
  } else {
    /* not nanosleep: a cancellation point, where a pending cancel would unwind this handler */
    struct timespec ms = {0, 1000 * 1000};
    for (int i = 0; i < 5000 && atomic_load(&ending) == 1; i++) (void)syscall(SYS_nanosleep, &ms, NULL);
  }
  errno = saved;
  die_by(sig);
}

void mp_signal_resume(void) {
  int sig = mp_tls.deferred_signal;
  mp_tls.deferred_signal = 0;
  mp_assert(!mp_tls.in_profiler);
  if (sig != 0) end_with_profile(sig, NULL, false); /* no return */
}

/* Whether this delivery is the other half of a signal that run forwarded (see above). */
static bool duplicate(int sig, const siginfo_t* info) {
  int slot = exit_index(sig);
  if (run_pid == 0 || info == NULL || slot < 0 || !ends_with_profile(sig)) return false;
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

/* Held back while this thread holds a profiler lock (mp_locks_held): a handler that ended with
 * siglongjmp would take the lock with it, and the table it guards could be half-changed. The
 * signal is blocked on this thread at once (so that an SA_NODEFER handler's signal cannot come
 * back into this wrapper for as long as the lock is held) and in the interrupted code's mask,
 * and its siginfo is kept here, in the order signals came. At the last release
 * (mp_signals_release) each is queued again to this thread ahead of the instances of the same
 * signal that came while it was blocked, and unblocked: the kernel delivers it, with
 * everything the program asked for (mask, flags, alternate stack, a context of its own), and
 * then the later ones, in their order, none lost (a standard signal pends once: its later
 * instance is queued after the first was delivered). A section holds a lock for a few hash
 * operations; a dump for a shard's walk. The faults and SIGABRT are not held (wrapped_signal):
 * they are not this file's.
 *
 * Invariants: a signal with an entry in `held` or a bit in mp_held_signals is blocked on this
 * thread; entries are appended only while a lock is held, and taken only when none is. */
#define HELD_MAX 4 /* kept in order; a further one is queued to the kernel at once */
/* Of a held siginfo, its head and union: the largest members of the union (a fault's address
 * with its bounds, a child's times) end at byte 48 on x86-64 and arm64, and the rest is
 * padding that carries nothing (since Linux 4.20 the kernel keeps 48 bytes of a siginfo and
 * zeroes the rest of what it writes; an older kernel, or qemu-user, may leave stack bytes
 * there), so these bytes are all of it, and a held signal is queued again with the rest zero.
 * Why not the whole siginfo_t: this block is static TLS, which glibc takes from each thread's
 * stack, and four whole ones (520 bytes) were enough to overflow a 16 KiB stack that the
 * program had filled to within 1 KiB of its end, which it survives without this library
 * (core-round2 repro n1, profiler off, use=7). */
#define HELD_INFO_BYTES 48
_Static_assert(offsetof(siginfo_t, si_signo) == 0 && sizeof(siginfo_t) >= HELD_INFO_BYTES, "a held siginfo is its first bytes");
_Static_assert(offsetof(siginfo_t, si_stime) + sizeof(((siginfo_t*)0)->si_stime) <= HELD_INFO_BYTES &&
                   offsetof(siginfo_t, si_value) + sizeof(union sigval) <= HELD_INFO_BYTES,
               "a child's times and a queued value are within the bytes kept");
static __thread struct {
  unsigned n;
  unsigned char info[HELD_MAX][HELD_INFO_BYTES];
} held __attribute__((tls_model("initial-exec")));

/* The held signals that releases on this thread unblocked while the program's handler now
 * running ran (on_signal keeps the count of each handler). A release inside a handler may
 * deliver one held back in the context the handler interrupted, or one that context's own
 * release would have delivered: it unblocks it for the handler, and sigreturn would block it
 * again there for good, from the mask saved when the handler came. on_signal takes those that
 * were held back when the handler came, and blocked in that saved mask, out of it: the hold
 * blocked them there (the signal came, so the program had not). */
static __thread uint64_t released_here __attribute__((tls_model("initial-exec")));

static int held_signo(unsigned k) {
  int sig;
  memcpy(&sig, held.info[k], sizeof(sig));
  return sig;
}
/* Instances of a held signal that the kernel queued while it was blocked, taken back to be put
 * behind it: at most this many (a buffer mapped for the release, so that no thread carries it). */
#define LATER_MAX 1024

static inline uint64_t sig_bit(int sig) { return (uint64_t)1 << (sig - 1); }
static inline bool is_standard(int sig) { return sig < 32; } /* the kernel's: pends once */

static void block_here(uint64_t bits) { (void)syscall(SYS_rt_sigprocmask, SIG_BLOCK, &bits, NULL, sizeof(bits)); }
static void unblock_here(uint64_t bits) { (void)syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &bits, NULL, sizeof(bits)); }
static bool queue_here(siginfo_t* info) {
  pid_t pid = (pid_t)syscall(SYS_getpid), tid = (pid_t)syscall(SYS_gettid);
  return syscall(SYS_rt_tgsigqueueinfo, pid, tid, info->si_signo, info) == 0 || syscall(SYS_tgkill, pid, tid, info->si_signo) == 0;
}

/* Real-time signals queue, and the kernel delivers a signal's instances in the order they were
 * sent. One held back (above) has left the queue; those sent after it wait in the queue, and
 * the release puts it back ahead of them. A sender still sending while the release puts them
 * back puts its newer instances among them: each put-back is a system call, as each send is.
 * On a thread that a sender keeps busy (a burst of 16 queued while it allocates, every
 * allocation sampled) that was 0.5-3 % of the signals out of order, and the put-back is
 * needed at each section that one lands in.
 * So a thread that held back a real-time signal blocks the real-time signals around each of its
 * sections for SECTION_BLOCK_NS after: those sent meanwhile wait in the kernel's queue, in
 * order, and none is taken out of it to be put back. Two system calls a section while it
 * lasts; none, and one TLS test a section, on a thread that none lands on (most programs
 * install no real-time handler). Only the real-time signals: a standard one pends once, and
 * holding it back keeps its order already; the fatal and exit signals keep their paths. */
#define SECTION_BLOCK_NS ((uint64_t)100 * 1000 * 1000)

/* The C library's real-time signals, SIGRTMIN up (below it are its own): set at install. */
static uint64_t realtime_bits;

#ifdef MP_TEST_HOOKS
/* MP_TEST_SIGNAL_COUNTS=1: how often a held real-time signal was put back, and how many
 * sections blocked the real-time signals, printed at exit (the queued test). */
static _Atomic uint64_t rt_put_backs, sections_blocked;
static void report_signal_counts(void) {
  char line[128] = "signal counts: rt_put_backs=";
  size_t n = mp_strlen(line);
  n += mp_fmt_u64(line + n, atomic_load(&rt_put_backs));
  const char* more = " sections_blocked=";
  for (size_t i = 0; more[i] != 0; i++) line[n++] = more[i];
  n += mp_fmt_u64(line + n, atomic_load(&sections_blocked));
  line[n] = 0;
  mp_write_stderr(line);
}
#endif

#ifdef MP_TEST_HOOKS
static __thread bool steal_step_due __attribute__((tls_model("initial-exec")));
void mp_test_steal_held(int step) {
  static atomic_int done;
  if (!mp_test_hook("MP_TEST_STEAL_HELD") || atomic_load_explicit(&done, memory_order_relaxed) != 0) return;
  pid_t pid = (pid_t)syscall(SYS_getpid), tid = (pid_t)syscall(SYS_gettid);
  if (step == 0) {
    struct sigaction rt, other;
    read_view(SIGRTMIN, &rt);
    read_view(SIGUSR1, &other);
    if (rt.sa_handler == SIG_DFL || rt.sa_handler == SIG_IGN || other.sa_handler == SIG_DFL || other.sa_handler == SIG_IGN) return;
    steal_step_due = true;
    (void)syscall(SYS_tgkill, pid, tid, SIGRTMIN); /* comes at once, and is held back */
  } else if (steal_step_due) {
    steal_step_due = false;
    atomic_store(&done, 1);
    (void)syscall(SYS_tgkill, pid, tid, SIGUSR1); /* comes at once; its handler calls the API */
  }
}
#endif

/* Only the bits it blocks itself are the section's: one that a handler begins while an outer
 * section or release still has them blocked (util.c take_section_bits) leaves them to it. */
uint64_t mp_signals_section_begin(void) {
  if (mp_coarse_ns() >= mp_section_block_until) {
    mp_section_block_until = 0;
    return 0;
  }
  uint64_t bits = realtime_bits, before = 0;
  if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &bits, &before, sizeof(bits)) != 0) return 0;
#ifdef MP_TEST_HOOKS
  atomic_fetch_add_explicit(&sections_blocked, 1, memory_order_relaxed);
#endif
  return bits & ~before;
}

static void arm_section_block(int sig) {
  if (is_standard(sig)) return;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_NO_SECTION_BLOCK")) return; /* the queued test's control */
#endif
  mp_section_block_until = mp_coarse_ns() + SECTION_BLOCK_NS;
}

static bool hold_back(int sig, const siginfo_t* info, void* context) {
  if (mp_locks_held() == 0 || context == NULL || info == NULL) return false;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_NO_SIGNAL_HOLD")) return false; /* the hostile-signals test's control */
#endif
  int saved = errno;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_REQUEUE_HOLD")) { /* the queued test's control: the first hold, queued again at once, not blocked here */
    siginfo_t again = *info;
    again.si_signo = sig;
    bool queued = queue_here(&again);
    if (queued) {
      sigaddset(&((ucontext_t*)context)->uc_sigmask, sig);
      mp_held_signals |= sig_bit(sig);
    }
    errno = saved;
    return queued;
  }
#endif
  block_here(sig_bit(sig));
  sigaddset(&((ucontext_t*)context)->uc_sigmask, sig);
  /* the slot is reserved in one step, before it is filled: a signal in between takes the next */
  unsigned k = __atomic_fetch_add(&held.n, 1u, __ATOMIC_RELAXED);
  if (k >= HELD_MAX) __atomic_fetch_sub(&held.n, 1u, __ATOMIC_RELAXED);
  if (k < HELD_MAX) {
    atomic_signal_fence(memory_order_seq_cst);
    memcpy(held.info[k], info, HELD_INFO_BYTES);
    memcpy(held.info[k], &sig, sizeof(sig)); /* si_signo */
  } else {
    siginfo_t again = *info;
    again.si_signo = sig;
    if (!queue_here(&again)) {
      unblock_here(sig_bit(sig));
      sigdelset(&((ucontext_t*)context)->uc_sigmask, sig);
      errno = saved;
      return false; /* not queued: better now than never */
    }
  }
  atomic_signal_fence(memory_order_seq_cst);
  mp_held_signals |= sig_bit(sig);
  arm_section_block(sig);
  errno = saved;
  return true;
}

/* Delivers the oldest held signal and the instances of it that came since, in order. Its
 * signal is blocked on entry; unblocked on return unless another held entry still needs it. */
static void deliver_oldest(void) {
  siginfo_t first;
  memset(&first, 0, sizeof(first));
  memcpy(&first, held.info[0], HELD_INFO_BYTES);
  int sig = first.si_signo;
  for (unsigned i = 1; i < held.n; i++) memcpy(held.info[i - 1], held.info[i], HELD_INFO_BYTES);
  held.n--;
  bool more = false;
  for (unsigned i = 0; i < held.n; i++) more |= held_signo(i) == sig;
  if (more) { /* the next entry of this signal follows it, still blocked */
    (void)queue_here(&first);
    return;
  }
  /* take back what the kernel queued meanwhile, to put it behind `first` */
  siginfo_t* later = NULL;
  unsigned n = 0;
  uint64_t set = sig_bit(sig);
  struct timespec now = {0, 0};
  if (syscall(SYS_rt_sigpending, &set, sizeof(set)) == 0 && (set & sig_bit(sig)) != 0) {
    void* area = (void*)syscall(SYS_mmap, NULL, LATER_MAX * sizeof(siginfo_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if ((uintptr_t)area < (uintptr_t)-4096) {
      later = area;
      set = sig_bit(sig);
      while (n < LATER_MAX && syscall(SYS_rt_sigtimedwait, &set, &later[n], &now, sizeof(set)) == sig) n++;
    }
  }
#ifdef MP_TEST_HOOKS
  if (!is_standard(sig)) atomic_fetch_add_explicit(&rt_put_backs, 1, memory_order_relaxed);
  if (mp_test_hook("MP_TEST_PUT_BACK_BEHIND") && !is_standard(sig)) { /* the queued test's control: behind the later ones */
    for (unsigned i = 0; i < n; i++) (void)queue_here(&later[i]);
    n = 0;
  }
#endif
  (void)queue_here(&first);
  if (!is_standard(sig))
    for (unsigned i = 0; i < n; i++) (void)queue_here(&later[i]); /* a queue: in order */
  mp_held_signals &= ~sig_bit(sig);
  released_here |= sig_bit(sig);
  atomic_signal_fence(memory_order_seq_cst);
  unblock_here(sig_bit(sig)); /* delivered here */
  if (is_standard(sig))
    for (unsigned i = 0; i < n; i++) (void)queue_here(&later[i]); /* pends once: one by one, delivered at once */
  if (later != NULL) (void)syscall(SYS_munmap, later, LATER_MAX * sizeof(siginfo_t));
}

void mp_signals_release(uint64_t section_bits) {
  int saved = errno;
  /* The section's first, but for the held ones: their later instances go behind them
   * (deliver_oldest). Before any handler runs, so that one that leaves by a jump leaves none
   * of them blocked. */
  uint64_t now = section_bits & ~mp_held_signals;
  if (now != 0) unblock_here(now);
  while (held.n > 0 && mp_locks_held() == 0) deliver_oldest(); /* a handler may hold and release in turn */
  if (mp_locks_held() == 0) {
    uint64_t rest = mp_held_signals; /* queued to the kernel at once (more than HELD_MAX) */
    mp_held_signals = 0;
    atomic_signal_fence(memory_order_seq_cst);
    released_here |= rest;
    if (rest != 0) unblock_here(rest);
  }
  errno = saved;
}

/* fork() waits for a sigaction() under way in another thread, so that the child finds every
 * view whole and `writing` free (it would otherwise inherit both half-written, with no thread
 * to finish them). Every signal is blocked on the forking thread meanwhile, as sigaction()
 * blocks them while it holds `writing`: a handler that calls sigaction() cannot come in
 * between. The mask is per thread: two threads may fork at once, one after the other here. */
static __thread uint64_t fork_mask;

void mp_signals_fork_prepare(void) {
  uint64_t all = ~(uint64_t)0;
  (void)syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &fork_mask, sizeof(all));
  while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire)) mp_spin_hint();
}

void mp_signals_fork_parent(void) {
  atomic_flag_clear_explicit(&writing, memory_order_release);
  (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &fork_mask, NULL, sizeof(fork_mask));
}

void mp_signals_child_forget(void) { /* the held ones are the parent's to deliver */
  atomic_flag_clear_explicit(&writing, memory_order_release); /* taken by this thread's prepare */
  (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &fork_mask, NULL, sizeof(fork_mask));
  held.n = 0;
  uint64_t rest = mp_held_signals | mp_section_blocked; /* fork's prepare took locks: a section */
  mp_held_signals = 0;
  mp_section_blocked = 0;
  mp_section_block_until = 0;
  if (rest != 0) unblock_here(rest);
}

/* One-shot (SA_RESETHAND): SIG_DFL from now on, as the kernel does, its flags kept as the
 * kernel keeps them. Written as sigaction() writes (`writing` held, every signal blocked), and
 * only while the view is still the handler being run: another thread's sigaction() since wins. */
static void reset_to_default(int sig, const struct sigaction* prog) {
  uint64_t all = ~(uint64_t)0, before = 0;
  (void)syscall(SYS_rt_sigprocmask, SIG_BLOCK, &all, &before, sizeof(all));
  while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire)) mp_spin_hint();
  struct sigaction now;
  read_view(sig, &now);
  if (now.sa_handler == prog->sa_handler && now.sa_flags == prog->sa_flags) {
    struct sigaction dfl = *prog;
    dfl.sa_handler = SIG_DFL;
    write_view(sig, &dfl);
    if (!ends_with_profile(sig)) {
      struct sigaction k = dfl;
      (void)__sigaction(sig, &k, NULL);
    }
  }
  atomic_flag_clear_explicit(&writing, memory_order_release);
  (void)syscall(SYS_rt_sigprocmask, SIG_SETMASK, &before, NULL, sizeof(before));
}

static void on_signal(int sig, siginfo_t* info, void* context) {
  struct sigaction prog;
  if (!wrapped_signal(sig)) return;
  if (dumping_here) { /* a watched dump runs on this thread (end_with_profile) */
    if (from_timer(info)) die_by(sig); /* it took too long: no profile */
    return;                            /* the dump ends the process by its signal anyway */
  }
  if (from_timer(info)) { /* a deferral's deadline; stale when the deferral was acted on */
    int deferred = mp_tls.deferred_signal;
    if (deferred != 0) end_with_profile(deferred, context, true);
    return;
  }
  read_view(sig, &prog);
  bool profile_end = prog.sa_handler == SIG_DFL && ends_with_profile(sig);
  if (!profile_end && prog.sa_handler != SIG_IGN && hold_back(sig, info, context)) return;
  int saved = errno;
  bool twice = duplicate(sig, info);
  errno = saved;
  if (twice) return;
  if (profile_end) {
    end_with_profile(sig, context, false);
    return;
  }
  if (prog.sa_handler == SIG_IGN) return;
  if (prog.sa_handler == SIG_DFL) {
    die_by(sig);
    return;
  }
  if (prog.sa_flags & SA_RESETHAND) reset_to_default(sig, &prog);
  /* Held back in the context this handler interrupted, and so blocked there by the hold: only
   * those come out of the saved mask. Not the rest of what a release here unblocks: the saved
   * mask may be one the program set (sigsuspend, pselect, ppoll and epoll_pwait leave the mask
   * from before the call there, which blocks what the program keeps for the handlers). */
  uint64_t saved_mask = 0, held_below = 0; /* the kernel's 64 signals: the set's first word */
  if (mp_held_signals != 0 && context != NULL) {
    memcpy(&saved_mask, &((ucontext_t*)context)->uc_sigmask, sizeof(saved_mask));
    held_below = mp_held_signals & saved_mask;
  }
  uint64_t released_before = released_here;
  released_here = 0;
  if (prog.sa_flags & SA_SIGINFO) prog.sa_sigaction(sig, info, context);
  else prog.sa_handler(sig);
  uint64_t released = released_here, mend = released & held_below;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_NO_RELEASE_FIXUP")) mend = 0;            /* the steal test's control */
  if (mp_test_hook("MP_TEST_RELEASE_FIXUP_ALL")) mend = released;    /* the suspend test's control */
#endif
  if (mend != 0 && context != NULL) {
    memcpy(&saved_mask, &((ucontext_t*)context)->uc_sigmask, sizeof(saved_mask)); /* as the handler left it */
    saved_mask &= ~mend;
    memcpy(&((ucontext_t*)context)->uc_sigmask, &saved_mask, sizeof(saved_mask));
  }
  released_here = released_before | released; /* the context below may be a handler's too */
}

/* ---- the interposed calls ----------------------------------------------------------------- */

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction* act, struct sigaction* old) {
  int slot = managed_slot(sig);
  if (slot < 0) return __sigaction(sig, act, old);
  /* every signal blocked while `writing` is held: a handler that calls signal() or sigaction()
   * on this thread would otherwise spin on it forever */
  sigset_t all, before_mask;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &before_mask);
  while (atomic_flag_test_and_set_explicit(&writing, memory_order_acquire)) {}
  struct sigaction before, kernel, view;
  read_view(slot, &before);
  /* set behind the view's back (a raw rt_sigaction, an old binary's sigvec): adopted */
  if (!test_hook(OLD_VIEW) && __sigaction(sig, NULL, &kernel) == 0 && !kernel_follows(sig, &before, &kernel)) {
    before = kernel;
    if (apply(sig, &kernel, &view) == 0) write_view(slot, &view);
  }
  int rc = 0;
  if (act != NULL) {
    rc = apply(sig, act, &view);
    if (rc == 0) write_view(slot, &view);
  }
  atomic_flag_clear_explicit(&writing, memory_order_release);
  pthread_sigmask(SIG_SETMASK, &before_mask, NULL);
  if (rc == 0 && old != NULL) *old = before;
  return rc;
}

/* glibc's own definitions, for every signal that is not answered for here. Looked up at load
 * (dlsym is no call for a signal handler, where signal() may run); a call before that (another
 * library's constructor) looks up then. */
typedef sighandler_t (*set_fn)(int, sighandler_t);
typedef int (*int_fn)(int);
static _Atomic(set_fn) next_bsd_signal, next_sysv_signal, next_sigset;
static _Atomic(int_fn) next_sigignore;
static _Atomic(int (*)(int, int)) next_siginterrupt;

static void* next_of(const char* name) { return dlsym(RTLD_NEXT, name); }

#define NEXT(var, name)                                                                       \
  ({                                                                                          \
    __typeof__(atomic_load(&var)) f_ = atomic_load_explicit(&var, memory_order_relaxed);      \
    if (f_ == NULL) {                                                                         \
      f_ = (__typeof__(f_))next_of(name);                                                     \
      atomic_store_explicit(&var, f_, memory_order_relaxed);                                  \
    }                                                                                         \
    f_;                                                                                       \
  })

__attribute__((constructor)) static void look_up_next(void) {
  (void)NEXT(next_bsd_signal, "bsd_signal");
  (void)NEXT(next_sysv_signal, "__sysv_signal");
  (void)NEXT(next_sigset, "sigset");
  (void)NEXT(next_sigignore, "sigignore");
  (void)NEXT(next_siginterrupt, "siginterrupt");
}

static bool is_interruptible(int sig) {
  return sig >= 1 && sig <= 64 && (atomic_load_explicit(&interruptible, memory_order_relaxed) >> (sig - 1) & 1);
}

/* sigaction(sig) with handler, the signal itself blocked in it or not, and flags: the old
 * handler, or SIG_ERR. */
static sighandler_t set_disposition(int sig, sighandler_t handler, bool block_self, int flags) {
  struct sigaction act, old;
  memset(&act, 0, sizeof(act));
  act.sa_handler = handler;
  sigemptyset(&act.sa_mask);
  if (block_self && sig > 0 && sig < NSIG) sigaddset(&act.sa_mask, sig);
  act.sa_flags = flags;
  return sigaction(sig, &act, &old) != 0 ? SIG_ERR : old.sa_handler;
}

/* glibc's __bsd_signal, for a signal answered for here: the signal blocked in its handler,
 * calls restarted unless siginterrupt made the signal interrupt them. */
static sighandler_t bsd_signal_here(int sig, sighandler_t handler) {
  if (handler == SIG_ERR) {
    errno = EINVAL;
    return SIG_ERR;
  }
  return set_disposition(sig, handler, true, is_interruptible(sig) ? 0 : SA_RESTART);
}

static sighandler_t bsd_signal_any(int sig, sighandler_t handler) {
  if (test_hook(OLD_SIGNAL)) return set_disposition(sig, handler, true, SA_RESTART);
  if (managed_slot(sig) >= 0) return bsd_signal_here(sig, handler);
  set_fn next = NEXT(next_bsd_signal, "bsd_signal");
  if (next == NULL) { /* no glibc definition found: its semantics, here (siginterrupt's set is ours) */
    if (sig < 1 || sig >= NSIG) {
      errno = EINVAL;
      return SIG_ERR;
    }
    return bsd_signal_here(sig, handler);
  }
  return next(sig, handler);
}

__attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t handler) { return bsd_signal_any(sig, handler); }
__attribute__((visibility("default"))) sighandler_t bsd_signal(int sig, sighandler_t handler) { return bsd_signal_any(sig, handler); }
__attribute__((visibility("default"))) sighandler_t ssignal(int sig, sighandler_t handler) { return bsd_signal_any(sig, handler); }

/* glibc's __sysv_signal: one-shot, not blocked in its handler, calls interrupted. */
static sighandler_t sysv_signal_any(int sig, sighandler_t handler) {
  set_fn next = managed_slot(sig) >= 0 && !test_hook(OLD_VIEW) ? NULL : NEXT(next_sysv_signal, "__sysv_signal");
  if (next != NULL) return next(sig, handler);
  if (handler == SIG_ERR || sig < 1 || sig >= NSIG) {
    errno = EINVAL;
    return SIG_ERR;
  }
  return set_disposition(sig, handler, false, (SA_RESETHAND | SA_NODEFER | SA_INTERRUPT) & ~SA_RESTART);
}

__attribute__((visibility("default"))) sighandler_t sysv_signal(int sig, sighandler_t handler) { return sysv_signal_any(sig, handler); }
__attribute__((visibility("default"))) sighandler_t __sysv_signal(int sig, sighandler_t handler) { return sysv_signal_any(sig, handler); }

/* glibc's sigset (System V): SIG_HOLD blocks the signal; anything else is set with no mask and
 * no flags, and unblocks it. SIG_HOLD is answered when the signal was blocked. */
__attribute__((visibility("default"))) sighandler_t sigset(int sig, sighandler_t disp) {
  set_fn next = managed_slot(sig) >= 0 && !test_hook(OLD_VIEW) ? NULL : NEXT(next_sigset, "sigset");
  if (next != NULL) return next(sig, disp);
  sigset_t set, oset;
  sigemptyset(&set);
  if (disp == SIG_ERR || sigaddset(&set, sig) < 0) {
    errno = EINVAL;
    return SIG_ERR;
  }
  struct sigaction act, old;
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &set, &oset) < 0) return SIG_ERR;
    if (sigismember(&oset, sig)) return SIG_HOLD;
    if (sigaction(sig, NULL, &old) < 0) return SIG_ERR;
    return old.sa_handler;
  }
  memset(&act, 0, sizeof(act));
  act.sa_handler = disp;
  sigemptyset(&act.sa_mask);
  act.sa_flags = 0;
  if (sigaction(sig, &act, &old) < 0) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &set, &oset) < 0) return SIG_ERR;
  return sigismember(&oset, sig) ? SIG_HOLD : old.sa_handler;
}

__attribute__((visibility("default"))) int sigignore(int sig) {
  int_fn next = managed_slot(sig) >= 0 && !test_hook(OLD_VIEW) ? NULL : NEXT(next_sigignore, "sigignore");
  if (next != NULL) return next(sig);
  struct sigaction act;
  memset(&act, 0, sizeof(act));
  act.sa_handler = SIG_IGN;
  sigemptyset(&act.sa_mask);
  return sigaction(sig, &act, NULL);
}

/* glibc's siginterrupt: the signal joins (or leaves) the set that bsd_signal reads, and its
 * current disposition gets SA_RESTART cleared (or set). */
__attribute__((visibility("default"))) int siginterrupt(int sig, int interrupt) {
  if (sig >= 1 && sig <= 64) {
    uint64_t bit = (uint64_t)1 << (sig - 1);
    if (interrupt) atomic_fetch_or_explicit(&interruptible, bit, memory_order_relaxed);
    else atomic_fetch_and_explicit(&interruptible, ~bit, memory_order_relaxed);
  }
  int (*next)(int, int) = managed_slot(sig) >= 0 && !test_hook(OLD_VIEW) ? NULL : NEXT(next_siginterrupt, "siginterrupt");
  if (next != NULL) return next(sig, interrupt);
  struct sigaction act;
  if (sigaction(sig, NULL, &act) < 0) return -1;
  if (interrupt) act.sa_flags &= ~SA_RESTART;
  else act.sa_flags |= SA_RESTART;
  return sigaction(sig, &act, NULL) < 0 ? -1 : 0;
}

void mp_signals_install(bool with_exit_profile) {
  pid_t run = mp_run_pid();
  if (run > 1 && run == getppid()) run_pid = run;
  atomic_store_explicit(&exit_profile, with_exit_profile, memory_order_relaxed);
  for (int sig = 1; sig <= MAX_SIG; sig++) {
    struct sigaction cur, view;
    if (!wrapped_signal(sig) || __sigaction(sig, NULL, &cur) != 0) continue;
    write_view(sig, &cur); /* as the kernel reports it: nothing set yet has no SA_RESTORER */
    if (cur.sa_handler != SIG_IGN && (cur.sa_handler != SIG_DFL || ends_with_profile(sig))) (void)apply(sig, &cur, &view);
  }
  for (int s = SIGRTMIN; s <= SIGRTMAX && s <= MAX_SIG; s++) realtime_bits |= sig_bit(s);
  atomic_store_explicit(&active, true, memory_order_release);
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SIGNAL_COUNTS")) atexit(report_signal_counts);
#endif
}
