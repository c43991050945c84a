/* Internal declarations shared by the files of the preload library, grouped by the file
 * that defines them. Every name here has hidden visibility (the library is built with
 * -fvisibility=hidden); only interpose.c and api.c export symbols.
 *
 * Rules that hold everywhere below:
 *  - nothing on the allocation path or before main calls the interposed malloc: profiler
 *    memory comes from mp_os_alloc (mmap), text is formatted by hand;
 *  - mp_tls.in_profiler is set while profiler code runs on a thread, so an allocation made
 *    underneath (libc, the unwinder, pthread) takes the plain mimalloc path;
 *  - no profiler lock is held while a stack is captured or the loader is entered;
 *  - aligned blocks come from mimalloc's *_aligned_at(..., 0) forms, never mi_malloc_aligned
 *    or mi_heap_malloc_aligned: before mimalloc 2.1.0 (its issue #700; Debian 12 ships 2.0.9)
 *    their fast path takes a power-of-two size of 256..1024 bytes as naturally aligned, but
 *    such pages start 384 bytes in, so posix_memalign(&p, 256, 256) came back aligned to 128
 *    only. The _at forms check the block's actual address.
 */
#ifndef MP_INTERNAL_H
#define MP_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "debug.h"
#include "mimalloc-pprof/profile.h"

/* Internal names are hidden, so the fast paths reach them without the GOT. */
#pragma GCC visibility push(hidden)

/* mimalloc's major version: MI_MALLOC_VERSION is 209 for 2.0.9, 20401 for 2.4.1, 30403 for 3.4.3. */
#define MP_MI_MAJOR(v) ((v) >= 10000 ? (v) / 10000 : (v) / 100)

#define mp_likely(x) __builtin_expect(!!(x), 1)
#define mp_unlikely(x) __builtin_expect(!!(x), 0)
#define mp_noinline __attribute__((noinline))

/* ---- util.c: a spinlock that never allocates and survives fork (see process.c) ---- */
/* The processor's hint inside a spin-wait loop: x86's pause, AArch64's yield. */
static inline void mp_spin_hint(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield" ::: "memory");
#endif
}
typedef struct mp_lock_s {
  atomic_int held;
  int level; /* mp_lock_level_t (debug.h): fixed where the lock is defined */
} mp_lock_t;
#define MP_LOCK_INIT(lvl) {.held = 0, .level = (lvl)}
void mp_lock(mp_lock_t* lock);
bool mp_lock_briefly(mp_lock_t* lock); /* mp_lock that gives up after a short spin: false, not held */
bool mp_lock_try(mp_lock_t* lock);     /* one attempt: false, not held */
void mp_unlock(mp_lock_t* lock);
void mp_lock_reset(mp_lock_t* lock); /* fork child only */
void mp_locks_forget(void);          /* fork child only: this thread holds nothing (debug) */
unsigned mp_locks_held(void);        /* debug builds: locks this thread holds; else 0 */

/* ---- osmem.c: profiler memory, straight from the OS, counted against the budget ---- */
void mp_os_set_budget(size_t max_bytes); /* 0: unlimited */
void* mp_os_alloc(size_t size);          /* zeroed; NULL when over budget or out of memory */
void* mp_os_alloc_transient(size_t size); /* the same, exempt from the budget (dump buffers) */
void mp_prewrite(void* p, size_t n);     /* a static table's pages made writable now (osmem.c) */
void mp_os_free(void* p, size_t size);
size_t mp_os_bytes(void);                /* currently held */

/* A bump allocator over OS chunks; released all at once. Not thread-safe by itself. */
typedef struct mp_bump_s {
  char* cur;
  char* end;
  void* chunks; /* singly linked through the first word of each chunk */
} mp_bump_t;
void* mp_bump_alloc(mp_bump_t* bump, size_t size); /* 16-byte aligned, zeroed */
void mp_bump_release(mp_bump_t* bump);

/* ---- options.c: the environment, read once from `environ` without allocating ---- */
typedef enum mp_format_e { MP_FORMAT_TEXT = 0, MP_FORMAT_PROTO = 1 } mp_format_t;

typedef struct mp_options_s {
  bool prof;              /* MIMALLOC_PROF */
  size_t interval;        /* MIMALLOC_PROF_SAMPLE_INTERVAL, alias MIMALLOC_PROF_SAMPLE_RATE */
  bool interval_set;
  bool accum;             /* MIMALLOC_PROF_ACCUM */
  bool accum_set;
  unsigned bt_max;        /* MIMALLOC_PROF_BT_MAX, 1..128 */
  bool bt_max_set;
  size_t max_bytes;       /* MIMALLOC_PROF_MAX_BYTES, 0 = unlimited */
  bool max_bytes_set;
  uint64_t seed;          /* MIMALLOC_PROF_SEED */
  bool seed_set;
  char dump_at_exit[MI_PROF_DUMP_PATH_MAX]; /* MIMALLOC_PROF_DUMP_AT_EXIT */
  char dump_peak_at_exit[MI_PROF_DUMP_PATH_MAX]; /* MIMALLOC_PROF_DUMP_PEAK_AT_EXIT */
  mp_format_t dump_format; /* MIMALLOC_PROF_DUMP_FORMAT */
  bool dump_format_set;
  bool memory_events;     /* MIMALLOC_MEMORY_EVENTS */
  bool verbose;           /* MIMALLOC_PROF_VERBOSE */
  size_t arena_bytes;     /* MIMALLOC_PROF_ARENA_SIZE: read and checked, no longer used (sampler.c) */
  bool direct;            /* MIMALLOC_PROF_DIRECT: PLT slots bound to the watching entry points (bind.c) */
  bool perf_map;          /* MIMALLOC_PROF_PERF_MAP: buckets keep V8's perf map size (jitmap.c) */
  char unwind_cache[MI_PROF_DUMP_PATH_MAX]; /* MIMALLOC_PROF_UNWIND_CACHE: the folder of rulefile.c, "" none */
#define MP_ARENA_MIN ((size_t)64 << 20) /* below, mimalloc may not carve one arena page */
} mp_options_t;

