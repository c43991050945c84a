/* The memory-events API (include/mimalloc-pprof/memory-events.h) over the exact counters.
 *
 * Tracking is the exact-counter switch (mp_events_on, api.c): while it is on, every call takes
 * its slow path (sampler.c), which counts the change in mp_exact and then, outside its sampler
 * section, calls mp_events_report. The snapshot reads mp_exact.
 *
 * Rules:
 *  - a callback runs with mp_tls.in_callback set; the slow paths count a change made while it
 *    is set but do not report it, so a callback never nests and the totals stay exact (a
 *    block a callback allocates and the program frees later balances);
 *  - the callback table is read under a sequence count (readers write nothing shared, so
 *    threads do not contend); writers are serialised by table_lock and make the count odd
 *    while they write;
 *  - no lock of this library is held while user code (a callback, a visitor) runs;
 *  - cancellation is disabled (cancel.h) across every entry point that calls anything and
 *    across a callback: a callback runs inside the program's malloc or free, which POSIX does
 *    not make a cancellation point, so a cancel pending there waits for the program's next
 *    one. The snapshot and the "is enabled" reads call nothing and have no bracket. */
#define _GNU_SOURCE
#include <mimalloc.h>
#include <sched.h>

#include "cancel.h"
#include "internal.h"
#include "mimalloc-pprof/memory-events.h"

_Static_assert((int)MP_EVENT_ALLOCATE == (int)MI_MEMORY_ALLOCATE && (int)MP_EVENT_FREE == (int)MI_MEMORY_FREE &&
                   (int)MP_EVENT_RESIZE == (int)MI_MEMORY_RESIZE,
               "the slow paths' kinds are the header's");

static mp_lock_t table_lock = MP_LOCK_INIT(MP_LEVEL_CALLBACKS);
static atomic_uint table_seq; /* odd while a writer writes */
static _Atomic(mi_memory_change_fun*) handlers[MI_MEMORY_CHANGE_COUNT];
static _Atomic(void*) args[MI_MEMORY_CHANGE_COUNT];
static atomic_bool any_handler; /* the slow paths skip the table while nothing is installed */

bool mp_events_have_callbacks(void) { return atomic_load_explicit(&any_handler, memory_order_relaxed); }

static bool read_handler(unsigned kind, mi_memory_change_fun** fn, void** arg) {
  for (unsigned spins = 0;; spins++) {
    unsigned seq = atomic_load_explicit(&table_seq, memory_order_acquire);
    if ((seq & 1) == 0) {
      *fn = atomic_load_explicit(&handlers[kind], memory_order_relaxed);
      *arg = atomic_load_explicit(&args[kind], memory_order_relaxed);
      atomic_thread_fence(memory_order_acquire);
      if (atomic_load_explicit(&table_seq, memory_order_relaxed) == seq) return *fn != NULL;
    }
    if (spins > 64) sched_yield(); /* a writer was preempted while writing */
  }
}

void mp_events_report(unsigned kind, int64_t delta, int64_t total, size_t request) {
  mp_thread_t* t = &mp_tls;
  mp_assert(!t->in_profiler && kind < MI_MEMORY_CHANGE_COUNT);
  mi_memory_change_fun* fn;
  void* arg;
  if (!read_handler(kind, &fn, &arg)) return;
  mi_memory_change_t change = {
      .kind = (mi_memory_change_kind_t)kind,
      .total_bytes = total < 0 ? 0 : (uint64_t)total,
      .delta_bytes = delta,
      .request_size = kind == MI_MEMORY_FREE ? 0 : request,
  };
#ifdef MP_TEST_HOOKS
  bool suppress = !mp_test_hook("MP_TEST_EVENTS_NO_SUPPRESS"); /* the callback test's control */
#else
  bool suppress = true;
#endif
  int cancel = mp_cancel_off(); /* only with a handler installed: never on a fast path */
  t->in_callback = suppress;
  fn(&change, arg);
  t->in_callback = false;
  mp_cancel_restore(cancel);
}

