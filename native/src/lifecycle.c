/* The library's start-up and exit: options, the interposer and the profiler at load, the
 * verbose line, the `run` marker, and the profile written at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <mimalloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

/* The parameters of a start from the environment. (Defined here, where the constructor
 * reads them, so that a static link that takes the API takes the constructor too.) */
void mp_params_from_env(params_t* p) {
  memset(p, 0, sizeof(*p));
  p->interval = mp_env.interval;
  p->seeded = mp_env.seed_set;
  p->seed = mp_env.seed;
  p->accum = mp_env.accum;
  p->bt_max = mp_env.bt_max;
  p->max_bytes = mp_env.max_bytes;
  strcpy(p->dump_at_exit, mp_env.dump_at_exit);
  p->dump_format = mp_env.dump_format;
}

/* ---- load and exit ----------------------------------------------------------------------------- */
/* exit() may come from a signal handler that interrupted this thread inside the profiler
 * (common, though not async-signal-safe), where it may hold a table lock and the tables
 * may be half-updated: the dump is skipped, and said, rather than wait forever. */
static void dump_at_exit(void) {
  if (!atomic_load(&mp_state.running) || mp_state.dump_at_exit[0] == 0) return;
  bool guard = mp_tls.in_profiler;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SKIP_REENTRY_GUARD")) guard = false; /* the signal tests' control */
#endif
  if (guard) {
    mp_write_stderr("exit() interrupted the profiler on this thread (from a signal handler?): no profile written at exit");
    return;
  }
  if (mp_env.dump_peak_at_exit[0] != 0 && !mp_dump(mp_env.dump_peak_at_exit, mp_state.dump_format, true)) {
    char path[MI_PROF_DUMP_PATH_MAX];
    if (!mp_expand_path(mp_env.dump_peak_at_exit, path, sizeof(path))) strcpy(path, mp_env.dump_peak_at_exit);
    mp_warnf2("cannot write the peak profile at exit to ", path, "");
  }
  if (!mp_dump(mp_state.dump_at_exit, mp_state.dump_format, false)) {
    char path[MI_PROF_DUMP_PATH_MAX];
    if (!mp_expand_path(mp_state.dump_at_exit, path, sizeof(path))) strcpy(path, mp_state.dump_at_exit);
    mp_warnf2("cannot write the profile at exit to ", path, "");
  }
}

/* The unwind rules for the next run (rulefile.c), unless exit interrupted the profiler. */
static void save_rules_at_exit(void) {
  bool guard = mp_tls.in_profiler;
  if (guard) return;
  mp_tls.in_profiler = true;
  mp_rules_save();
  mp_profiler_leave(&mp_tls, guard);
}

static void say_verbose(void) {
  char line[1024];
  size_t n = 0;
#define ADD(s) do { const char* s_ = (s); while (*s_ && n < sizeof(line) - 32) line[n++] = *s_++; } while (0)
#define ADDU(v) do { n += mp_fmt_u64(line + n, (uint64_t)(v)); } while (0)
#define ADDV(v) do { int v_ = (v); bool wide_ = v_ >= 10000; /* 209 is 2.0.9; 20401 is 2.4.1 */ \
    ADDU(wide_ ? v_ / 10000 : v_ / 100); ADD("."); ADDU(wide_ ? v_ / 100 % 100 : v_ / 10 % 10); ADD("."); \
    ADDU(wide_ ? v_ % 100 : v_ % 10); } while (0)
  ADD("mimalloc ");
  ADDV(mi_version());
  ADD(" (built against ");
  ADDV(MI_MALLOC_VERSION);
  /* where it came from: linked into this library (the self-contained build) or a shared
   * mimalloc, named by its path */
  Dl_info mi_info, self_info;
  bool mi_known = dladdr((const void*)(uintptr_t)&mi_version, &mi_info) != 0 && mi_info.dli_fname != NULL;
  bool self_known = dladdr((const void*)(uintptr_t)&say_verbose, &self_info) != 0;
  if (mi_known && self_known && mi_info.dli_fbase == self_info.dli_fbase) {
    ADD(", linked in statically");
  } else if (mi_known) {
    ADD(", from ");
    ADD(mi_info.dli_fname);
  }
  ADD("); ");
  ADD(mp_interposing ? "interposer active" : "interposer NOT active (loaded with dlopen?)");
  ADD("; profiler ");
  if (atomic_load(&mp_state.running)) {
    ADD("running, interval ");
    ADDU(mp_state.interval);
    ADD(mp_state.seeded ? ", seeded" : ", unseeded");
    if (mp_state.accum) ADD(", cumulative");
    if (mp_state.dump_at_exit[0] != 0) {
      ADD(", dump at exit to ");
      ADD(mp_state.dump_at_exit);
    }
  } else {
    ADD("stopped");
  }
  ADD("; exact counters ");
  ADD(atomic_load(&mp_events_on) ? "on" : "off");
  line[n] = 0;
#undef ADD
#undef ADDU
#undef ADDV
  mp_write_stderr(line);
}

