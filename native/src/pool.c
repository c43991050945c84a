/* libuv thread-pool work charged to the stack that queued it.
 *
 * A sample taken on a pool thread has only the pool's frames (libuv's worker, zlib, a
 * crypto routine, an addon's Execute); the JavaScript that asked for the work ran earlier,
 * on another thread. libuv's pool is one FIFO queue under one mutex, shared by every loop of
 * the process (the main thread's and each worker_threads thread's), and every item on it is
 * a `struct uv__work` {work, done, loop, wq} (libuv's public uv/threadpool.h, the same since
 * libuv 1.0) inside the request. Node links libuv statically, so its calls to uv_queue_work
 * never pass a PLT; libuv's calls to pthread_mutex_unlock do, and the one that ends post()
 * releases the pool's mutex with the new item at the queue's tail. So:
 *  - learning: the addon queues one probe item; at the first unlock on its thread after the
 *    item is linked, the mutex being released is the pool's and the item's successor is the
 *    queue's head (mi_prof_pool_probe_begin/_end);
 *  - wrapping: at an unlock of the pool's mutex by a thread that is not a pool thread, an
 *    item at the tail that is not wrapped yet gets an entry (its own work and done
 *    functions), and its work and done pointers become the trampolines below. This happens
 *    before the mutex is released, so no pool thread can have taken the item;
 *  - capture: after the release, the poster's stack is stored in the entry and published. In
 *    a completion that a wrapped item's done trampoline runs, the stack is cut at that
 *    trampoline and the completed item's own stack follows a marker: work queued from a
 *    callback is charged through it to the code that queued the first piece of work;
 *  - work trampoline (pool thread): the entry is the thread's queued_by for the work's
 *    extent, and every sample there carries the marker frame and the entry's stack above its
 *    own frames (mp_pool_append);
 *  - done trampoline (loop thread): the entry leaves the table, is the thread's origin while
 *    the real done runs, and is freed after it returns.
 * Invariants: an entry is in the table from its wrapping until its done trampoline runs, so
 * the work trampoline always finds it; an entry's frames are written once, before its state
 * says READY, and never after. Items the table cannot take (full) and libuv's own static
 * messages (exit, slow I/O), which live beside the queue's head, are left alone. Slow I/O
 * (getaddrinfo) waits on a second queue under the same mutex, learned by a second probe. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cancel.h"
#include "internal.h"

/* glibc's pthread_mutex_unlock, bound at load: mimalloc (3.x) unlocks its own mutexes during
 * its initialisation, before this library's constructors run, so the pointer must be valid
 * from the start and no lookup may run inside that first unlock (dlsym allocates on glibc
 * before 2.34). glibc exports the same function as __pthread_mutex_unlock at its base
 * version; a versioned reference reaches it without reaching this library's own
 * pthread_mutex_unlock. Elsewhere the lookup happens on first use. */
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__GLIBC__)
extern int mp_glibc_mutex_unlock(pthread_mutex_t* mutex);
#if defined(__x86_64__)
__asm__(".symver mp_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.2.5");
#else /* aarch64's base version */
__asm__(".symver mp_glibc_mutex_unlock, __pthread_mutex_unlock@GLIBC_2.17");
#endif
int (*mp_libc_mutex_unlock)(pthread_mutex_t* mutex) = mp_glibc_mutex_unlock;
#else
static int unlock_first(pthread_mutex_t* mutex);
int (*mp_libc_mutex_unlock)(pthread_mutex_t* mutex) = unlock_first;

static int unlock_first(pthread_mutex_t* mutex) {
  int (*f)(pthread_mutex_t*) = (int (*)(pthread_mutex_t*))dlsym(RTLD_NEXT, "pthread_mutex_unlock");
  if (f == NULL) {
    mp_write_stderr("glibc's pthread_mutex_unlock was not found");
    abort();
  }
  __atomic_store_n(&mp_libc_mutex_unlock, f, __ATOMIC_RELAXED);
  return f(mutex);
}
#endif