extern mp_options_t mp_env;
void mp_options_init(void);
#ifdef MP_TEST_HOOKS
/* Test builds only (native/Makefile `test-hooks`): true when the variable `name` is set to
 * something other than "" or "0"; each one breaks one behaviour for a gate's positive control. */
bool mp_test_hook(const char* name);
/* Test builds: nanoseconds spent in parts of the sample path, in situ (faults and cache misses
 * included), printed with MP_TEST_UNWIND_COUNTS's line (stack.c): the whole sampled allocation,
 * the stack walk, the rule lookups that missed the cache, the hand-backs of unwind pages, the
 * sampled block's allocation (which the program pays for anyway), its record, of which a new
 * bucket (the thread's name, the perf map's size) and a peak copy. */
enum { MP_TIME_SAMPLE, MP_TIME_WALK, MP_TIME_MISS, MP_TIME_GIVE, MP_TIME_ALLOC, MP_TIME_TABLE, MP_TIME_BUCKET, MP_TIME_PEAK, MP_TIME_PARTS };
uint64_t mp_test_clock(void);
void mp_test_time(unsigned part, uint64_t since);
/* MP_TEST_STEAL_HELD=1 (signals.c): once, a real-time signal held back at a last release's
 * last moment (step 0), and another signal whose handler makes a release of its own right
 * after the count is 0 (step 1). */
void mp_test_steal_held(int step);
#define MP_TEST_TIME_START(v) uint64_t v = mp_test_clock()
#define MP_TEST_TIME_END(part, v) mp_test_time(part, v)
#else
#define MP_TEST_TIME_START(v) ((void)0)
#define MP_TEST_TIME_END(part, v) ((void)0)
#endif

/* ---- util.c: formatting without malloc, warnings ---- */
size_t mp_fmt_u64(char* buf, uint64_t v);            /* decimal, returns length, no NUL */
size_t mp_fmt_hex(char* buf, uint64_t v);            /* lowercase, no 0x, no NUL */
/* Around a file's writing: SIGXFSZ blocked, so that a write past RLIMIT_FSIZE fails with EFBIG
 * instead of ending the process; then the one the writes raised consumed, and the mask put back. */
void mp_sigxfsz_block(sigset_t* before);
void mp_sigxfsz_restore(const sigset_t* before);
size_t mp_fmt_hex_bytes(char* buf, const uint8_t* bytes, size_t n); /* two lowercase digits a byte */
/* The GNU build id among the notes of a PT_NOTE segment (its bytes, size and alignment): its
 * length, *id pointing at it; 0 when there is none. */
size_t mp_note_build_id(const void* notes, size_t size, size_t align, const uint8_t** id);
size_t mp_strlen(const char* s);
uint64_t mp_peak_rss(void); /* VmHWM in bytes, 0 when unknown */
/* When this process began, in unix ms: the library's load (a fork child: the fork). With the
 * pid, it names the process in every profile (start_time=), so that a reused pid is another. */
extern uint64_t mp_process_start_ms;
void mp_note_process_start(void);
void mp_write_stderr(const char* msg);              /* "mimalloc-pprof: " prefix added */
/* The layout of a caller's versioned struct, whose first two fields are uint32_t size and
 * version: 2 the current one (`size_now` bytes), 1 the one without the version-2 fields
 * (`size_v1`), 0 anything else (errno EINVAL). */
unsigned mp_struct_version(const void* s, size_t size_now, size_t size_v1);
int64_t mp_monotonic_ns(void); /* CLOCK_MONOTONIC */
uint64_t mp_coarse_ns(void);    /* CLOCK_MONOTONIC_COARSE: a tick's precision, a vDSO read */
/* One turn of a bounded wait: yields and returns true while the wait, which began at its first
 * turn (*deadline 0 then; a caller may set an earlier deadline), has not passed it. */
bool mp_wait_turn(int64_t* deadline, int64_t limit_ns);
void mp_warnf2(const char* a, const char* b, const char* c); /* concatenation, one line */
/* Expands "%p" to the pid into out (cap bytes). False if it does not fit. */
bool mp_expand_path(const char* path, char* out, size_t cap);

/* Buffered output to a file descriptor; the first error sticks in `err` (an errno). */
typedef struct mp_out_s {
  int fd;
  int err;
  size_t len;
  uint64_t written;
  char buf[65536];
} mp_out_t;
void mp_out_bytes(mp_out_t* out, const void* data, size_t len);
void mp_out_str(mp_out_t* out, const char* s);
void mp_out_u64(mp_out_t* out, uint64_t v);
void mp_out_i64(mp_out_t* out, int64_t v);
void mp_out_hex(mp_out_t* out, uint64_t v); /* "0x" + lowercase hex */
void mp_out_flush(mp_out_t* out);

