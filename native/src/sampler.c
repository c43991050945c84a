/* The sampling decision and the allocation slow paths.
 *
 * Sampling is a Poisson process over requested bytes, per thread: the distance to the next
 * sample is exponential with mean R, so an allocation of s bytes is sampled with
 * probability p = 1 - exp(-s/R) whatever came before it, and each sample stands for 1/p
 * allocations (Horvitz-Thompson; table.c applies the weights). realloc is exposed like a
 * fresh allocation of its new size: growth counts, in place or not.
 *
 * The fast path (interpose.c) keeps `countdown` = floor(distance to the next sample) and
 * subtracts each request; it borrows exactly when s > distance, i.e. when the allocation
 * is sampled, or when the countdown was pinned to 0: exact counters on (every call comes
 * here and the real distance lives in `left`), or a new epoch (a start, or exact counters
 * switched) that another thread announced with mp_threads_resync. A distance drawn under
 * an older epoch is drawn again: by memorylessness the distance from any point on is
 * exponential with mean R, so a re-draw keeps the process unbiased (and it must, since the
 * old one may have been drawn with another R).
 *
 * R <= 1 means "record everything": the draw is 0, every request of s >= 1 bytes is
 * sampled with p = 1, and its weight is 1 (as pprof reads heap_v2/1).
 *
 * Streams: unseeded, each thread seeds from the clock and its own address; seeded, from
 * (seed, creation ordinal), so a single-threaded run repeats exactly. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <mimalloc.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

__thread mp_thread_t mp_tls __attribute__((tls_model("initial-exec")));
/* Pinned-to-zero state for exact counting, kept apart from the fast-path field. */
static __thread bool tls_forced __attribute__((tls_model("initial-exec")));
static __thread uint64_t tls_left __attribute__((tls_model("initial-exec")));

uintptr_t mp_filter_lo;
uintptr_t mp_filter_hi;
mp_exact_t mp_exact;
atomic_bool mp_events_on;
static atomic_ullong dropped;
static atomic_uint next_ordinal = 1; /* 0 is the main thread */

uint64_t mp_dropped_samples(void) { return atomic_load_explicit(&dropped, memory_order_relaxed); }
void mp_count_dropped(void) { atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed); }
void mp_reset_dropped(void) { atomic_store(&dropped, 0); }

/* ---- random stream ------------------------------------------------------------------ */
static uint64_t splitmix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* floor of an exponential draw with mean R, capped so that subtraction cannot wrap. */
static uint64_t draw(mp_thread_t* t) {
  if (mp_state.interval <= 1) return 0;
  double u = (double)(splitmix64(&t->rng) >> 11) * 0x1.0p-53; /* [0, 1) */
  double x = -log1p(-u) * (double)mp_state.interval;
  if (!(x < 0x1.0p62)) return MP_COUNTDOWN_MAX;
  return (uint64_t)x;
}

uint32_t mp_next_ordinal(void) { return atomic_fetch_add(&next_ordinal, 1); }

void mp_thread_set_ordinal(uint32_t ordinal) {
  mp_tls.ordinal = ordinal;
  mp_tls.has_ordinal = true;
}

static void rearm(mp_thread_t* t, uint32_t generation) {
  t->generation = generation;
  if (!t->has_ordinal) {
    bool main_thread = syscall(SYS_gettid) == getpid();
    mp_thread_set_ordinal(main_thread ? 0 : mp_next_ordinal());
  }
  if (mp_state.seeded) {
    t->rng = mp_state.seed ^ ((uint64_t)t->ordinal * 0xD1B54A32D192ED03ull);
  } else {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->rng = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)t ^ ((uint64_t)ts.tv_sec << 32);
  }
  (void)splitmix64(&t->rng);
}

/* Stores this thread's countdown, drawn under `epoch`. A resync that bumped the epoch
 * meanwhile may have stored its 0 before this store: seen after a full fence (the resync's
 * epoch bump is one too), the 0 is put back. */
static void set_countdown(mp_thread_t* t, uint64_t value, uint32_t epoch) {
  t->epoch = epoch;
  t->countdown = value;
  atomic_thread_fence(memory_order_seq_cst);
  if (mp_unlikely(atomic_load_explicit(&mp_state.epoch, memory_order_relaxed) != epoch)) t->countdown = 0;
}

