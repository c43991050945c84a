/* The public API (mi_prof_*): start, stop, reset, dumps, stats, exact counters.
 *
 * Lifecycle calls are serialised by one lock that the allocation paths never take, and run
 * with the reentrancy guard set (debug.h).
 * Start: set the parameters, bump the generation, widen the free-side filter, mark running,
 * then a new epoch: every thread, whatever its countdown from
 * an earlier session, draws again at its next allocation (sampler.c, thread.c).
 * Stop: mark stopped, narrow the filter, drop every record and bucket.
 * A library that does not interpose malloc (loaded with dlopen, not preloaded or linked)
 * sees no allocation: start fails with ENOTSUP and says so once, rather than "succeed" and
 * record nothing.
 * Cancellation: every entry point here that calls anything runs with cancellation disabled
 * (cancel.h), so a pthread_cancel never unwinds a thread out of the middle of one, with the
 * lifecycle lock or the registry's held. The ones that only read an atomic or this thread's
 * TLS (mi_prof_is_enabled, mi_prof_thread_exclude, mi_prof_memory_events_enabled) call nothing
 * and have no bracket. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <mimalloc.h>
#include <stdlib.h>
#include <string.h>

#include "cancel.h"
#include "internal.h"

mp_state_t mp_state;
mp_lock_t mp_loader_lock = MP_LOCK_INIT(MP_LEVEL_LOADER);
mp_lock_t mp_api_lock = MP_LOCK_INIT(MP_LEVEL_API);
bool mp_interposing = true;

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
  s->estimated_live_bytes_variance = t.est_live_bytes_var;
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
  /* mimalloc 2.0.9 subtracts a freed arena segment's commit twice (fixed in 2.1.2), so its
   * counter can wrap below 0: read as 0. */
  s->commit_bytes = commit > (size_t)INT64_MAX ? 0 : commit;
  s->peak_commit_bytes = peak_commit;
  s->page_faults = faults;
}

/* A caller built against version 1 passes the struct without the version-2 field. */
#define STATS_V1_SIZE offsetof(mi_prof_stats_t, estimated_live_bytes_variance)

_Static_assert(MI_PROF_STATS_VERSION == 2, "mp_struct_version knows versions 1 and 2");
bool mi_prof_stats_get(mi_prof_stats_t* stats) {
  unsigned version = mp_struct_version(stats, sizeof(*stats), STATS_V1_SIZE);
  if (version == 0) return false;
  bool v1 = version == 1;
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
#ifdef MP_TEST_HOOKS
  if (!mp_test_hook("MP_TEST_UNGUARDED_STATS")) /* the debug build's control: locks taken unguarded */
#endif
    mp_tls.in_profiler = true;
  mi_prof_stats_t full;
  mp_stats_fill(&full);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  if (v1) {
    full.size = (uint32_t)STATS_V1_SIZE;
    full.version = 1;
  }
  memcpy(stats, &full, v1 ? STATS_V1_SIZE : sizeof(full));
  return true;
}

/* ---- start / stop --------------------------------------------------------------------------- */
bool mp_start_with(const params_t* p) {
  int cancel = mp_cancel_off(); /* resync pauses under the lifecycle and registry locks */
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  bool ok = false;
  mp_lock(&mp_api_lock);
  if (atomic_load(&mp_state.running)) {
    errno = EBUSY;
  } else if (!mp_interposing) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true))
      mp_write_stderr("malloc is not interposed (the library was loaded with dlopen?): profiling needs LD_PRELOAD; not started");
    errno = ENOTSUP;
  } else {
    mp_stack_init();
    mp_table_init();
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
    mp_sampler_resync_all();
    ok = true;
  }
  mp_unlock(&mp_api_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  return ok;
}

/* mi_prof_start* and the dumps are cancellation points at their entry, before they take
 * anything, and mi_prof_stop at its return, once stopped (as the dumps' file I/O and the
 * start's pauses made them anyway): a thread that only starts and stops the profiler can
 * still be cancelled, always with the profiler stopped, and never inside a call, where a lock
 * may be held (cancel.h). */
bool mi_prof_start(size_t interval) {
  pthread_testcancel();
  params_t p;
  mp_params_from_env(&p);
  if (interval != 0) p.interval = interval;
  return mp_start_with(&p);
}

bool mi_prof_start_seeded(size_t interval, uint64_t seed) {
  pthread_testcancel();
  params_t p;
  mp_params_from_env(&p);
  if (interval != 0) p.interval = interval;
  p.seeded = true;
  p.seed = seed;
  return mp_start_with(&p);
}