/* ---- sampler.c: per-thread state, sampling decision, exact counters ---- */
typedef struct mp_thread_s {
  /* Bytes of allocation left before the next sample. The interposer subtracts each request
   * and calls the slow path on borrow. Other threads store 0 here to send this one to its
   * slow path (mp_threads_resync); nothing else touches another thread's state. */
  uint64_t countdown;
  uint64_t rng;
  uint32_t generation;  /* profiler generation this thread's stream belongs to */
  uint32_t epoch;       /* the mp_state.epoch its countdown was drawn under */
  uint32_t ordinal;     /* creation ordinal: 0 main thread, then in pthread_create order */
  bool has_ordinal;
  bool in_profiler;     /* reentrancy guard */
  bool excluded;        /* mi_prof_thread_exclude: no samples on this thread */
  bool exiting;         /* its key destructor ran: no more samples on this thread */
  /* Inside one of the sampler's sections (an allocation's or free's slow path): short, and
   * waiting at most for a table shard that another thread holds for a bounded time. */
  volatile bool in_sample;
  /* A signal that was to end the process arrived while this thread was in a sampler section
   * (it may hold a table lock): acted on when the thread leaves it (mp_profiler_leave). */
  volatile int deferred_signal;
  bool registered;      /* on the registry (thread.c) */
  int32_t tid;          /* the kernel's thread id, 0 until asked (and again in a fork child) */
  /* A memory-events callback or visitor runs on this thread (events.c): its changes are
   * counted but not reported. */
  bool in_callback;
  struct mp_thread_s* next; /* the registry's links, under its lock */
  struct mp_thread_s* prev;
  uintptr_t stack_lo, stack_hi; /* 0, 0: not known; learned outside allocations (mp_stack_learn_bounds) */
  struct mp_scratch_s* scratch; /* the sample path's buffers (stack.c), claimed at the first sample */
  /* libuv thread-pool work (pool.c). On a pool thread running wrapped work: the entry that
   * holds the queuing stack. On a loop thread inside a wrapped completion: the entry whose
   * completion runs (origin) and its trampoline's frame, where the poster's stack is cut. */
  struct mp_pool_entry_s* queued_by;
  struct mp_pool_entry_s* pool_origin;
  uintptr_t pool_origin_sp;
  bool pool_worker;     /* ran pool work: never a poster */
  bool pool_probing;    /* inside the addon's probe (pool.c) */
  bool anchoring;       /* the thread that armed V8's sample anchors (jsanchor.c) */
} mp_thread_t;

/* Draws are capped here so that subtracting a request cannot wrap; a countdown above it
 * has borrowed. */
#define MP_COUNTDOWN_MAX ((uint64_t)1 << 62)

extern __thread mp_thread_t mp_tls __attribute__((tls_model("initial-exec")));

void mp_signal_resume(void); /* signals.c: ends the process by this thread's deferred signal */

/* Every profiler section ends here: in_profiler back to what it was on entry (`guard`), and
 * a signal deferred while inside is acted on once the thread is outside. The fence keeps the
 * store before the load: a signal landing between them finds in_profiler clear and is acted
 * on directly. */
static inline void mp_profiler_leave(mp_thread_t* t, bool guard) {
  t->in_profiler = guard;
  atomic_signal_fence(memory_order_seq_cst);
  if (__builtin_expect(!guard && t->deferred_signal != 0, 0)) mp_signal_resume();
}

/* Sampled blocks live in the program's own heap, each at an address whose low 11 bits (the
 * grain's) are 0 or mimalloc's page offset (sampler.c); mp_sample_mask keeps the other low bits.
 * The free-side filter: a pointer p needs the slow path iff (p & mp_filter_mask) == 0. The mask
 * is mp_sample_mask while profiling (the slow path then asks the record table, whose shards say
 * at once when they hold nothing), 0 while memory events are on (every free), and all ones
 * otherwise (only NULL). */
#define MP_SAMPLE_GRAIN ((uintptr_t)2048)
extern uintptr_t mp_sample_mask;
void mp_sampler_measure(void); /* sets mp_sample_mask once; under the lifecycle lock */
extern uintptr_t mp_filter_mask;

#define MP_CHECK_PERIOD ((uint64_t)64 * 1024)

/* The caller's registers as a slow path finds them. */
typedef struct caller_s {
  void* ra;     /* its pc: the return address of the interposed call */
  uintptr_t sp; /* its stack pointer once that call returns */
  uintptr_t fp; /* its rbp */
} caller_t;

/* Entry points leave rbp alone and reach the slow paths by tail jumps, so a slow path's own
 * frame sits right on the caller's: its saved rbp is the caller's rbp, its return address
 * the caller's pc, and the caller's stack pointer is just above. */
#if defined(__aarch64__)
/* AArch64: the frame record {x29, x30} sits at the bottom of the slow path's frame, so the
 * caller's stack pointer is the slow path's CFA (the tail jump and the call push nothing). */