typedef struct pool_queue_s {
  struct pool_queue_s* next;
  struct pool_queue_s* prev;
} pool_queue_t;

typedef struct pool_work_s {
  void (*work)(struct pool_work_s* w);
  void (*done)(struct pool_work_s* w, int status);
  void* loop;
  pool_queue_t wq;
} pool_work_t;

#define POOL_FRAMES 96u
#define POOL_ENTRIES 8192u
#define POOL_SLOTS 16384u /* twice the entries: linear probes stay short */

enum { FILLING = 0, READY = 1, ABANDONED = 2 };

#define POOL_PARTS 15u /* parts (before the root) an entry indexes; more: found by scanning */

typedef struct mp_pool_entry_s {
  void (*work)(pool_work_t* w);
  void (*done)(pool_work_t* w, int status);
  uint32_t next_free;           /* on the free stack: the next entry's index + 1 */
  atomic_uint state;
  unsigned depth;               /* valid once READY, as the fields below */
  /* The parts before the root, in order: part k is frames[part_start(k), part_end[k]) and
   * frames[part_end[k]] is a marker; part_hash[k] is path_hash of its frames. `indexed` says
   * the list holds every marker of frames[0, depth); when not, after_same_path scans. */
  bool indexed;
  uint8_t parts;
  uint8_t part_end[POOL_PARTS];
  uint64_t part_hash[POOL_PARTS];
  uintptr_t frames[POOL_FRAMES];
} mp_pool_entry_t;

/* The table of work in flight, without a lock: slots keyed by the item's address, found by
 * linear probing. Only the thread that holds the pool's mutex inserts (so inserts never
 * race), into the first empty or vacated slot from the key's hash; a completion vacates its
 * item's slot. A slot never becomes empty again, so a search for a key in the table meets
 * the key before any empty slot. */
#define SLOT_EMPTY ((uintptr_t)0)
#define SLOT_VACATED ((uintptr_t)1)
typedef struct pool_slot_s {
  _Atomic(uintptr_t) key;
  uint32_t entry;
} pool_slot_t;

mp_pool_watch_t mp_pool;
static pool_queue_t* pool_head;     /* libuv's queue head, learned with the mutex */
static pool_queue_t* slow_head;     /* its queue of slow I/O (getaddrinfo), learned next */
static pool_queue_t* probe_node;    /* the probe item's queue node, during the probe */
/* Per queue, the last tail left unwrapped (posted while the profiler was stopped, by the
 * profiler itself, or when the table was full): a later unlock by another thread must not
 * wrap it under that thread's stack. Every post ends with its poster's own unlock, the first
 * to see the new tail, so one memo per queue suffices. */
static pool_queue_t* left_alone[2];

static pool_slot_t* slots;
static mp_pool_entry_t* entries;
/* Free entries: a stack of indexes + 1 (0: empty). Any thread pushes (a completion, a poster
 * that finished late); only the holder of the pool's mutex pops, so a pop cannot meet the
 * ABA of another pop. Entries never handed out stay untouched (`used`). */
static _Atomic(uint32_t) free_top;
static unsigned used;
static atomic_ullong refused;

/* Never called: its address is the marker frame between a sample's own frames and the
 * stack that queued the work; the symbolizer shows it as "[queued by]". */
mp_noinline void mimalloc_pprof_queued_by(void) { __asm__ volatile("nop\n\tnop\n\tnop\n\tnop"); }
#define MARKER_PC ((uintptr_t)&mimalloc_pprof_queued_by + 2)

static unsigned slot_of(const pool_work_t* w) {
  return (unsigned)(((uintptr_t)w >> 4) * 0x9E3779B97F4A7C15ull >> 50) & (POOL_SLOTS - 1);
}