bool mi_memory_set_callbacks(const mi_memory_callbacks_t* callbacks) {
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&table_lock);
  atomic_fetch_add_explicit(&table_seq, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  bool any = false;
  for (unsigned k = 0; k < MI_MEMORY_CHANGE_COUNT; k++) {
    mi_memory_change_fun* fn = callbacks != NULL ? callbacks->handlers[k] : NULL;
    atomic_store_explicit(&handlers[k], fn, memory_order_relaxed);
    atomic_store_explicit(&args[k], callbacks != NULL ? callbacks->args[k] : NULL, memory_order_relaxed);
    any |= fn != NULL;
  }
  atomic_store_explicit(&any_handler, any, memory_order_relaxed);
  atomic_fetch_add_explicit(&table_seq, 1, memory_order_release);
  mp_unlock(&table_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  return true;
}

/* fork: the table's writer lock is taken last (a leaf), so the child never inherits a
 * half-written table (an odd count would make every reader spin) or a held lock. */
void mp_events_fork_prepare(void) { mp_lock(&table_lock); }
void mp_events_fork_parent(void) { mp_unlock(&table_lock); }
void mp_events_fork_child(void) {
  mp_lock_reset(&table_lock);
  mp_assert((atomic_load(&table_seq) & 1) == 0);
}

bool mi_memory_tracking_set_enabled(bool enabled) {
  mi_prof_memory_events_enable(enabled);
  return true;
}

bool mi_memory_tracking_is_enabled(void) { return mi_prof_memory_events_enabled(); }
bool mi_memory_tracking_enabled(void) { return mi_prof_memory_events_enabled(); }

static uint64_t non_negative(long long v) { return v < 0 ? 0 : (uint64_t)v; }

bool mi_memory_snapshot(mi_memory_snapshot_t* out) {
  if (out == NULL || out->size < sizeof(mi_memory_snapshot_t) || out->version != MI_MEMORY_SNAPSHOT_VERSION) return false;
  out->live_bytes = non_negative(atomic_load_explicit(&mp_exact.live_bytes, memory_order_relaxed));
  out->live_count = non_negative(atomic_load_explicit(&mp_exact.live_objects, memory_order_relaxed));
  /* the profiler counts a reallocation as an allocation of its new size; the snapshot, as
   * the original does, counts only what a reallocation grew by */
  uint64_t accum = atomic_load_explicit(&mp_exact.accum_bytes, memory_order_relaxed);
  uint64_t over = atomic_load_explicit(&mp_exact.resize_over_bytes, memory_order_relaxed);
  out->accum_bytes = accum > over ? accum - over : 0;
  uint64_t count = atomic_load_explicit(&mp_exact.accum_objects, memory_order_relaxed);
  uint64_t resizes = atomic_load_explicit(&mp_exact.resizes, memory_order_relaxed);
  out->accum_count = count > resizes ? count - resizes : 0;
  return true;
}

/* ---- the visitor ---------------------------------------------------------------------------- */
/* mimalloc 3.2.6 replaced the thread's default heap (mi_heap_get_default) by thread-local
 * "theaps" that its public API does not let another caller walk; mi_heap_main there spans
 * every thread's pages while they change. From 3.2.6 on the visitor sees only the calling
 * thread's sampled blocks. (Versions: 209 for 2.0.9, 30403 for 3.4.3.) */
#if MI_MALLOC_VERSION >= 30206 || (MI_MALLOC_VERSION >= 3206 && MI_MALLOC_VERSION < 10000)
#define MP_MI_HAS_DEFAULT_HEAP 0
#else
#define MP_MI_HAS_DEFAULT_HEAP 1
#endif

typedef struct visit_s {
  mi_memory_allocation_visit_fun* fn;
  void* arg;
  bool stopped;
} visit_t;

static bool visit_block(const mi_heap_t* heap, const mi_heap_area_t* area, void* block, size_t block_size, void* arg) {
  (void)heap;
  (void)area;
  visit_t* v = arg;
  if (block == NULL) return true; /* the area itself */
  block_size = mp_visited_bytes(block, block_size); /* a sampled block counts as unsampled */
  if (!v->fn(block, block_size, v->arg)) {
    v->stopped = true;
    return false;
  }
  return true;
}

bool mi_memory_visit_live_allocations(mi_memory_allocation_visit_fun* visitor, void* arg) {
  mp_thread_t* t = &mp_tls;
  if (visitor == NULL || t->in_callback || t->in_profiler) return false;
  visit_t v = {visitor, arg, false};
  int cancel = mp_cancel_off(); /* the visitor runs inside mimalloc's walk, with in_callback set */
  t->in_callback = true; /* what a visitor allocates anyway is not reported to callbacks */
#if MP_MI_HAS_DEFAULT_HEAP
  (void)mi_heap_visit_blocks(mi_heap_get_default(), true, visit_block, &v);
#endif
  t->in_callback = false;
  mp_cancel_restore(cancel);
  return true;
}
