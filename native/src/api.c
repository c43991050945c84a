/* The public API (mi_prof_*), the library's start-up and exit, and fork handling.
 *
 * Lifecycle calls are serialised by one lock that the allocation paths never take.
 * Start: reserve the arena (once), set the parameters, bump the generation, mark running,
 * widen the free-side filter, re-arm the calling thread. Other threads re-arm on their next
 * slow path (at most MP_CHECK_PERIOD bytes later). Stop: mark stopped, narrow the filter,
 * drop every record and bucket.
 *
 * fork: the prepare handler takes the loader lock (internal.h; first, as a dump holds it while
 * waiting for the loader, which may wait for a table lock), the lifecycle lock and every table
 * lock, so the child inherits consistent tables and a loader lock no dump of the parent holds;
 * the child resets the locks and keeps profiling (its heap is a copy of the parent's), and
 * writes its own %p-named dump at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

mp_state_t mp_state;
mp_lock_t mp_loader_lock;
static mp_lock_t api_lock;

/* ---- stats ---------------------------------------------------------------------------------- */
void mp_stats_fill(mi_prof_stats_t* s) {
  memset(s, 0, sizeof(*s));
  s->size = sizeof(*s);
  s->version = MI_PROF_STATS_VERSION;
  s->running = atomic_load(&mp_state.running);
  s->sample_interval = mp_state.interval;
  mp_table_totals_t t;
  mp_table_totals(&t, (double)mp_state.interval);
  s->live_samples = t.live_samples;
  s->live_sampled_bytes = t.live_sampled_bytes;
  s->estimated_live_bytes = t.est_live_bytes;
  s->estimated_live_objects = t.est_live_objects;
  s->accum_samples = mp_state.accum ? t.accum_samples : 0;
  s->estimated_accum_bytes = mp_state.accum ? t.est_accum_bytes : 0;
  s->estimated_accum_objects = mp_state.accum ? t.est_accum_objects : 0;
  s->unique_stacks = t.buckets;
  s->dropped_samples = mp_dropped_samples();
  s->profiler_bytes = mp_os_bytes();
  s->memory_events = atomic_load(&mp_events_on);
  s->exact_live_bytes = atomic_load(&mp_exact.live_bytes);
  s->exact_live_objects = atomic_load(&mp_exact.live_objects);
  s->exact_accum_bytes = atomic_load(&mp_exact.accum_bytes);
  s->exact_accum_objects = atomic_load(&mp_exact.accum_objects);
  size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
  mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
  s->rss_bytes = rss;
  s->peak_rss_bytes = peak_rss;
  s->commit_bytes = commit;
  s->peak_commit_bytes = peak_commit;
  s->page_faults = faults;
}

bool mi_prof_stats_get(mi_prof_stats_t* stats) {
  if (stats == NULL || stats->size != sizeof(*stats) || stats->version != MI_PROF_STATS_VERSION) {
    errno = EINVAL;
    return false;
  }
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_stats_fill(stats);
  mp_tls.in_profiler = guard;
  return true;
}

/* ---- start / stop --------------------------------------------------------------------------- */
typedef struct params_s {
  size_t interval;
  bool seeded;
  uint64_t seed;
  bool accum;
  unsigned bt_max;
  size_t max_bytes;
  char dump_at_exit[MI_PROF_DUMP_PATH_MAX];
  mp_format_t dump_format;
} params_t;