/* `left` is the distance to the next sample before this allocation. Returns whether the
 * allocation is sampled and stores the distance after it. */
static bool decide(mp_thread_t* t, uint64_t left, size_t size) {
  mp_assert(t->in_profiler);
  bool sampled = false;
  if (mp_unlikely(!t->registered)) mp_thread_register();
  uint32_t epoch = atomic_load_explicit(&mp_state.epoch, memory_order_acquire);
  if (!atomic_load_explicit(&mp_state.running, memory_order_acquire) || t->excluded) {
    left = MP_CHECK_PERIOD;
  } else {
    uint32_t generation = atomic_load_explicit(&mp_state.generation, memory_order_relaxed);
    if (t->generation != generation) {
      rearm(t, generation);
      left = draw(t);
    } else if (t->epoch != epoch) {
      left = draw(t);
    }
    if (size > left) {
      sampled = true; /* an exiting thread's sample is dropped by the arena */
      left = draw(t);
    } else {
      left -= size;
    }
  }
  bool forced = atomic_load_explicit(&mp_events_on, memory_order_relaxed);
  tls_forced = forced;
  tls_left = left;
  set_countdown(t, forced ? 0 : left, epoch);
  return sampled;
}

void mp_sampler_resync_all(void) {
  mp_assert(mp_tls.in_profiler);
  uint32_t epoch = atomic_fetch_add(&mp_state.epoch, 1) + 1;
  mp_threads_resync(epoch);
  mp_tls.countdown = 0; /* this thread too, registered or not */
}

/* ---- free-side filter ----------------------------------------------------------------- */
/* Stores are ordered so that every intermediate state covers at least the arena while
 * profiling: a sampled block may be freed on the fast path only when nothing is recorded. */
void mp_filter_update(bool profiling) {
  uintptr_t lo = 0, size = 0;
  if (atomic_load(&mp_events_on)) {
    size = UINTPTR_MAX;
  } else if (profiling) {
    mp_arena_range(&lo, &size);
  }
  __atomic_store_n(&mp_filter_hi, UINTPTR_MAX, __ATOMIC_SEQ_CST);
  __atomic_store_n(&mp_filter_lo, lo, __ATOMIC_SEQ_CST);
  __atomic_store_n(&mp_filter_hi, lo + size, __ATOMIC_SEQ_CST);
  mp_entry_update(size != 0);
}

/* ---- exact counters ------------------------------------------------------------------- */
/* A change the slow paths counted, for the memory-events callbacks (events.c). */
typedef struct change_s {
  bool counted;
  int64_t delta, total; /* usable bytes: this change, and the live total after it */
} change_t;

static change_t count_alloc(void* p) {
  if (p == NULL) return (change_t){0};
  long long usable = (long long)mi_usable_size(p);
  long long before = atomic_fetch_add_explicit(&mp_exact.live_bytes, usable, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.live_objects, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.accum_bytes, (unsigned long long)usable, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.accum_objects, 1, memory_order_relaxed);
  return (change_t){true, usable, before + usable};
}

static change_t count_free(void* p) {
  long long usable = (long long)mi_usable_size(p);
  long long before = atomic_fetch_sub_explicit(&mp_exact.live_bytes, usable, memory_order_relaxed);
  atomic_fetch_sub_explicit(&mp_exact.live_objects, 1, memory_order_relaxed);
  return (change_t){true, -usable, before - usable};
}

/* After the sampler section: the callback of a counted change, if one is installed and this
 * thread is not inside a callback already (its changes are counted, never reported: no
 * callback nests, and the totals stay exact). */
static inline void report(unsigned kind, change_t c, size_t request) {
  if (c.counted && !mp_tls.in_callback && mp_events_have_callbacks()) mp_events_report(kind, c.delta, c.total, request);
}

/* ---- allocation ------------------------------------------------------------------------ */
static void* plain_alloc(size_t size, size_t align, bool zero) {
  if (align != 0) return zero ? mi_zalloc_aligned(size, align) : mi_malloc_aligned_at(size, align, 0);
  return zero ? mi_zalloc(size) : mi_malloc(size);
}

static bool in_arena(const void* p) {
  uintptr_t lo, size;
  mp_arena_range(&lo, &size);
  return (uintptr_t)p - lo < size;
}