static bool table_init(void) {
  if (slots != NULL) return true;
  size_t bytes = POOL_SLOTS * sizeof(pool_slot_t) + POOL_ENTRIES * sizeof(mp_pool_entry_t);
  void* m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return false;
  entries = (mp_pool_entry_t*)((char*)m + POOL_SLOTS * sizeof(pool_slot_t));
  slots = (pool_slot_t*)m;
  return true;
}

/* Under the pool's mutex. Freed entries first (LIFO keeps the touched pages few). */
static mp_pool_entry_t* entry_new(void) {
  uint32_t top = atomic_load_explicit(&free_top, memory_order_acquire);
  while (top != 0) {
    uint32_t next = entries[top - 1].next_free;
    if (atomic_compare_exchange_weak_explicit(&free_top, &top, next, memory_order_acquire, memory_order_acquire))
      return &entries[top - 1];
  }
  return used < POOL_ENTRIES ? &entries[used++] : NULL;
}

static void entry_free(mp_pool_entry_t* e) {
  uint32_t index = (uint32_t)(e - entries) + 1;
  uint32_t top = atomic_load_explicit(&free_top, memory_order_relaxed);
  do e->next_free = top;
  while (!atomic_compare_exchange_weak_explicit(&free_top, &top, index, memory_order_release, memory_order_relaxed));
}

/* The slot of an item in the table (the invariants say it is there). */
static pool_slot_t* slot_find(const pool_work_t* w) {
  unsigned i = slot_of(w);
  for (unsigned n = 0; n < POOL_SLOTS; n++, i = (i + 1) & (POOL_SLOTS - 1))
    if (atomic_load_explicit(&slots[i].key, memory_order_acquire) == (uintptr_t)w) return &slots[i];
  return NULL;
}

/* Under the pool's mutex. */
static void slot_insert(const pool_work_t* w, const mp_pool_entry_t* e) {
  unsigned i = slot_of(w);
  for (;; i = (i + 1) & (POOL_SLOTS - 1)) {
    uintptr_t k = atomic_load_explicit(&slots[i].key, memory_order_acquire);
    if (k == SLOT_EMPTY || k == SLOT_VACATED) break;
  }
  slots[i].entry = (uint32_t)(e - entries);
  atomic_store_explicit(&slots[i].key, (uintptr_t)w, memory_order_release);
}

static void work_trampoline(pool_work_t* w);
static void done_trampoline(pool_work_t* w, int status);

/* Whether a queue node is one of libuv's static messages (exit, "run slow work"): they are
 * defined next to the queue's head, in the same object file, and are not work items. Any
 * other node is a `struct uv__work`, on the heap or in some image (an addon's static request,
 * the probes). */
static bool is_static(const void* node) {
  return (uintptr_t)node - ((uintptr_t)pool_head - 65536) < 2 * 65536;
}

/* Under the pool's mutex: the item at a queue's tail gets an entry and the trampolines. At
 * most one item in flight is counted per queue tail the table could not take. */
static mp_pool_entry_t* wrap_tail(pool_queue_t* head, unsigned queue) {
  pool_queue_t* q = head->prev;
  if (q == head || q == left_alone[queue] || is_static(q)) return NULL;
  pool_work_t* w = (pool_work_t*)((char*)q - offsetof(pool_work_t, wq));
  if (w->work == work_trampoline || w->work == NULL) return NULL;
  mp_pool_entry_t* e = entry_new();
  if (e == NULL) {
    left_alone[queue] = q;
    atomic_fetch_add_explicit(&refused, 1, memory_order_relaxed);
    return NULL;
  }
  e->work = w->work;
  e->done = w->done;
  e->depth = 0;
  atomic_store_explicit(&e->state, FILLING, memory_order_relaxed);
  slot_insert(w, e);
  w->work = work_trampoline;
  w->done = done_trampoline;
  return e;
}

static inline void cpu_relax(void) { mp_spin_hint(); }