#define CALLER_OF(frame, ra_)                                                                       \
  (mp_assert(((void**)(frame))[1] == (ra_)),                                                         \
   (caller_t){.ra = (ra_), .sp = (uintptr_t)__builtin_dwarf_cfa(), .fp = (uintptr_t)((void**)(frame))[0]})
#else
#define CALLER_OF(frame, ra_)                                                                       \
  (mp_assert(((void**)(frame))[1] == (ra_)),                                                         \
   (caller_t){.ra = (ra_), .sp = (uintptr_t)((void**)(frame) + 2), .fp = (uintptr_t)((void**)(frame))[0]})
#endif

/* A return address as code: AArch64's pointer authentication may have signed it (the high
 * bits); xpaclri (hint space: a no-op on processors without it) strips them. */
static inline uintptr_t mp_strip_ra(uintptr_t ra) {
#if defined(__aarch64__)
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_NO_PAC_STRIP")) return ra; /* the unwind test's control on arm64 */
#endif
  register uintptr_t x30 __asm__("x30") = ra;
  __asm__("hint #7" : "+r"(x30)); /* xpaclri */
  return x30;
#else
  return ra;
#endif
}

/* The caller's stack in a sampler section (the calling thread is outside the profiler), cut
 * where the walk would leave the frame at stop_sp (0: not cut). */
unsigned mp_sample_capture(uintptr_t* frames, unsigned max, const caller_t* c, uintptr_t stop_sp);
/* For a heap walk: the usable bytes that the mimalloc block at `block`, of `size` usable bytes,
 * counts for (mp_block_bytes). */
size_t mp_visited_bytes(const void* block, size_t size);

/* What the record table keeps of a sample beyond its bucket: its requested size (0: no
 * record) and whether its block was rounded up to a larger size class (sample_alloc). */
typedef struct mp_recorded_s {
  size_t size;
  bool rounded;
} mp_recorded_t;
size_t mp_block_bytes(const void* p, mp_recorded_t r);
/* What a live block counts for beyond mp_block_bytes once it loses its record r. */
size_t mp_unrecorded_extra(const void* p, mp_recorded_t r);
/* The heap bytes a sampled block of `size` holds beyond the same request unsampled when it was
 * rounded up (sample_alloc): what the sample costs the program's heap. */
size_t mp_rounding_extra(size_t size);

/* Flags of an allocation request. */
#define MP_ZERO 1u     /* calloc */
#define MP_NEW 2u      /* C++ operator new: new-handler loop, then std::bad_alloc */
#define MP_NOTHROW 4u  /* with MP_NEW: nothrow form, NULL after the handler loop */

/* Slow paths, entered after the countdown borrowed or the filter matched. `ra` is the
 * return address of the interposed entry point (the caller's pc); entry points do not
 * touch rbp and reach these only by tail jumps, so the slow path's saved frame pointer is
 * the caller's (test/native/entry.test.ts checks the jumps in the built library). */
void* mp_alloc_slow(size_t size, size_t align, unsigned flags, void* ra);
void mp_free_slow(void* p);
int mp_posix_memalign_slow(void** out, size_t align, size_t size, void* ra); /* errno kept */
void* mp_realloc_slow(void* p, size_t size, void* ra);
size_t mp_usable_size(const void* p);

/* A new epoch (start, exact counters switched): every thread, this one included, goes to
 * its slow path at its next allocation and draws again there. Under the lifecycle lock. */
void mp_sampler_resync_all(void);
/* Recomputes the free-side filter and the entry table: call with profiling true before
 * marking the profiler running, and with false after marking it stopped. */
void mp_filter_update(bool profiling);
void mp_thread_set_ordinal(uint32_t ordinal);
uint32_t mp_next_ordinal(void);
uint64_t mp_dropped_samples(void);
void mp_count_dropped(void);
void mp_reset_dropped(void);

/* exact counters */
typedef struct mp_exact_s {
  atomic_llong live_bytes, live_objects;
  atomic_ullong accum_bytes, accum_objects; /* a reallocation counts as one of its new size */
  /* what the memory-events snapshot leaves out of those (events.c): per reallocation, its
   * new size less what it grew by, and one object */
  atomic_ullong resize_over_bytes, resizes;
} mp_exact_t;
extern mp_exact_t mp_exact;
extern atomic_bool mp_events_on;

/* ---- events.c: the memory-events API's callbacks ---- */
enum { MP_EVENT_ALLOCATE = 0, MP_EVENT_FREE = 1, MP_EVENT_RESIZE = 2 };
bool mp_events_have_callbacks(void);
void mp_events_fork_prepare(void); /* process.c's fork handlers */
void mp_events_fork_parent(void);
void mp_events_fork_child(void);
/* Calls the installed callback for `kind`, if any, with in_callback set. Called by the slow
 * paths after their sampler section, for a change they counted; `total` is the live usable
 * bytes after it. */
void mp_events_report(unsigned kind, int64_t delta, int64_t total, size_t request);

/* window.c: the blocks allocated while a window is open (mi_prof_window_open). Noted by the
 * exact counters' slow paths inside a sampler section; a block leaves before it is freed. */
extern atomic_bool mp_window_open;
void mp_window_note_alloc(const void* p, size_t usable);
uint64_t mp_window_note_free(const void* p); /* its bytes if it was a member, else 0 */
void mp_window_fork_prepare(void);
void mp_window_fork_parent(void);
void mp_window_fork_child(void);