/* The calling thread's name (NUL-padded), for a bucket being made. Threads rename
 * themselves (libuv and V8 do, as they start), so the name is read again when the cached one
 * is older than NAME_TTL_NS; the kernel's answer costs a system call, which a sample of a
 * block that is freed at once (its bucket made anew every time) would otherwise pay. */
#define NAME_TTL_NS 100000000ull /* 100 ms */
static __thread char tls_name[16] __attribute__((tls_model("initial-exec")));
static __thread uint64_t tls_name_at __attribute__((tls_model("initial-exec")));

static void thread_name(char out[16]) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec + 1; /* never 0 */
  if (tls_name_at == 0 || now - tls_name_at > NAME_TTL_NS) {
    memset(tls_name, 0, sizeof(tls_name));
    if (prctl(PR_GET_NAME, tls_name, 0, 0, 0) != 0) memcpy(tls_name, "?", 2);
    tls_name_at = now;
  }
  memcpy(out, tls_name, sizeof(tls_name));
}

/* The kernel's id of the calling thread, asked once per thread (a fork child asks again). */
static int32_t thread_id(mp_thread_t* t) {
  if (mp_unlikely(t->tid == 0)) t->tid = (int32_t)syscall(SYS_gettid);
  return t->tid;
}

/* Allocates a sampled block in the arena and records it; a sample that cannot be kept
 * (arena full or alignment too large, budget hit, thread exiting) is counted as dropped
 * and the allocation is served normally. */
static void* sampled_alloc(mp_thread_t* t, size_t size, size_t align, bool zero, const caller_t* c) {
  uintptr_t frames[MI_PROF_MAX_BT];
  /* Work that a pool thread runs, and a completion of such work on its loop's thread, carry
   * the stack that queued the work (pool.c); a completion's own stack ends at its trampoline. */
  bool queued = t->queued_by != NULL || t->pool_origin != NULL;
  uintptr_t cut = t->queued_by == NULL && t->pool_origin != NULL ? t->pool_origin_sp : 0;
  unsigned depth = mp_stack_capture(frames, mp_state.bt_max, c->ra, c->sp, c->fp, cut);
  if (mp_unlikely(queued)) depth = mp_pool_append(frames, depth, MI_PROF_MAX_BT);
  void* p = mp_arena_alloc(size, align, zero);
  if (p == NULL) {
    p = plain_alloc(size, align, zero);
    if (p != NULL) mp_count_dropped();
  } else if (!mp_table_add((uintptr_t)p, size, frames, depth, thread_id(t), thread_name)) {
    mp_count_dropped();
  }
  return p;
}

/* A sampler section: in_sample is set before in_profiler and cleared after it, so that a
 * signal never finds in_profiler without in_sample here (it would end the process without a
 * profile, signals.c); with in_sample alone it finds no lock held and dumps at once. */
static inline bool enter_sample(mp_thread_t* t) {
  bool was = t->in_sample; /* a handler's malloc may nest in the instant before in_profiler */
  t->in_sample = true;
  atomic_signal_fence(memory_order_seq_cst);
  t->in_profiler = true;
  return was;
}

static inline void leave_sample(mp_thread_t* t, bool was) {
  mp_profiler_leave(t, false);
  atomic_signal_fence(memory_order_seq_cst);
  t->in_sample = was;
}

unsigned mp_sample_capture(uintptr_t* frames, unsigned max, const caller_t* c, uintptr_t stop_sp) {
  mp_thread_t* t = &mp_tls;
  mp_assert(!t->in_profiler);
  bool was = enter_sample(t);
  unsigned n = mp_stack_capture(frames, max, c->ra, c->sp, c->fp, stop_sp);
  leave_sample(t, was);
  return n;
}

/* `undo` is what the fast path subtracted from the countdown for this request. */
static void* alloc_common(mp_thread_t* t, uint64_t left, uint64_t undo, size_t size, size_t align, unsigned flags,
                          const caller_t* c) {
  bool zero = (flags & MP_ZERO) != 0;
  void* p;
  if (t->in_profiler) {
    /* The profiler's own allocation (unwinder, pthread): never sampled, and the thread's
     * distance to its next sample must survive it, so the subtraction is undone. */
    t->countdown += undo;
    p = plain_alloc(size, align, zero);
  } else {
    bool was = enter_sample(t);
    if (decide(t, left, size)) p = sampled_alloc(t, size, align, zero, c);
    else p = plain_alloc(size, align, zero);
    change_t change = tls_forced ? count_alloc(p) : (change_t){0};
    leave_sample(t, was);
    report(MP_EVENT_ALLOCATE, change, size);
  }
  if (mp_unlikely(p == NULL) && (flags & MP_NEW)) p = mp_new_fail(size, align, (flags & MP_NOTHROW) != 0);
  return p;
}