/* Whether an entry's frames are published. A pool thread can take an item the instant the
 * poster releases the mutex, before the poster has stored its stack (about a microsecond):
 * a sample in that window waits for it, a bounded time (the poster waits for nothing). */
static bool ready(const mp_pool_entry_t* e) {
  for (unsigned spins = 0; spins < 20000; spins++) {
    unsigned state = atomic_load_explicit(&e->state, memory_order_acquire);
    if (state != FILLING) return state == READY;
    if (spins >= 64) sched_yield();
    else cpu_relax();
  }
  return false;
}

/* frames[0, depth) + marker + tail[0, n), within max: when it does not fit, the start of the
 * tail goes (the hops nearest this one); its end, the stack of the code that queued the first
 * piece of work, stays. */
static unsigned join(uintptr_t* frames, unsigned depth, unsigned max, const uintptr_t* tail, unsigned n) {
  if (depth + 1 >= max) return depth;
  frames[depth++] = MARKER_PC;
  if (n > max - depth) {
    tail += n - (max - depth);
    n = max - depth;
  }
  memcpy(frames + depth, tail, n * sizeof(uintptr_t));
  return depth + n;
}

unsigned mp_pool_append(uintptr_t* frames, unsigned depth, unsigned max) {
  const mp_pool_entry_t* e = mp_tls.queued_by != NULL ? mp_tls.queued_by : mp_tls.pool_origin;
  if (!ready(e)) return depth;
  return join(frames, depth, max, e->frames, e->depth);
}


/* The executable's text (Node's C++ and V8's builtins; JIT code lies outside it), learned
 * with the pool: the frames by which two stacks are the same path whatever tier the
 * JavaScript between them runs in. */
static uintptr_t exe_lo, exe_hi;

/* Every executable segment of the executable, from the lowest to the highest: Node's binary
 * has more than one (a few KiB of start-up code before the text of libuv, Node and V8). */
static int find_exe(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  (void)arg;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || (ph->p_flags & PF_X) == 0) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (start < lo) lo = start;
    if (start + ph->p_memsz > hi) hi = start + ph->p_memsz;
  }
  if (hi > lo) {
    exe_lo = lo;
    exe_hi = hi;
  }
  return 1; /* the first object is the executable */
}

static bool in_exe(uintptr_t pc) { return pc - exe_lo < exe_hi - exe_lo; }

/* Whether two parts of stacks take the same native path (their frames in the executable, in
 * order, are the same). */
static bool same_path(const uintptr_t* a, unsigned na, const uintptr_t* b, unsigned nb) {
  unsigned i = 0, j = 0;
  for (;;) {
    while (i < na && !in_exe(a[i])) i++;
    while (j < nb && !in_exe(b[j])) j++;
    if (i == na || j == nb) return i == na && j == nb;
    if (a[i++] != b[j++]) return false;
  }
}

/* A hash of a part's frames in the executable, in order: two parts with different hashes
 * take different native paths, so same_path runs only where the hashes agree. */
static uint64_t path_hash(const uintptr_t* a, unsigned n) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  for (unsigned i = 0; i < n; i++)
    if (in_exe(a[i])) h = (h ^ a[i]) * 0xBF58476D1CE4E5B9ull;
  return h;
}

/* Where, in an origin's frames, the part after the first of its parts (before its root, the
 * last) that takes `own`'s native path begins; 0 when none does. Work that a completion queues
 * again and again (a read loop, a stream's next chunk, from one path or alternating between
 * a few) then keeps one part per path instead of growing a part per hop. */
static unsigned after_same_path(const uintptr_t* own, unsigned n, uint64_t own_hash, const mp_pool_entry_t* origin) {
  if (origin->indexed) {
    unsigned start = 0;
    for (unsigned k = 0; k < origin->parts; k++) {
      unsigned end = origin->part_end[k];
      if (origin->part_hash[k] == own_hash && same_path(own, n, origin->frames + start, end - start)) return end + 1;
      start = end + 1;
    }
    return 0; /* the root (after the last marker) is never dropped */
  }
  unsigned start = 0;
  for (unsigned i = 0; i < origin->depth; i++) {
    if (origin->frames[i] != MARKER_PC) continue;
    if (same_path(own, n, origin->frames + start, i - start)) return i + 1;
    start = i + 1;
  }
  return 0;
}