/* ---- interpose.c ---- */
/* Points the hot entry points at the watching versions (profiling or exact counters on) or
 * straight at mimalloc. Called under the lifecycle lock. */
void mp_entry_update(bool watching);

/* bind.c: the program's PLT slots for `name` re-pointed between the exported entry point and
 * its watching version (profiling on: watching; off: exported). Returns the slots rewritten. */
typedef struct mp_direct_s {
  const char* name;
  const void* exported;
  const void* watching;
} mp_direct_t;
#define MP_DIRECT_MAX 32
size_t mp_bind_direct(const mp_direct_t* names, size_t count, bool watching);
/* The slot of `name` in the one object that holds `in_object`, from one of `from` to `to`. */
size_t mp_bind_object(const void* in_object, const char* name, const void* const* from, size_t nfrom, const void* to);

/* jsanchor.c: V8's sampling heap profiler's samples with the native stack where each was
 * taken. Armed, the object that holds SampleObject calls operator new and sized delete through
 * interpose.c's anchor_new / anchor_delete_sized. MP_ANCHOR_SIZE and MP_ANCHOR_ID_OFFSET:
 * sizeof(SamplingHeapProfiler::Sample) and the offset of its sample_id in V8 11.3-14 (Node
 * 20-26), 64-bit; another layout is caught by the reader (the ids disagree), not here. */
#define MP_ANCHOR_SIZE 40u
#define MP_ANCHOR_ID_OFFSET 32u
typedef struct mp_anchor_site_s {
  uintptr_t lo, len; /* SampleObject's code; len 0: not armed */
} mp_anchor_site_t;
extern mp_anchor_site_t mp_anchor_site;
void* mp_anchor_new_slow(size_t n, void* ra); /* reached by a tail jump from anchor_new */
void mp_anchor_forget(void* p);
bool mp_bind_anchors(const void* in_object); /* interpose.c; under the lifecycle lock */
void* mp_entry_new(size_t n);                /* interpose.c: operator new through the table */
void mp_interpose_init(void); /* registers the mimalloc error handler that sets errno */
bool mp_interpose_probe(void); /* the program's malloc is this library's (at load only) */
/* operator new's failure path: new-handler loop, then std::bad_alloc (or NULL if nothrow). */
void* mp_new_fail(size_t size, size_t align, bool nothrow);

/* ---- thread.c: thread exit, the registry of sampling threads, creation ordinals ---- */
void mp_thread_init(void);
void mp_thread_register(void);          /* the calling thread, once; in_profiler set */
void mp_threads_resync(uint32_t epoch); /* every registered thread to its slow path */
void mp_threads_lock(void);             /* fork */
void mp_threads_unlock(void);
void mp_threads_child_reinit(void);
void* mp_thread_start(void* start);     /* the wrapped threads' root frame */

/* ---- resident.c: who mapped what, for the RSS breakdown (mi_prof_mapping_owners) ---- */
/* After a mapping succeeded (p may be MAP_FAILED: ignored); `caller` is mmap's return address. */
void mp_resident_mapped(void* p, size_t len, int flags, const void* caller);
void mp_resident_unmapped(void* p, size_t len); /* after a successful munmap */
void mp_resident_fork_prepare(void);
void mp_resident_fork_parent(void);
void mp_resident_fork_child(void);
uint64_t mp_profiler_resident(void); /* the library's own anonymous memory resident now (mi_prof_resident_t) */

/* ---- unwind.c: per-address unwind rules from .eh_frame (x86-64 and aarch64, glibc >= 2.35) ---- */
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define MP_UNWIND_CFI 1
#else
#define MP_UNWIND_CFI 0
#endif
enum { MP_RULE_FP = 0, MP_RULE_CFI = 1, MP_RULE_END = 2, MP_RULE_SIGNAL = 3, MP_RULE_DRAP = 4 };
typedef struct mp_unwind_rule_s {
  int32_t cfa_off; /* MP_RULE_CFI: CFA = (cfa_rbp ? rbp : rsp) + cfa_off; return address at CFA - 8;
                      MP_RULE_DRAP: CFA = *(rbp + cfa_off) */
  int16_t fp_off;  /* CFI: rbp saved at CFA + fp_off, 0: unchanged; DRAP: rbp saved at rbp + fp_off */
  uint8_t kind;    /* MP_RULE_FP: take the step by the frame-pointer chain; MP_RULE_END: outermost;
                      MP_RULE_SIGNAL: a signal frame, the interrupted registers in its ucontext */
#if defined(__aarch64__)
  /* AArch64 (rbp above reads x29, rsp sp): the return address is saved at CFA - 8 * ra_words
   * (the frame record's x30 beside x29), or still in x30 (ra_words 0: only at a function's
   * first instructions, which a walk meets only right after a signal frame). */
  uint8_t cfa_rbp : 1;
  uint8_t ra_words : 7;
#else
  bool cfa_rbp;
#endif
} mp_unwind_rule_t;
_Static_assert(sizeof(mp_unwind_rule_t) == 8, "a rule packs into one cache word");
/* One walk's state: the page ranges its misses read through objects' mappings, noted at the
 * walk's end (mp_unwind_walk_end), or when the walk has more, to be handed back (MADV_DONTNEED)
 * with the process's other recent ones. */