/* The distance before this allocation: the fast path already subtracted `size`. */
static uint64_t left_before(mp_thread_t* t, size_t size) { return tls_forced ? tls_left : t->countdown + size; }

mp_noinline void* mp_alloc_slow(size_t size, size_t align, unsigned flags, void* ra) {
  mp_thread_t* t = &mp_tls;
  caller_t c = CALLER_OF(__builtin_frame_address(0), ra);
  return alloc_common(t, left_before(t, size), size, size, align, flags, &c);
}

mp_noinline int mp_posix_memalign_slow(void** out, size_t align, size_t size, void* ra) {
  mp_thread_t* t = &mp_tls;
  caller_t c = CALLER_OF(__builtin_frame_address(0), ra);
  int saved = errno;
  void* p = alloc_common(t, left_before(t, size), size, size, align, 0, &c);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

mp_noinline void mp_free_slow(void* p) {
  mp_thread_t* t = &mp_tls;
  if (p == NULL) return;
  bool guard = t->in_profiler;
  if (guard) {
    if (in_arena(p)) mp_table_remove((uintptr_t)p); /* the profiler's own free: not counted */
    mi_free(p);
    return;
  }
  bool was = enter_sample(t);
  bool events = tls_forced || atomic_load_explicit(&mp_events_on, memory_order_relaxed);
  change_t change = events ? count_free(p) : (change_t){0};
  if (in_arena(p)) mp_table_remove((uintptr_t)p);
  leave_sample(t, was);
  mi_free(p);
  report(MP_EVENT_FREE, change, 0);
}

mp_noinline void* mp_realloc_slow(void* p, size_t size, void* ra) {
  mp_thread_t* t = &mp_tls;
  caller_t c = CALLER_OF(__builtin_frame_address(0), ra);
  uint64_t left = tls_forced ? tls_left : t->countdown; /* realloc's fast path subtracts nothing */
  if (p == NULL) return alloc_common(t, left, 0, size, 0, 0, &c);
  if (size == 0) { /* glibc: realloc(p, 0) frees p and returns NULL */
    mp_free_slow(p);
    return NULL;
  }
  if (t->in_profiler) return mi_realloc(p, size);
  bool was = enter_sample(t);
  bool events = tls_forced || atomic_load_explicit(&mp_events_on, memory_order_relaxed);
  size_t old_usable = events ? mi_usable_size(p) : 0;
  bool sampled = decide(t, left, size);
  bool was_in_arena = in_arena(p);
  void* q;
  if (sampled) {
    q = sampled_alloc(t, size, 0, false, &c);
    if (q != NULL) {
      size_t keep = mi_usable_size(p);
      memcpy(q, p, keep < size ? keep : size);
      if (was_in_arena) mp_table_remove((uintptr_t)p);
      mi_free(p);
    }
  } else {
    /* Forget the record first: an in-place result would otherwise keep a stale one. */
    if (was_in_arena) mp_table_remove((uintptr_t)p);
    q = mi_realloc(p, size);
  }
  change_t change = {0};
  if (events && q != NULL) {
    long long now = (long long)mi_usable_size(q), old = (long long)old_usable;
    long long before = atomic_fetch_add_explicit(&mp_exact.live_bytes, now - old, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.accum_bytes, (unsigned long long)now, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.accum_objects, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.resize_over_bytes, (unsigned long long)(now < old ? now : old), memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.resizes, 1, memory_order_relaxed);
    change = (change_t){true, now - old, before + now - old};
  }
  leave_sample(t, was);
  report(MP_EVENT_RESIZE, change, size);
  if (q == NULL) errno = ENOMEM;
  return q;
}

size_t mp_usable_size(const void* p) { return p == NULL ? 0 : mi_usable_size(p); }