#ifdef MP_TEST_HOOKS
/* Test builds: MP_TEST_POOL_NO_CAPTURE is the benchmark's arm that wraps and tracks items but
 * takes no stack (bench/node-features.mjs); MP_TEST_POOL_NO_COLLAPSE the chain test's control,
 * every hop appended (test/run/pool.test.ts). Read once. */
static bool hook_once(int* cached, const char* name) {
  if (*cached < 0) *cached = mp_test_hook(name) ? 1 : 0;
  return *cached == 1;
}
static int no_capture = -1, no_collapse = -1;
#endif

/* The poster's stack into its entry, after the pool's mutex is released. Inside a wrapped
 * completion the stack is cut at its trampoline and the completed item's stack follows,
 * without the parts that took the same native path as this one (after_same_path). */
static void fill(mp_pool_entry_t* e, mp_thread_t* t, const caller_t* c) {
  int saved = errno;
  const mp_pool_entry_t* origin = t->pool_origin;
  unsigned max = mp_state.bt_max < POOL_FRAMES ? mp_state.bt_max : POOL_FRAMES;
#ifdef MP_TEST_HOOKS
  if (hook_once(&no_capture, "MP_TEST_POOL_NO_CAPTURE")) max = 0;
#endif
  unsigned n = max == 0 ? 0 : mp_sample_capture(e->frames, max, c, origin != NULL ? t->pool_origin_sp : 0);
  e->parts = 0;
  e->indexed = true; /* no marker yet */
  if (origin != NULL && max > 0 && ready(origin)) {
    uint64_t own_hash = path_hash(e->frames, n);
    unsigned from = after_same_path(e->frames, n, own_hash, origin);
#ifdef MP_TEST_HOOKS
    if (hook_once(&no_collapse, "MP_TEST_POOL_NO_COLLAPSE")) from = 0;
#endif
    unsigned own_n = n, tail_n = origin->depth - from;
    n = join(e->frames, n, POOL_FRAMES, origin->frames + from, tail_n);
    if (n > own_n) { /* joined: the own part, then the origin's parts kept from `from` on */
      unsigned shift = own_n + 1;
      unsigned kept = from + (tail_n - (n - shift)); /* join drops the tail's start when full */
      e->part_end[0] = (uint8_t)own_n;
      e->part_hash[0] = own_hash;
      e->parts = 1;
      e->indexed = origin->indexed;
      for (unsigned k = 0, start = 0; e->indexed && k < origin->parts; k++) {
        unsigned end = origin->part_end[k];
        if (end >= kept) { /* its marker is kept: the whole part, or the end of one cut short */
          if (e->parts == POOL_PARTS) {
            e->indexed = false;
            break;
          }
          unsigned at = end - kept + shift, begin = start >= kept ? start - kept + shift : shift;
          e->part_end[e->parts] = (uint8_t)at;
          e->part_hash[e->parts++] = start >= kept ? origin->part_hash[k] : path_hash(e->frames + begin, at - begin);
        }
        start = end + 1;
      }
    }
  }
  e->depth = n;
#if MP_DEBUG
  if (e->indexed) { /* the index names every marker, and each part's hash is its own */
    unsigned markers = 0, start = 0;
    for (unsigned i = 0; i < n; i++) markers += e->frames[i] == MARKER_PC;
    mp_assert(markers == e->parts);
    for (unsigned k = 0; k < e->parts; k++) {
      mp_assert(e->part_end[k] < n && e->frames[e->part_end[k]] == MARKER_PC);
      mp_assert(path_hash(e->frames + start, e->part_end[k] - start) == e->part_hash[k]);
      start = e->part_end[k] + 1;
    }
  }
#endif
  unsigned expected = FILLING;
  if (!atomic_compare_exchange_strong_explicit(&e->state, &expected, READY, memory_order_release,
                                               memory_order_acquire))
    entry_free(e); /* its done trampoline ran first and left it to us */
  errno = saved;
}