#define MP_UNWIND_WALK_RANGES 6u
typedef struct mp_unwind_walk_s {
  uintptr_t lo[MP_UNWIND_WALK_RANGES], hi[MP_UNWIND_WALK_RANGES];
  const void* object[MP_UNWIND_WALK_RANGES]; /* whose givable pages each range is (unwind.c) */
  unsigned n;
} mp_unwind_walk_t;
#define MP_UNWIND_WALK_INIT {{0}, {0}, {0}, 0}
/* The rule at code address pc (a return address minus one). Never allocates or waits for a
 * lock (its writers are tried once: unwind.c). */
void mp_unwind_rule(mp_unwind_walk_t* walk, uintptr_t pc, mp_unwind_rule_t* out);
void mp_unwind_walk_end(mp_unwind_walk_t* walk);
void mp_unwind_child_reinit(void); /* fork child only */
void mp_unwind_init(void);          /* once, before the first rule is asked */
void mp_unwind_prefetch(uintptr_t pc); /* a hint that pc's rule is asked soon; no effect on results */
/* misses parsed; bytes of pages handed back, in how many madvise calls */
void mp_unwind_counts(uint64_t* parsed, uint64_t* given, uint64_t* give_calls);
/* The cache's slots, for the rules kept between runs: slot i's code address and packed rule
 * (false: empty, or being written); a rule put in as if a miss had found it; whether a packed
 * rule is one a miss can find. */
#define MP_UNWIND_SLOTS 4096u
bool mp_unwind_slot(unsigned i, uintptr_t* pc, uint64_t* rule);
void mp_unwind_remember(uintptr_t pc, uint64_t rule);
bool mp_unwind_rule_valid(uint64_t rule);

/* ---- rulefile.c: the unwind rules kept between runs (MIMALLOC_PROF_UNWIND_CACHE) ---- */
void mp_rules_load(void); /* where profiling starts: the loaded objects' files into the cache */
void mp_rules_save(void); /* at exit: the cache's rules, a file per object */
void mp_rules_forget(void); /* this process keeps nothing (a child run leaves inert) */
void mp_rules_child_reinit(void); /* fork child: only rules it parses itself are new */

/* ---- stack.c ---- */
void mp_stack_init(void);          /* warm up the unwinder, learn our own text range */
/* The calling thread's stack bounds, learned outside any allocation (the load constructor for
 * the thread that loads the library, the thread start wrappers for new threads): the sample
 * path itself opens nothing. */
void mp_stack_learn_bounds(void);
/* Per-thread scratch of the sample path (frames and the fallback's buffer), in profiler memory
 * rather than on the program's stack; given back when the thread ends (its key destructor). */
uintptr_t* mp_stack_scratch(mp_thread_t* t); /* MI_PROF_MAX_BT frames; NULL: none to be had */
void mp_stack_release(mp_thread_t* t);
void mp_stack_child_reinit(void); /* fork child: other threads' scratch is free again */
/* Fills up to max return addresses, leaf first, starting with `ra`: the caller's return
 * address, its stack pointer after the return (`sp`) and its frame pointer (`fp`). */
unsigned mp_stack_capture(uintptr_t* frames, unsigned max, void* ra, uintptr_t sp, uintptr_t fp, uintptr_t stop_sp);

/* ---- table.c: stacks x size buckets and the live-sample records ---- */
typedef struct mp_bucket_s {
  struct mp_bucket_s* next; /* hash chain */
  uint64_t hash;
  size_t size;              /* requested bytes of every sample in this bucket */
  int64_t estimate;         /* a live sample's share of the estimate, size * w (table.c estimate_of) */
  size_t rounding;          /* what a rounded sample holds beyond its request (mp_rounding_extra) */
  uint64_t live;            /* sampled, live */
  uint64_t allocs;          /* sampled, since start or reset */
  uint64_t peak;            /* sampled, live when the last peak snapshot was taken */
  uint32_t depth;
  int32_t tid;              /* the allocating thread (kernel id) */
  char thread[16];          /* its name when the bucket was made (NUL-padded) */
  uint64_t jit_map_bytes;   /* V8's perf map size when the bucket was made, 0 unknown (jitmap.c) */
#if MP_DEBUG_ON
  uint64_t refs;            /* mp_table_check's count of records */
#endif
  uintptr_t frames[];       /* return addresses, leaf first */
} mp_bucket_t;

/* Records a sample of `size` bytes at p: 1 recorded, 0 not (the profiler stopped meanwhile),
 * -1 when the profiler memory budget is hit. */
/* `thread_name` is asked only when a bucket is made, outside the table's locks. */
int mp_table_add(uintptr_t p, size_t size, bool rounded, const uintptr_t* frames, unsigned depth, int32_t tid,
                 void (*thread_name)(char out[16]));
/* jitmap.c: the size of V8's perf map now (0: unknown, or MIMALLOC_PROF_PERF_MAP unset); any
 * thread, inside the profiler, no lock held. */