const char* mp_getenv(const char* name) {
  extern char** environ;
  size_t n = mp_strlen(name);
  for (char** e = environ; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

const char* mp_run_dir(void) {
  const char* dir = mp_getenv("MIMALLOC_PPROF_RUN_DIR");
  return dir != NULL && dir[0] != 0 ? dir : NULL;
}

/* Under `mimalloc-pprof run`, leave <dir>/loaded.<pid>: the proof that the preload took
 * effect in this process, which ld.so would otherwise skip silently. It holds the process's
 * working directory (a line: where V8 may leave its logs for run to remove), its parent's pid
 * (a line) and its command line (the rest, arguments ended by NUL), for run's summary. An
 * exec'ed image writes it again (the last image is the one whose profile run reads), and so
 * does a child that fork gives the profiler to (process.c).
 * It runs in fork's child handler, where a cancel the forking thread had pending is pending
 * still and the stack may be nearly spent: raw system calls, no cancellation point (cancel.h),
 * and under 1 KiB of stack; the working directory goes through a static buffer, which has one
 * user at a time (the process's only thread then: its constructor, a new image's, a fork child). */
static char marker_cwd[4096];

void mp_mark_loaded(void) {
  const char* dir = mp_run_dir();
  if (dir == NULL) return;
  char name[32] = "loaded.";
  size_t n = mp_strlen(name);
  n += mp_fmt_u64(name + n, (uint64_t)getpid());
  name[n] = 0;
  int saved = errno;
  int dir_fd = mp_open_nocancel(dir, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
  int fd = dir_fd < 0 ? -1 : (int)syscall(SYS_openat, dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (dir_fd >= 0) mp_close_nocancel(dir_fd);
  if (fd >= 0) {
    long got = syscall(SYS_getcwd, marker_cwd, sizeof(marker_cwd)); /* its length with the NUL */
    if (got > 1) (void)mp_write_nocancel(fd, marker_cwd, (size_t)got - 1);
    char line[48];
    size_t k = 0;
    line[k++] = '\n';
    k += mp_fmt_u64(line + k, (uint64_t)getppid());
    line[k++] = '\n';
    (void)mp_write_nocancel(fd, line, k);
    int cmd = mp_open_nocancel("/proc/self/cmdline", O_RDONLY | O_CLOEXEC, 0);
    if (cmd >= 0) {
      char chunk[512];
      ssize_t part;
      while ((part = mp_read_nocancel(cmd, chunk, sizeof(chunk))) > 0)
        if (mp_write_nocancel(fd, chunk, (size_t)part) < 0) break; /* run then knows less of it */
      mp_close_nocancel(cmd);
    }
    mp_close_nocancel(fd);
  }
  errno = saved;
}

/* `run`'s pid (MIMALLOC_PPROF_RUN_PID), 0 when not under run. */
int mp_run_pid(void) {
  const char* s = mp_getenv("MIMALLOC_PPROF_RUN_PID");
  pid_t run = 0;
  if (s == NULL) return 0;
  for (; *s >= '0' && *s <= '9'; s++) run = run * 10 + (*s - '0');
  return *s == 0 ? run : 0;
}

static bool main_only(void) {
  const char* on = mp_getenv("MIMALLOC_PPROF_MAIN_ONLY");
  return on != NULL && on[0] == '1';
}

/* Under `mimalloc-pprof run`, the program it started dies with it: a run that is itself killed
 * (SIGKILL, a crash) must not leave its program running orphaned. Only the process whose
 * parent is run (its children have their own parents). */
static void die_with_run(void) {
  pid_t run = mp_run_pid();
  if (mp_run_dir() == NULL || run <= 1 || run != getppid()) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != run) raise(SIGKILL); /* run died before the request took */
}

/* `run --main-only`: only the process run started (whose parent is run; an image it exec's
 * keeps both) profiles. Its descendants inherit the preload and stay inert: mimalloc, no
 * profile, no marker. (Taking the preload out of their environment is not reliable: a
 * `#!/usr/bin/env node` script's main process is env, which must pass it on to node, and bash
 * hands its children the environment it started with.) */
static bool not_the_main_process(void) {
  return main_only() && (mp_run_pid() <= 1 || getppid() != mp_run_pid());
}

/* A forked child under run: it profiles as its parent did and says so (loaded.<pid>), unless
 * run profiles only its main process, which this child is not. */
void mp_fork_child_under_run(void) {
  if (mp_run_dir() == NULL) return;
  if (not_the_main_process()) {
    atomic_store(&mp_state.running, false); /* no samples, no exit dump */
    mp_rules_forget();
    return;
  }
  mp_mark_loaded();
}

__attribute__((constructor)) static void mp_load(void) {
  mp_tls.in_profiler = true;
  mp_options_init();
  bool inert = not_the_main_process();
  if (inert) {
    mp_env.prof = false;
    mp_env.dump_at_exit[0] = 0;
  }
  mp_thread_set_ordinal(0);
  mp_note_process_start();
  mp_stack_learn_bounds();
  mp_thread_init();
  mp_interpose_init();
#ifndef MP_SANITIZE /* sanitizer test builds rename malloc on purpose (native/Makefile) */
  mp_interposing = mp_interpose_probe();
#endif
  int v = mi_version();
  if (MP_MI_MAJOR(v) != MP_MI_MAJOR(MI_MALLOC_VERSION))
    mp_write_stderr("warning: the mimalloc loaded is not the major version this library was built against");
  if (mp_env.memory_events) {
    atomic_store(&mp_events_on, true);
    mp_filter_update(false);
  }
  mp_fork_install();
  /* mimalloc initialises lazily on the first allocation and may leave errno set (its NUMA
   * probe); do it here, so that a program's first malloc leaves errno alone. */
  int saved = errno;
  mi_free(mi_malloc(1));
  errno = saved;
  atexit(save_rules_at_exit); /* first: it runs after the dump (atexit runs the last first) */
  atexit(dump_at_exit);
  mp_profiler_leave(&mp_tls, false);
  if (mp_env.prof) {
    params_t p;
    mp_params_from_env(&p);
    if (!mp_start_with(&p)) mp_write_stderr("MIMALLOC_PROF=1 but the profiler could not start");
  }
  if (mp_env.verbose) say_verbose();
  if (inert) return;
  if (atomic_load(&mp_state.running)) mp_every_start();
  mp_mark_loaded();
  die_with_run();
  mp_signals_install(mp_env.dump_at_exit[0] != 0);
}