/* Probing: the first unlock on the probing thread after the probe item was linked. The
 * first probe (uv_queue_work) finds the mutex and the queue, the second (uv_getaddrinfo) the
 * slow I/O queue, which that mutex guards too. */
static void learn(void* mutex) {
  pool_queue_t* node = probe_node;
  pool_queue_t* head = node->next;
  if (head == node || head == NULL || head->prev != node) return;
  if (mp_pool.mutex == NULL) {
    pool_head = head;
    mp_pool.mutex = mutex;
  } else if (mutex == mp_pool.mutex && head != pool_head) {
    slow_head = head;
  }
  probe_node = NULL;
}

#ifdef MP_TEST_HOOKS
/* Test builds: MP_TEST_POOL_TIMING=1 times the poster's part of each wrapped item (the wrap
 * under the pool's mutex, and the capture after it: two intervals, each of which holds about
 * one clock reading's own time) with the monotonic clock, and prints the totals and the cost
 * of one reading at exit: bench/node-features.mjs's ns per queued item, free of what the
 * extra time does to the pool's scheduling. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>
static int timing = -1;
static atomic_ullong timed_ns, timed_items;
static uint64_t now_ns(void) { return (uint64_t)mp_monotonic_ns(); }
__attribute__((destructor)) static void timing_report(void) {
  if (timing != 1) return;
  /* the cost of one clock reading, measured here: not the watch's */
  uint64_t start = now_ns();
  for (int i = 0; i < 10000; i++) (void)now_ns();
  unsigned long long per_read = (unsigned long long)((now_ns() - start) / 10001);
  char line[160];
  int n = snprintf(line, sizeof(line), "mp_pool_timing items=%llu ns=%llu clock_ns=%llu\n", (unsigned long long)timed_items,
                   (unsigned long long)timed_ns, per_read);
  if (n > 0) (void)!write(2, line, (size_t)n);
}
#endif

mp_noinline int mp_pool_unlock_slow(void* mutex) {
  mp_thread_t* t = &mp_tls;
  if (mp_unlikely(t->pool_probing) && probe_node != NULL) learn(mutex);
  if (mutex != mp_pool.mutex) return mp_libc_mutex_unlock(mutex);
  caller_t c = CALLER_OF(__builtin_frame_address(0), __builtin_return_address(0));
  mp_pool_entry_t* e = NULL;
#ifdef MP_TEST_HOOKS
  if (timing < 0) timing = mp_test_hook("MP_TEST_POOL_TIMING") ? 1 : 0;
  uint64_t t0 = timing == 1 ? now_ns() : 0;
#endif
  if (atomic_load_explicit(&mp_state.running, memory_order_relaxed) && !t->in_profiler && !t->pool_worker &&
      !t->exiting) {
    e = wrap_tail(pool_head, 0);
    if (e == NULL && slow_head != NULL) e = wrap_tail(slow_head, 1);
  } else if (!t->pool_worker) {
    left_alone[0] = pool_head->prev;
    if (slow_head != NULL) left_alone[1] = slow_head->prev;
  }
#ifdef MP_TEST_HOOKS
  uint64_t wrapped = timing == 1 ? now_ns() - t0 : 0; /* glibc's unlock (a futex wake) is not ours */
#endif
  int rc = mp_libc_mutex_unlock(mutex);
#ifdef MP_TEST_HOOKS
  uint64_t t1 = timing == 1 ? now_ns() : 0;
#endif
  if (e != NULL) fill(e, t, &c);
#ifdef MP_TEST_HOOKS
  if (timing == 1 && e != NULL) {
    atomic_fetch_add_explicit(&timed_ns, wrapped + (now_ns() - t1), memory_order_relaxed);
    atomic_fetch_add_explicit(&timed_items, 1, memory_order_relaxed);
  }
#endif
  return rc;
}