bool mi_prof_start_ex(const mi_prof_config_t* c) {
  pthread_testcancel();
  if (c == NULL || c->size != sizeof(*c) || c->version != MI_PROF_CONFIG_VERSION ||
      (c->mode != MI_PROF_CONFIG_FALLBACK && c->mode != MI_PROF_CONFIG_OVERRIDE) ||
      c->max_stack_depth > MI_PROF_MAX_BT || memchr(c->dump_at_exit, 0, sizeof(c->dump_at_exit)) == NULL) {
    errno = EINVAL;
    return false;
  }
  params_t p;
  mp_params_from_env(&p);
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
  return mp_start_with(&p);
}

void mi_prof_stop(void) {
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&mp_api_lock);
  if (atomic_load(&mp_state.running)) {
    mp_table_check();
    atomic_store(&mp_state.running, false);
    /* The records go before the filter narrows: until then every free of a recorded block
     * takes its record first, under the shard lock that the clear holds while it reads the
     * block, and no record outlives its block. Blocks whose records go count their whole
     * usable size from here on (sampler.c). */
    bool events = atomic_load(&mp_events_on);
    bool narrow_first = false, drop_whole = false; /* the controls of the stop's two rules */
#ifdef MP_TEST_HOOKS
    narrow_first = mp_test_hook("MP_TEST_STOP_NARROWS_FIRST");
    drop_whole = mp_test_hook("MP_TEST_STOP_DROPS_WHOLE");
#endif
    if (narrow_first) mp_filter_update(false);
    int64_t whole = mp_table_clear(events || narrow_first);
    if (events && !drop_whole) atomic_fetch_add(&mp_exact.live_bytes, whole);
    mp_filter_update(false);
  }
  mp_unlock(&mp_api_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  pthread_testcancel(); /* once stopped */
}

void mi_prof_reset(void) {
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&mp_api_lock);
  mp_table_reset_accum();
  atomic_store(&mp_exact.accum_bytes, 0);
  atomic_store(&mp_exact.accum_objects, 0);
  atomic_store(&mp_exact.resize_over_bytes, 0);
  atomic_store(&mp_exact.resizes, 0);
  mp_unlock(&mp_api_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
}

bool mi_prof_is_enabled(void) { return atomic_load(&mp_state.running); }

bool mi_prof_thread_exclude(bool exclude) {
  bool was = mp_tls.excluded;
  mp_tls.excluded = exclude;
  return was;
}

/* mp_dump brackets itself (dump.c): it also runs at exit and from the periodic thread. */
static bool dump_from_api(const char* path, int format, bool peak) {
  pthread_testcancel();
  return mp_dump(path, format, peak);
}
bool mi_prof_dump(const char* path) { return dump_from_api(path, MP_FORMAT_TEXT, false); }
bool mi_prof_dump_proto(const char* path) { return dump_from_api(path, MP_FORMAT_PROTO, false); }
bool mi_prof_dump_peak(const char* path) { return dump_from_api(path, MP_FORMAT_TEXT, true); }
bool mi_prof_dump_peak_proto(const char* path) { return dump_from_api(path, MP_FORMAT_PROTO, true); }

bool mi_prof_peak(double* bytes, uint64_t* unix_ns, uint64_t* snapshots) {
  int cancel = mp_cancel_off();
  mp_peak_t p;
  mp_table_peak(&p);
  mp_cancel_restore(cancel);
  if (bytes != NULL) *bytes = p.bytes;
  if (unix_ns != NULL) *unix_ns = p.ns;
  if (snapshots != NULL) *snapshots = p.snapshots;
  return p.ns != 0;
}

/* Every thread counts from its next allocation on: the new epoch sends it to the slow path,
 * where it sees the switch. Frees are counted at once, so a block allocated before the
 * switch and freed after it lowers the live figures: they are exact from the switch on. */
void mi_prof_memory_events_enable(bool enable) {
  int cancel = mp_cancel_off(); /* resync pauses under the lifecycle and registry locks */
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&mp_api_lock);
  if (atomic_load(&mp_events_on) != enable) {
    atomic_store(&mp_events_on, enable);
    mp_filter_update(atomic_load(&mp_state.running));
    mp_sampler_resync_all();
  }
  mp_unlock(&mp_api_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
}

bool mi_prof_memory_events_enabled(void) { return atomic_load(&mp_events_on); }