static void params_from_env(params_t* p) {
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

static bool start_with(const params_t* p) {
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  bool ok = false;
  mp_lock(&api_lock);
  if (atomic_load(&mp_state.running)) {
    errno = EBUSY;
  } else if (!mp_arena_init(mp_env.arena_bytes)) {
    mp_write_stderr("cannot reserve the sample arena (MIMALLOC_PROF_ARENA_SIZE); profiler not started");
    errno = ENOMEM;
  } else {
    mp_stack_init();
    mp_state.interval = p->interval != 0 ? p->interval : MI_PROF_DEFAULT_INTERVAL;
    mp_state.seeded = p->seeded;
    mp_state.seed = p->seed;
    mp_state.accum = p->accum;
    mp_state.bt_max = p->bt_max == 0 ? MI_PROF_DEFAULT_BT_MAX : p->bt_max > MI_PROF_MAX_BT ? MI_PROF_MAX_BT : p->bt_max;
    strcpy(mp_state.dump_at_exit, p->dump_at_exit);
    mp_state.dump_format = p->dump_format;
    mp_os_set_budget(p->max_bytes);
    mp_reset_dropped();
    atomic_fetch_add(&mp_state.generation, 1);
    mp_filter_update(true);
    atomic_store_explicit(&mp_state.running, true, memory_order_release);
    mp_sampler_restart();
    ok = true;
  }
  mp_unlock(&api_lock);
  mp_tls.in_profiler = guard;
  return ok;
}

bool mi_prof_start(size_t interval) {
  params_t p;
  params_from_env(&p);
  if (interval != 0) p.interval = interval;
  return start_with(&p);
}

bool mi_prof_start_seeded(size_t interval, uint64_t seed) {
  params_t p;
  params_from_env(&p);
  if (interval != 0) p.interval = interval;
  p.seeded = true;
  p.seed = seed;
  return start_with(&p);
}

bool mi_prof_start_ex(const mi_prof_config_t* c) {
  if (c == NULL || c->size != sizeof(*c) || c->version != MI_PROF_CONFIG_VERSION ||
      (c->mode != MI_PROF_CONFIG_FALLBACK && c->mode != MI_PROF_CONFIG_OVERRIDE) ||
      c->max_stack_depth > MI_PROF_MAX_BT || memchr(c->dump_at_exit, 0, sizeof(c->dump_at_exit)) == NULL) {
    errno = EINVAL;
    return false;
  }
  params_t p;
  params_from_env(&p);
  bool over = c->mode == MI_PROF_CONFIG_OVERRIDE;
  /* A struct field applies when it is given and either the mode is OVERRIDE or the
   * environment does not set that variable. */
  if (c->sample_interval != 0 && (over || !mp_env.interval_set)) p.interval = c->sample_interval;
  if (c->max_profiler_bytes != 0 && (over || !mp_env.max_bytes_set)) p.max_bytes = c->max_profiler_bytes;
  if (c->has_seed && (over || !mp_env.seed_set)) {
    p.seeded = true;
    p.seed = c->seed;
  }
  if (c->accum && (over || !mp_env.accum_set)) p.accum = true;
  if (c->max_stack_depth != 0 && (over || !mp_env.bt_max_set)) p.bt_max = c->max_stack_depth;
  if (c->dump_at_exit[0] != 0 && (over || mp_env.dump_at_exit[0] == 0)) strcpy(p.dump_at_exit, c->dump_at_exit);
  if (over || !mp_env.dump_format_set) p.dump_format = c->dump_format == MI_PROF_DUMP_PROTO ? MP_FORMAT_PROTO : MP_FORMAT_TEXT;
  return start_with(&p);
}

void mi_prof_stop(void) {
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&api_lock);
  if (atomic_load(&mp_state.running)) {
    atomic_store(&mp_state.running, false);
    mp_filter_update(false);
    mp_table_clear();
  }
  mp_unlock(&api_lock);
  mp_tls.in_profiler = guard;
}

void mi_prof_reset(void) {
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&api_lock);
  mp_table_reset_accum();
  atomic_store(&mp_exact.accum_bytes, 0);
  atomic_store(&mp_exact.accum_objects, 0);
  mp_unlock(&api_lock);
  mp_tls.in_profiler = guard;
}

bool mi_prof_is_enabled(void) { return atomic_load(&mp_state.running); }

bool mi_prof_dump(const char* path) { return mp_dump(path, MP_FORMAT_TEXT); }
bool mi_prof_dump_proto(const char* path) { return mp_dump(path, MP_FORMAT_PROTO); }

void mi_prof_memory_events_enable(bool enable) {
  mp_lock(&api_lock);
  atomic_store(&mp_events_on, enable);
  mp_filter_update(atomic_load(&mp_state.running));
  mp_unlock(&api_lock);
}

bool mi_prof_memory_events_enabled(void) { return atomic_load(&mp_events_on); }

/* ---- fork ------------------------------------------------------------------------------------ */
static void fork_prepare(void) {
  mp_lock(&mp_loader_lock);
  mp_lock(&api_lock);
  mp_table_lock_all();
}

static void fork_parent(void) {
  mp_table_unlock_all();
  mp_unlock(&api_lock);
  mp_unlock(&mp_loader_lock);
}