uint64_t mp_jit_map_bytes(void);
void mp_jit_child_reinit(void);
/* Removes the record of p if there is one, and returns it (size 0: none). */
mp_recorded_t mp_table_remove(uintptr_t p);
/* The free filter's tests after the place test, both counts of records written under the
 * record's shard lock with atomic operations and read without it: the record shard's count
 * (64 of them, a line each: they stay in cache), then the count of records whose block
 * address hashes where p's does (8192 bytes: a cache miss, paid only by frees that pass the
 * first). A count is 0 only if no record is counted there, so a free that reads a 0 skips the
 * shard lock and its probe. A hashed count that reaches MP_HINT_STUCK stays there (it then only
 * ever says "maybe"): 255 live records in one of 8192 slots takes about two million of them. On Node the shard's count alone said "maybe" to 1 free in
 * 8 of those that pass the place test, and the hashed count alone missed the cache on all. */
#define MP_RECORD_SHARDS 64u
typedef struct mp_shard_count_s {
  _Alignas(64) size_t n;
} mp_shard_count_t;
extern mp_shard_count_t mp_record_counts[MP_RECORD_SHARDS];
#define MP_RECORD_HINTS 8192u
#define MP_HINT_STUCK 255u
extern uint8_t mp_record_hints[MP_RECORD_HINTS];
static inline unsigned mp_record_shard_of(uintptr_t p) {
  _Static_assert(MP_RECORD_SHARDS == 64u, "the shift below takes 6 bits");
  return (unsigned)(((uint64_t)(p >> 16) * 0x9E3779B97F4A7C15ull) >> 58);
}
static inline unsigned mp_record_hint_of(uintptr_t p) {
  _Static_assert(MP_RECORD_HINTS == 8192u, "the shift below takes 13 bits");
  return (unsigned)(((uint64_t)(p >> 4) * 0x9E3779B97F4A7C15ull) >> 51);
}
/* Any thread, no lock: false only if p has no record. A record of p is counted before the
 * sampled block is returned, and the free of p comes after that return in the program's own
 * order, so both its counts are at least 1 for as long as the record exists. (That order is
 * happens-before when the program hands p over with a lock or release/acquire; a hand-over
 * by relaxed atomics gets it from x86's ordering, not from C11.) */
static inline bool mp_table_may_hold(uintptr_t p) {
  return __atomic_load_n(&mp_record_counts[mp_record_shard_of(p)].n, __ATOMIC_RELAXED) != 0 &&
         __atomic_load_n(&mp_record_hints[mp_record_hint_of(p)], __ATOMIC_RELAXED) != 0;
}
void mp_table_init(void); /* once, before the first record: the counts' pages made writable */
mp_recorded_t mp_table_lookup(uintptr_t p); /* takes p's shard lock: inside a sampler section only */
/* Stop: drop everything. With `whole`, returns the bytes the dropped records' blocks count for
 * beyond what they counted while recorded (mp_block_bytes), for the exact counters: the filter
 * must still pass every recorded block then (api.c), so that none is freed meanwhile. */
int64_t mp_table_clear(bool whole);
void mp_table_reset_accum(void);
void mp_table_lock_all(void);     /* fork */
void mp_table_unlock_all(void);
void mp_table_child_reinit(void);
void mp_table_check(void);        /* debug builds: asserts the record <-> bucket invariant */

typedef struct mp_table_totals_s {
  uint64_t live_samples, live_sampled_bytes, accum_samples, buckets;
  double est_live_bytes, est_live_objects, est_accum_bytes, est_accum_objects;
  double est_live_bytes_var; /* sampling variance of est_live_bytes */
} mp_table_totals_t;
void mp_table_totals(mp_table_totals_t* totals, double interval);

/* The high-water mark of the estimate of bytes in use since start: its estimate, when it was
 * taken (CLOCK_REALTIME ns; 0: none yet), and how many peak snapshots were taken. */
typedef struct mp_peak_s {
  double bytes;
  uint64_t ns;
  uint64_t snapshots;
  size_t rounding; /* mp_table_rounding then */
} mp_peak_t;
void mp_table_peak(mp_peak_t* peak);
/* Heap bytes the live sampled blocks hold beyond their requests (rounded up to be where the
 * free filter looks, sampler.c): the profiler's cost in the program's own heap. */
size_t mp_table_rounding(void);

/* ---- snapshot: what the writers consume, copied out under the locks ---- */
typedef struct mp_row_s {
  size_t size;      /* requested bytes per sample */
  uint64_t live;    /* sampled counts */
  uint64_t allocs;
  uint32_t depth;
  uint32_t first;   /* index of the leaf frame in mp_snapshot_t.frames */
  int32_t tid;
  char thread[16];
  uint64_t jit_map_bytes;
} mp_row_t;

typedef struct mp_snapshot_s {
  double interval;  /* R, bytes */
  bool accum;
  bool peak;        /* rows' live counts are those of the peak snapshot (mp_table_peak) */
  double peak_bytes; /* the estimate of bytes in use then, and when (CLOCK_REALTIME ns) */
  uint64_t peak_ns;
  size_t rounding;   /* mp_table_rounding, now or (peak) then */
  uint64_t profiler_resident; /* mp_profiler_resident before the snapshot's own buffers */
  mp_row_t* rows;
  size_t nrows;
  uintptr_t* frames; /* return addresses, leaf first per row */
  size_t nframes;
  mi_prof_stats_t stats;
  size_t map_bytes;  /* bytes held by rows + frames, for mp_snapshot_free */
} mp_snapshot_t;

