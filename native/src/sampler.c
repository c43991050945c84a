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
#include <mimalloc.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fastmath.h"
#include "internal.h"
#include "signals.h"

__thread mp_thread_t mp_tls __attribute__((tls_model("initial-exec")));
/* Pinned-to-zero state for exact counting, kept apart from the fast-path field. */
static __thread bool tls_forced __attribute__((tls_model("initial-exec")));
static __thread uint64_t tls_left __attribute__((tls_model("initial-exec")));

uintptr_t mp_filter_mask = UINTPTR_MAX;
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
  double x = -mp_ln(1.0 - u) * (double)mp_state.interval; /* 1 - u >= 2^-53: exact, and normal */
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
    if (mp_unlikely(left > MP_COUNTDOWN_MAX)) left = draw(t); /* left wrapped by a jump (signals.h): drawn anew */
    if (t->generation != generation) {
      rearm(t, generation);
      left = draw(t);
    } else if (t->epoch != epoch) {
      left = draw(t);
    }
    if (size > left) {
      sampled = true; /* an exiting thread's sample is dropped (sampled_alloc) */
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
/* One store: the filter passes every place a sampled block can sit before running is set
 * (api.c stores running after this), and a sampled block may be freed on the fast path only
 * when nothing is recorded (a stop clears the table). Under the lifecycle lock. */
void mp_filter_update(bool profiling) {
  bool events = atomic_load(&mp_events_on);
  if (profiling) mp_sampler_measure();
  uintptr_t mask = events ? 0 : profiling ? mp_sample_mask : UINTPTR_MAX;
  __atomic_store_n(&mp_filter_mask, mask, __ATOMIC_SEQ_CST);
  mp_entry_update(events || profiling);
}

/* ---- exact counters ------------------------------------------------------------------- */
/* A change the slow paths counted, for the memory-events callbacks (events.c). */
typedef struct change_s {
  bool counted;
  int64_t delta, total; /* usable bytes: this change, and the live total after it */
} change_t;

/* The usable bytes a block counts for: mimalloc's usable size, except that a recorded sample
 * rounded up to a larger size class (sample_alloc) counts what the same request unsampled has:
 * neither the exact counters nor malloc_usable_size may see profiling change a block. A block
 * whose record goes while it lives (a stop, a failed realloc) counts its whole usable size from
 * then on, and the difference (mp_unrecorded_extra) goes to the exact counters at that moment. */
size_t mp_block_bytes(const void* p, mp_recorded_t r) {
  /* mimalloc's usable size of r.size (small, medium); never above the rounded block's, and
   * not read from the block: mimalloc 3.0.1 changes the usable size of some live blocks. */
  if (r.rounded) return mi_good_size(r.size);
  return mi_usable_size(p);
}

size_t mp_unrecorded_extra(const void* p, mp_recorded_t r) {
  return r.size == 0 ? 0 : mp_block_bytes(p, (mp_recorded_t){0, false}) - mp_block_bytes(p, r);
}

static change_t count_alloc(void* p, mp_recorded_t r) {
  if (p == NULL) return (change_t){0};
  long long usable = (long long)mp_block_bytes(p, r);
  long long before = atomic_fetch_add_explicit(&mp_exact.live_bytes, usable, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.live_objects, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.accum_bytes, (unsigned long long)usable, memory_order_relaxed);
  atomic_fetch_add_explicit(&mp_exact.accum_objects, 1, memory_order_relaxed);
  if (mp_unlikely(atomic_load_explicit(&mp_window_open, memory_order_relaxed))) mp_window_note_alloc(p, (size_t)usable);
  return (change_t){true, usable, before + usable};
}

static change_t count_free(void* p, mp_recorded_t r) {
  long long usable = (long long)mp_block_bytes(p, r);
  long long before = atomic_fetch_sub_explicit(&mp_exact.live_bytes, usable, memory_order_relaxed);
  atomic_fetch_sub_explicit(&mp_exact.live_objects, 1, memory_order_relaxed);
  if (mp_unlikely(atomic_load_explicit(&mp_window_open, memory_order_relaxed))) (void)mp_window_note_free(p); /* before mi_free */
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
  if (align != 0) return zero ? mi_zalloc_aligned_at(size, align, 0) : mi_malloc_aligned_at(size, align, 0);
  return zero ? mi_zalloc(size) : mi_malloc(size);
}

/* Where sampled blocks sit (internal.h): mimalloc's pages start `offset` bytes past a 4 KiB
 * boundary (0 on 2.x; 3.x keeps its page header first: 128 bytes on 3.0.1), so every block of a
 * size class that is a multiple of the grain (2 KiB), and every large block, sits at that
 * offset past a grain boundary. The filter's mask keeps the low 11 bits except the offset's,
 * and passes blocks at the offset and at the boundary itself. Measured once, before the first
 * start. The grain trades the free filter's first test (it passes 1 in 2048 / size of the small
 * blocks; callgrind's tiny-hot pairs: +0.8 instructions a pair at 1 KiB) against the rounding
 * (at most a grain per live sample: at 4 KiB it held 86-128 KiB of the Node benchmark's heap at
 * its peak, at 2 KiB 31-37 KiB).
 * A class below 4 KiB sits there only if its pages start on the grain (mimalloc 2.0's pages of
 * 1 KiB blocks start 3456 bytes into a 4 KiB page), so a block is rounded to at least
 * `rounded_min`, the smallest multiple of the grain from which on every class up to 4 KiB was
 * seen to sit there (its blocks over two pages); 4 KiB classes and up always do. */
uintptr_t mp_sample_mask = MP_SAMPLE_GRAIN - 1;
static size_t rounded_align = MP_SAMPLE_GRAIN; /* the alignment every rounded block has */
static size_t rounded_min = 4096;

/* Whether blocks of `size` sit at the sample place: those of two pages (64 KiB each), checked
 * before the first start. */
static bool class_sits(size_t size, uintptr_t mask) {
  enum { MAX_PROBES = 2 * 64 };
  void* blocks[MAX_PROBES];
  size_t n = 2 * ((size_t)64 << 10) / size + 1;
  if (n > MAX_PROBES) n = MAX_PROBES;
  bool sits = true;
  size_t made = 0;
  for (; made < n; made++) {
    blocks[made] = mi_malloc(size);
    if (blocks[made] == NULL) break;
    sits = sits && ((uintptr_t)blocks[made] & mask) == 0;
  }
  while (made > 0) mi_free(blocks[--made]);
  return sits;
}

void mp_sampler_measure(void) {
  static bool measured;
  if (measured) return;
  void* probe = mi_malloc((size_t)64 << 10); /* a block in a page of its own on both majors */
  uintptr_t offset = (uintptr_t)probe & (MP_SAMPLE_GRAIN - 1);
  mi_free(probe);
  rounded_align = offset == 0 ? MP_SAMPLE_GRAIN : offset & -offset;
  /* Relaxed: it only ever narrows, before the first record (a free with memory events on
   * may read it meanwhile, and then finds no record either way). */
  uintptr_t mask = (MP_SAMPLE_GRAIN - 1) & ~offset;
  for (size_t size = 4096 - MP_SAMPLE_GRAIN; size >= MP_SAMPLE_GRAIN && class_sits(size, mask); size -= MP_SAMPLE_GRAIN)
    rounded_min = size;
  __atomic_store_n(&mp_sample_mask, mask, __ATOMIC_RELAXED);
  measured = true;
}

/* Whether p sits where a sampled block can. */
static inline bool at_sample_place(const void* p) {
  return ((uintptr_t)p & __atomic_load_n(&mp_sample_mask, __ATOMIC_RELAXED)) == 0;
}

/* Whether p may be a sampled block: most shards hold no record at a given moment, so the
 * unsampled blocks at a sample's place (about one in 2048 / size of the small ones, and every
 * large one) mostly cost one load here. */
static bool maybe_sampled(const void* p) { return at_sample_place(p) && mp_table_may_hold((uintptr_t)p); }

/* Removes p's record, if it has one (size 0: none); the table answers at once for most. */
static mp_recorded_t take_record(const void* p) {
  return at_sample_place(p) ? mp_table_remove((uintptr_t)p) : (mp_recorded_t){0, false};
}

static inline size_t round_to_grain(size_t size) {
  if (size > SIZE_MAX - MP_SAMPLE_GRAIN) return size;
  size_t rounded = (size + MP_SAMPLE_GRAIN - 1) & ~(MP_SAMPLE_GRAIN - 1);
  return rounded < rounded_min ? rounded_min : rounded;
}

size_t mp_rounding_extra(size_t size) {
  size_t rounded = mi_good_size(round_to_grain(size)), plain = mi_good_size(size);
  return rounded > plain ? rounded - plain : 0;
}

#ifdef MP_TEST_HOOKS
/* The Node gate's control: one mimalloc heap shared by every thread, as this library once
 * had (mimalloc heaps allocate only on the thread that made them). */
static void* shared_heap_alloc(size_t size, bool zero) {
  static _Atomic(mi_heap_t*) shared;
  mi_heap_t* h = atomic_load(&shared);
  if (h == NULL) {
    mi_heap_t* made = mi_heap_new();
    if (atomic_compare_exchange_strong(&shared, &h, made)) h = made;
  }
  size = round_to_grain(size);
  return zero ? mi_heap_zalloc(h, size) : mi_heap_malloc(h, size);
}
#endif

/* A sampled block, from the program's own heap (so that sampling changes neither the memory
 * the program holds nor its reuse), at an address the free filter passes on:
 *  - first the block the request gets anyway: large blocks, and small ones that happen to,
 *    sit there and keep their size class;
 *  - else a block of the request rounded up to a multiple of the grain, whose size class sits
 *    there on both majors (`rounded`: it counts as the request unsampled would, mp_block_bytes).
 *    At most 2 KiB more per live sample: at most 2 KiB / R of the live heap (0.4 % at 512 KiB),
 *    counted (mp_table_rounding) and stated in every profile.
 *    mimalloc's aligned allocation would also place it, but takes a size class of its own
 *    (every sample so placed: 1.056x peak RSS on the Node benchmark; only those whose block
 *    did not sit there: 1.032x; rounded instead: 1.024-1.030x), and on 3.0.1 aligned blocks
 *    exhaust memory in threads that come and go (docs/reliability.md);
 *  - an alignment above what that block has is asked of mimalloc at the grain or more.
 * NULL (the sample is dropped) on an exiting thread (thread.c), or when no such block came. */
static void* sample_alloc(mp_thread_t* t, size_t size, size_t align, bool zero, bool* rounded) {
  *rounded = false;
  if (t->exiting) return NULL;
  int saved = errno;
  void* p = NULL;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SHARED_HEAP")) {
    p = align == 0 ? shared_heap_alloc(size, zero) : NULL;
    *rounded = true;
    errno = saved;
    return p;
  }
#endif
  p = plain_alloc(size, align, zero);
  if (p != NULL && !at_sample_place(p)) {
    mi_free(p);
    size_t rounded_req = align <= rounded_align ? 0 : align < MP_SAMPLE_GRAIN ? MP_SAMPLE_GRAIN : align;
    p = plain_alloc(round_to_grain(size), rounded_req, zero);
    *rounded = true;
    if (p != NULL && (!at_sample_place(p) || (align != 0 && (uintptr_t)p % align != 0))) {
      mi_free(p); /* not where the filter looks: dropped */
      p = NULL;
    }
  }
  errno = saved;
  return p;
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

/* Allocates a sampled block and records it; a sample that cannot be kept (budget hit, thread
 * exiting) is counted as dropped and the allocation is served normally. */
static void* sampled_alloc(mp_thread_t* t, size_t size, size_t align, bool zero, const caller_t* c, mp_recorded_t* recorded) {
  /* not the stack: the program's may have little room left. An exiting thread has given its
   * scratch back (thread.c) and takes none again: its sample is dropped. */
  uintptr_t* frames = mp_unlikely(t->exiting) ? NULL : mp_stack_scratch(t);
  if (mp_unlikely(frames == NULL)) {
    *recorded = (mp_recorded_t){0, false};
    mp_count_dropped();
    return plain_alloc(size, align, zero);
  }
  /* Work that a pool thread runs, and a completion of such work on its loop's thread, carry
   * the stack that queued the work (pool.c); a completion's own stack ends at its trampoline. */
  bool queued = t->queued_by != NULL || t->pool_origin != NULL;
  uintptr_t cut = t->queued_by == NULL && t->pool_origin != NULL ? t->pool_origin_sp : 0;
  MP_TEST_TIME_START(walk_from);
  unsigned depth = mp_stack_capture(frames, mp_state.bt_max, c->ra, c->sp, c->fp, cut);
  MP_TEST_TIME_END(MP_TIME_WALK, walk_from);
  if (mp_unlikely(queued)) depth = mp_pool_append(frames, depth, MI_PROF_MAX_BT);
  bool rounded;
  MP_TEST_TIME_START(alloc_from);
  void* p = sample_alloc(t, size, align, zero, &rounded);
  MP_TEST_TIME_END(MP_TIME_ALLOC, alloc_from);
  /* A block that ends up without a record counts its whole usable size (mp_block_bytes). */
  *recorded = (mp_recorded_t){0, false};
  MP_TEST_TIME_START(record_from);
  int added = p == NULL ? -1 : mp_table_add((uintptr_t)p, size, rounded, frames, depth, thread_id(t), thread_name);
  MP_TEST_TIME_END(MP_TIME_TABLE, record_from);
  if (added > 0) {
    *recorded = (mp_recorded_t){size, rounded};
    return p;
  }
  if (added < 0) mp_count_dropped(); /* 0: the profiler stopped meanwhile */
  if (p != NULL && !rounded) return p;
  if (p != NULL) mi_free(p); /* a rounded block without its record would show its rounding */
  return plain_alloc(size, align, zero);
}

/* A sampler section: in_sample is set before in_profiler and cleared after it, so that a
 * signal never finds in_profiler without in_sample here (it would end the process without a
 * profile, signals.c); with in_sample alone it finds no lock held and dumps at once.
 * mp_sample_frame (signals.h) holds the frame of the function that runs the outermost section,
 * set before in_sample and cleared before it is put back: a section that a handler leaves by
 * siglongjmp is recognised by it (mp_sample_recover, signals.c). One store each way: inlined
 * always, so that the frame is the caller's, which stays put for the whole section. */
static inline __attribute__((always_inline)) bool enter_sample(mp_thread_t* t) {
  uintptr_t frame = (uintptr_t)__builtin_frame_address(0);
  bool was = t->in_sample; /* a handler's malloc may nest in the instant before in_profiler */
  if (mp_unlikely(was) && mp_sample_stale(t, frame)) was = false; /* left by a jump: a section anew */
  if (!was) mp_sample_frame = frame;
  atomic_signal_fence(memory_order_seq_cst);
  t->in_sample = true;
  atomic_signal_fence(memory_order_seq_cst);
  t->in_profiler = true;
  return was;
}

static inline __attribute__((always_inline)) void leave_sample(mp_thread_t* t, bool was) {
  mp_profiler_leave(t, false);
  atomic_signal_fence(memory_order_seq_cst);
  if (!was) mp_sample_frame = 0;
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

/* p's record (size 0: none), from any code outside the profiler. */
static mp_recorded_t recorded_of(const void* p) {
  mp_recorded_t r = {0, false};
  mp_thread_t* t = &mp_tls;
  if (!at_sample_place(p)) return r;
  if (t->in_profiler && !mp_sample_recover(t, (uintptr_t)__builtin_frame_address(0))) return r; /* a shard lock may be held */
  bool was = enter_sample(t);
  r = mp_table_lookup((uintptr_t)p);
  leave_sample(t, was);
  return r;
}

size_t mp_visited_bytes(const void* block, size_t size) {
  mp_recorded_t r = recorded_of(block);
  return r.rounded ? mp_block_bytes(block, r) : size;
}

/* `undo` is what the fast path subtracted from the countdown for this request. */
static void* alloc_common(mp_thread_t* t, uint64_t left, uint64_t undo, size_t size, size_t align, unsigned flags,
                          const caller_t* c) {
  bool zero = (flags & MP_ZERO) != 0;
  void* p;
  if (t->in_profiler && !mp_sample_recover(t, c->sp)) {
    /* The profiler's own allocation (unwinder, pthread): never sampled, and the thread's
     * distance to its next sample must survive it, so the subtraction is undone. */
    t->countdown += undo;
    p = plain_alloc(size, align, zero);
  } else {
    bool was = enter_sample(t);
    /* what fails inside the section (the memory of a thread's registration, a sample's record
     * or its stack's scratch, refused) is not the program's: a block returned leaves errno as
     * the program had it */
    int saved = errno;
    mp_recorded_t recorded = {0, false};
    if (decide(t, left, size)) {
      MP_TEST_TIME_START(sample_from);
      p = sampled_alloc(t, size, align, zero, c, &recorded);
      MP_TEST_TIME_END(MP_TIME_SAMPLE, sample_from);
    }
    else p = plain_alloc(size, align, zero);
    change_t change = tls_forced ? count_alloc(p, recorded) : (change_t){0};
    leave_sample(t, was);
    report(MP_EVENT_ALLOCATE, change, size);
    if (p != NULL) errno = saved;
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

static mp_noinline void free_watched(void* p, bool events);

/* Most pointers that reach this are unsampled blocks that happen to be aligned, and leave at
 * the first test: this part stays small (no frame) for them. */
mp_noinline void mp_free_slow(void* p) {
  if (p == NULL) return;
  bool events = tls_forced || atomic_load_explicit(&mp_events_on, memory_order_relaxed);
  if (mp_likely(!events && !maybe_sampled(p))) mi_free(p);
  else free_watched(p, events);
}

static mp_noinline void free_watched(void* p, bool events) {
  mp_thread_t* t = &mp_tls;
  bool guard = t->in_profiler && !mp_sample_recover(t, (uintptr_t)__builtin_frame_address(0));
  if (guard) {
    (void)take_record(p); /* the profiler's own free: not counted */
    mi_free(p);
    return;
  }
  bool was = enter_sample(t);
  /* Removed and counted in this order: the record decides the bytes (mp_block_bytes). */
  mp_recorded_t recorded = take_record(p);
  change_t change = events ? count_free(p, recorded) : (change_t){0};
  leave_sample(t, was);
  mi_free(p);
  report(MP_EVENT_FREE, change, 0);
}

/* A failed realloc of a sampled block: p stays, without the record it lost, so it counts its
 * whole usable size from now on (mp_unrecorded_extra) and its sample is dropped. */
static void kept_unrecorded(void* p, mp_recorded_t lost, bool events) {
  if (lost.size == 0) return;
  mp_count_dropped();
  if (events) atomic_fetch_add_explicit(&mp_exact.live_bytes, (long long)mp_unrecorded_extra(p, lost), memory_order_relaxed);
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
  if (t->in_profiler && !mp_sample_recover(t, c.sp)) return mi_realloc(p, size);
  bool was = enter_sample(t);
  int saved = errno; /* as in alloc_common */
  bool events = tls_forced || atomic_load_explicit(&mp_events_on, memory_order_relaxed);
  bool sampled = decide(t, left, size);
  /* Forget the record first: an in-place result would otherwise keep a stale one. */
  mp_recorded_t old_recorded = take_record(p);
  size_t old_usable = events ? mp_block_bytes(p, old_recorded) : 0;
  /* out of the window before mimalloc may hand p's address to another thread (window.c) */
  bool window = events && atomic_load_explicit(&mp_window_open, memory_order_relaxed);
  uint64_t window_bytes = window ? mp_window_note_free(p) : 0;
  mp_recorded_t recorded = {0, false};
  void* q;
  if (sampled) {
    q = sampled_alloc(t, size, 0, false, &c, &recorded);
    if (q != NULL) {
      size_t keep = mi_usable_size(p);
      memcpy(q, p, keep < size ? keep : size);
      mi_free(p);
    } else {
      kept_unrecorded(p, old_recorded, events);
    }
  } else {
    q = mi_realloc(p, size);
    if (q == NULL) kept_unrecorded(p, old_recorded, events);
  }
  if (window && q != NULL) mp_window_note_alloc(q, mp_block_bytes(q, recorded));
  else if (window_bytes != 0) mp_window_note_alloc(p, (size_t)window_bytes); /* p stays, as it was */
  change_t change = {0};
  if (events && q != NULL) {
    long long now = (long long)mp_block_bytes(q, recorded), old = (long long)old_usable;
    long long before = atomic_fetch_add_explicit(&mp_exact.live_bytes, now - old, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.accum_bytes, (unsigned long long)now, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.accum_objects, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.resize_over_bytes, (unsigned long long)(now < old ? now : old), memory_order_relaxed);
    atomic_fetch_add_explicit(&mp_exact.resizes, 1, memory_order_relaxed);
    change = (change_t){true, now - old, before + now - old};
  }
  leave_sample(t, was);
  report(MP_EVENT_RESIZE, change, size);
  errno = q == NULL ? ENOMEM : saved;
  return q;
}

/* A recorded sample answers what the same request unsampled would have (mp_block_bytes). */
size_t mp_usable_size(const void* p) { return p == NULL ? 0 : mp_block_bytes(p, recorded_of(p)); }