static void fork_child(void) {
  mp_table_child_reinit();
  atomic_store(&api_lock.held, 0);
  atomic_store(&mp_loader_lock.held, 0);
}

/* ---- load and exit ----------------------------------------------------------------------------- */
static void dump_at_exit(void) {
  if (!atomic_load(&mp_state.running) || mp_state.dump_at_exit[0] == 0) return;
  if (!mp_dump(mp_state.dump_at_exit, mp_state.dump_format)) {
    char path[MI_PROF_DUMP_PATH_MAX];
    if (!mp_expand_path(mp_state.dump_at_exit, path, sizeof(path))) strcpy(path, mp_state.dump_at_exit);
    mp_warnf2("cannot write the profile at exit to ", path, "");
  }
}

static void say_verbose(void) {
  char line[512];
  size_t n = 0;
#define ADD(s) do { const char* s_ = (s); while (*s_ && n < sizeof(line) - 32) line[n++] = *s_++; } while (0)
#define ADDU(v) do { n += mp_fmt_u64(line + n, (uint64_t)(v)); } while (0)
  int v = mi_version(); /* 209 is 2.0.9; 20401 is 2.4.1 */
  bool wide = v >= 10000;
  ADD("mimalloc ");
  ADDU(wide ? v / 10000 : v / 100);
  ADD(".");
  ADDU(wide ? v / 100 % 100 : v / 10 % 10);
  ADD(".");
  ADDU(wide ? v % 100 : v % 10);
  ADD(" (built against ");
  ADDU(MI_MALLOC_VERSION);
  ADD(", ");
  ADD(mp_mimalloc_kind());
  ADD("); interposer active; profiler ");
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
  mp_write_stderr(line);
}

static const char* run_dir(void) {
  extern char** environ;
  static const char key[] = "MIMALLOC_PPROF_RUN_DIR=";
  const char* dir = NULL;
  for (char** e = environ; e != NULL && *e != NULL; e++)
    if (strncmp(*e, key, sizeof(key) - 1) == 0) dir = *e + sizeof(key) - 1;
  return dir != NULL && dir[0] != 0 ? dir : NULL;
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

static void install_terminate_handlers(void) {
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

/* Under `mimalloc-pprof run`, leave <dir>/loaded.<pid>: the proof that the preload took
 * effect in this process, which ld.so would otherwise skip silently. */
static void mark_loaded(void) {
  const char* dir = run_dir();
  if (dir == NULL) return;
  char path[MI_PROF_DUMP_PATH_MAX];
  size_t n = mp_strlen(dir);
  if (n + 40 >= sizeof(path)) return;
  memcpy(path, dir, n);
  memcpy(path + n, "/loaded.", 8);
  n += 8;
  n += mp_fmt_u64(path + n, (uint64_t)getpid());
  path[n] = 0;
  int saved = errno;
  int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd >= 0) close(fd);
  errno = saved;
}

__attribute__((constructor)) static void mp_load(void) {
  mp_tls.in_profiler = true;
  mp_options_init();
  mp_thread_set_ordinal(0);
  mp_thread_init();
  mp_interpose_init();
  int v = mi_version();
  if (MP_MI_MAJOR(v) != MP_MI_MAJOR(MI_MALLOC_VERSION))
    mp_write_stderr("warning: the mimalloc loaded is not the major version this library was built against");
  if (mp_env.memory_events) {
    atomic_store(&mp_events_on, true);
    mp_filter_update(false);
  }
#ifdef MP_TEST_HOOKS
  if (!mp_test_hook("MP_TEST_SKIP_FORK_HANDLERS")) /* the fork gate's control */
#endif
    pthread_atfork(fork_prepare, fork_parent, fork_child);
  /* mimalloc initialises lazily on the first allocation and may leave errno set (its NUMA
   * probe); do it here, so that a program's first malloc leaves errno alone. */
  int saved = errno;
  mi_free(mi_malloc(1));
  errno = saved;
  atexit(dump_at_exit);
  mp_tls.in_profiler = false;
  if (mp_env.prof) {
    params_t p;
    params_from_env(&p);
    if (!start_with(&p)) mp_write_stderr("MIMALLOC_PROF=1 but the profiler could not start");
  }
  if (mp_env.verbose) say_verbose();
  mark_loaded();
  if (run_dir() != NULL && atomic_load(&mp_state.running)) install_terminate_handlers();
}