bool mp_snapshot_take(mp_snapshot_t* snap);
void mp_snapshot_free(mp_snapshot_t* snap);

/* Horvitz-Thompson weight of one sample of `size` bytes at mean interval R: 1/p with
 * p = 1 - exp(-size/R). */
double mp_weight(double size, double interval);

/* ---- text.c / proto.c: writers; they allocate nothing but OS memory ---- */
void mp_write_text(mp_out_t* out, const mp_snapshot_t* snap);
void mp_write_proto(mp_out_t* out, const mp_snapshot_t* snap);

/* ---- dump.c ---- */
bool mp_dump(const char* path, mp_format_t format, bool peak);

/* ---- every.c: periodic profiles (MIMALLOC_PROF_DUMP_EVERY) ---- */
void mp_every_start(void);

/* ---- api.c: the public API ---- */
typedef struct mp_state_s {
  atomic_bool running;
  atomic_uint generation; /* bumped by every start: records of an older one are gone */
  atomic_uint epoch;      /* bumped by every start and exact-counter switch: threads re-draw */
  size_t interval;
  bool accum;
  unsigned bt_max;
  bool seeded;
  uint64_t seed;
  char dump_at_exit[MI_PROF_DUMP_PATH_MAX];
  mp_format_t dump_format;
} mp_state_t;
extern mp_state_t mp_state;
/* Fills every field of a stats struct (size and version set); takes the table locks. */
void mp_stats_fill(mi_prof_stats_t* s);

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
void mp_params_from_env(params_t* p);
bool mp_start_with(const params_t* p);
extern mp_lock_t mp_api_lock;  /* the lifecycle lock: start, stop, reset, exact counters */
extern bool mp_interposing;    /* malloc resolves to this library (false when dlopen'ed) */

/* ---- pool.c: libuv thread-pool work charged to the stack that queued it ---- */
/* The pool's mutex once learned (NULL before), and whether a probe runs: the interposed
 * pthread_mutex_unlock takes the slow path for that mutex, or for every mutex while probing. */
typedef struct mp_pool_watch_s {
  void* volatile mutex;
  volatile bool probing;
} __attribute__((aligned(64))) mp_pool_watch_t; /* alone on its cache line: every unlock reads it */
extern mp_pool_watch_t mp_pool;
int mp_pool_unlock_slow(void* mutex);
/* glibc's pthread_mutex_unlock (looked up on first use). */
extern int (*mp_libc_mutex_unlock)(pthread_mutex_t* mutex);
/* A sample's stack on a thread running queued work (queued_by), or inside the completion of
 * such work (pool_origin): the marker frame and that work's queuing stack appended after
 * `depth` frames, within `max`. */
unsigned mp_pool_append(uintptr_t* frames, unsigned depth, unsigned max);

/* ---- process.c: fork handlers ---- */
void mp_fork_install(void);

/* ---- signals.c: the profile when SIGINT, SIGTERM, SIGHUP or SIGQUIT ends the program ---- */
void mp_signals_install(bool with_exit_profile); /* at load, in a process the profiler watches */
/* Signals held back on this thread while it held a profiler lock (signals.c hold_back), bit
 * sig-1: blocked on this thread until it releases its last lock (mp_unlock), then delivered in order. */
extern __thread uint64_t mp_held_signals __attribute__((tls_model("initial-exec")));
/* A thread that held back a real-time signal blocks the real-time signals around each of its
 * profiler sections for a while after (signals.c mp_signals_section_begin): until then
 * (CLOCK_MONOTONIC_COARSE, ns; 0 when not), and the bits the current section blocked, not 0
 * only while that section holds a lock (its last release takes them: util.c). */
extern __thread uint64_t mp_section_block_until __attribute__((tls_model("initial-exec")));
extern __thread uint64_t mp_section_blocked __attribute__((tls_model("initial-exec")));
/* At a thread's first profiler lock, while until != 0, before it is counted (a real-time signal
 * then is delivered, not held back and put back): the bits it blocked, stored in
 * mp_section_blocked once counted (a handler before that finds them blocked, and not its own). */
uint64_t mp_signals_section_begin(void);
/* At its last release, with the bits its section blocked (util.c), while they or held signals are there. */
void mp_signals_release(uint64_t section_bits);
void mp_signals_fork_prepare(void); /* fork: no sigaction() under way across it */
void mp_signals_fork_parent(void);
void mp_signals_child_forget(void); /* fork child */

/* ---- lifecycle.c: load and exit ---- */
const char* mp_run_dir(void); /* MIMALLOC_PPROF_RUN_DIR, or NULL */
const char* mp_getenv(const char* name); /* from `environ`, without allocating */
int mp_run_pid(void);                    /* MIMALLOC_PPROF_RUN_PID, 0 when not under run */
void mp_mark_loaded(void);                /* under run: <run dir>/loaded.<pid> (lifecycle.c) */
void mp_fork_child_under_run(void);       /* fork's child handler, after the locks are reset */
/* Held around the profiler's own calls that take the loader's lock while other threads run
 * (the proto writer's dl_iterate_phdr), and taken first by fork's prepare handler: glibc does
 * not reset the loader's lock in a child, so a fork during a dump would leave the child unable
 * to dump (or dlopen) ever again. */
extern mp_lock_t mp_loader_lock;

#pragma GCC visibility pop
#endif