static void work_trampoline(pool_work_t* w) {
  pool_slot_t* slot = slot_find(w);
  mp_assert(slot != NULL);
  mp_pool_entry_t* e = &entries[slot->entry];
  mp_thread_t* t = &mp_tls;
  t->pool_worker = true;
  mp_pool_entry_t* outer = t->queued_by;
  t->queued_by = e;
  e->work(w);
  t->queued_by = outer;
}

static void done_trampoline(pool_work_t* w, int status) {
  pool_slot_t* slot = slot_find(w);
  mp_assert(slot != NULL);
  mp_pool_entry_t* e = &entries[slot->entry];
  atomic_store_explicit(&slot->key, SLOT_VACATED, memory_order_release); /* w may be queued again inside done */
  mp_thread_t* t = &mp_tls;
  mp_pool_entry_t* outer = t->pool_origin;
  uintptr_t outer_sp = t->pool_origin_sp;
  t->pool_origin = e;
  t->pool_origin_sp = (uintptr_t)__builtin_frame_address(0);
  e->done(w, status); /* may free w: nothing below reads it */
  t->pool_origin = outer;
  t->pool_origin_sp = outer_sp;
  unsigned expected = FILLING;
  if (!atomic_compare_exchange_strong_explicit(&e->state, &expected, ABANDONED, memory_order_acq_rel,
                                               memory_order_acquire))
    entry_free(e); /* READY: the poster is done with it */
}

/* MIMALLOC_PPROF_POOL=0 leaves the pool alone. */
static bool pool_wanted(void) {
  const char* v = mp_getenv("MIMALLOC_PPROF_POOL");
  if (v == NULL || (v[0] == '1' && v[1] == 0)) return true;
  if (v[0] == '0' && v[1] == 0) return false;
  static atomic_bool warned;
  if (!atomic_exchange(&warned, true)) mp_warnf2("invalid MIMALLOC_PPROF_POOL (0 or 1)", " (ignored, using the default): ", v);
  return true;
}

static bool probe_begin(void* queue_node, size_t queue_offset) {
  static atomic_uint probes; /* the first probe finds the queue, the second the slow queue */
  if (queue_node == NULL || queue_offset != offsetof(pool_work_t, wq) || !pool_wanted()) return false;
  unsigned k = atomic_fetch_add(&probes, 1);
  if (k > 1 || (k == 1 && mp_pool.mutex == NULL)) return false;
  if (!table_init()) return false;
  if (exe_hi == 0) dl_iterate_phdr(find_exe, NULL);
  pool_queue_t* node = (pool_queue_t*)queue_node;
  node->next = node->prev = node;
  probe_node = node;
  mp_tls.pool_probing = true;
  mp_pool.probing = true;
  return true;
}

/* Cancellation disabled throughout (cancel.h): a warning, the loader's lock. probe_end,
 * watched and refused only store or read, and call nothing. */
bool mi_prof_pool_probe_begin(void* queue_node, size_t queue_offset) {
  int cancel = mp_cancel_off();
  bool ok = probe_begin(queue_node, queue_offset);
  mp_cancel_restore(cancel);
  return ok;
}

bool mi_prof_pool_probe_end(void) {
  mp_pool.probing = false;
  mp_tls.pool_probing = false;
  probe_node = NULL;
  return mp_pool.mutex != NULL;
}

bool mi_prof_pool_watched(void) { return mp_pool.mutex != NULL; }

uint64_t mi_prof_pool_refused(void) {
  return atomic_load_explicit(&refused, memory_order_relaxed);
}

