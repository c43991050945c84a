/* The sample arena: an exclusive mimalloc arena that holds every sampled block, so that
 * free() recognises a sampled pointer with one range check instead of a lookup.
 *
 * Invariants:
 *  - every live sample record (table.c) points into the arena; the converse need not hold
 *    (mimalloc 2.x may reclaim abandoned arena pages for ordinary blocks), which is why a
 *    range hit is confirmed in the record table;
 *  - the arena is reserved once and never released (mimalloc has no API for it), and the
 *    sampled heap is never deleted or destroyed, so blocks stay valid whoever frees them.
 *
 *  - a heap allocates only on the thread that made it: mimalloc 2.x, and 3.x before 3.2.6,
 *    say so ("can only allocate from the same thread that created it") and take no lock on
 *    their page queues, so a heap shared between threads corrupts them (Node crashed so on
 *    3.0.1). Every version therefore gets one lazily made heap per thread;
 *  - mimalloc deletes a thread's heaps in its pthread key destructor; the profiler's key
 *    destructor runs before it (thread.c) and forgets the heap, so no sample ever reaches
 *    a deleted heap. The heap's live blocks stay valid (2.x moves them to the backing heap,
 *    3.x abandons their pages) and any thread may free them.
 *
 * Version differences (public API only): mi_arena_id_t is an int in 2.x and a pointer in
 * 3.x (the header we build against decides). 3.x serves alignments up to 64 KiB and blocks
 * up to 32 MiB from an arena, 2.x alignments up to 16 MiB; beyond, the arena heap returns
 * NULL and the sample is dropped. */
#define _GNU_SOURCE
#include <errno.h>
#include <mimalloc.h>
#include <sys/mman.h>
#include <time.h>

#include "internal.h"

static mp_lock_t arena_lock = MP_LOCK_INIT(MP_LEVEL_ARENA);
static atomic_bool arena_ready;
static mi_arena_id_t arena_id;
static uintptr_t arena_lo, arena_size;

/* Where the arena goes: low in the address space, below mimalloc's own segments (2.x hints
 * them from 2 TiB up; 3.x and the kernel map from the top down), so that free's filter sends
 * nearly every pointer on with one compare against the arena's end (interpose.c). The base is
 * random among LOW_SLOTS aligned places, as mimalloc randomises its own hints. */
#define LOW_FROM ((uintptr_t)256 << 30)
#define LOW_UNTIL ((uintptr_t)1792 << 30)
#define LOW_ALIGN ((uintptr_t)64 << 20) /* a multiple of both majors' segment alignment */

static void* reserve_low(size_t bytes) {
#if UINTPTR_MAX > 0xffffffffu && defined(MAP_FIXED_NOREPLACE)
  if (bytes % LOW_ALIGN != 0 || bytes > LOW_UNTIL - LOW_FROM) return NULL;
  uintptr_t slots = (LOW_UNTIL - LOW_FROM - bytes) / LOW_ALIGN + 1; /* bases from LOW_FROM on */
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t r = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts;
  for (int tries = 0; tries < 4; tries++) {
    r = (r ^ (r >> 31)) * 0x9E3779B97F4A7C15ull;
    void* hint = (void*)(LOW_FROM + (uintptr_t)(r % slots) * LOW_ALIGN);
    void* p = mmap(hint, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == hint) return p;
    if (p != MAP_FAILED) munmap(p, bytes); /* a kernel before 4.17 took the address as a hint */
  }
#else
  (void)bytes;
#endif
  return NULL;
}

bool mp_arena_init(size_t bytes) {
  if (atomic_load(&arena_ready)) return true;
  mp_lock(&arena_lock);
  if (!atomic_load(&arena_ready)) {
    mi_arena_id_t id;
    int saved = errno;
    bytes = (bytes + LOW_ALIGN - 1) & ~(LOW_ALIGN - 1);
    void* low = reserve_low(bytes);
    bool managed = low != NULL && mi_manage_os_memory_ex(low, bytes, false /*committed*/, false /*large*/, true /*zero*/,
                                                         -1 /*numa*/, true /*exclusive*/, &id);
    if (low != NULL && !managed) munmap(low, bytes);
    if (managed || mi_reserve_os_memory_ex(bytes, false /*commit*/, false /*large*/, true /*exclusive*/, &id) == 0) {
      size_t size = 0;
      void* lo = mi_arena_area(id, &size);
      if (lo != NULL && size != 0) {
        arena_id = id;
        arena_lo = (uintptr_t)lo;
        arena_size = size;
        atomic_store(&arena_ready, true);
      }
    }
    errno = saved;
  }
  mp_unlock(&arena_lock);
  return atomic_load(&arena_ready);
}

bool mp_arena_ready(void) { return atomic_load_explicit(&arena_ready, memory_order_acquire); }

void mp_arena_range(uintptr_t* lo, uintptr_t* size) {
  bool ready = mp_arena_ready();
  *lo = ready ? arena_lo : 0;
  *size = ready ? arena_size : 0;
}

#ifdef MP_TEST_HOOKS
/* The mimalloc gate's control: one heap shared by every thread, as this library once had. */
static mi_heap_t* shared_heap(void) {
  static _Atomic(mi_heap_t*) shared;
  mi_heap_t* h = atomic_load(&shared);
  if (h == NULL) {
    mi_heap_t* made = mi_heap_new_in_arena(arena_id);
    if (atomic_compare_exchange_strong(&shared, &h, made)) h = made;
  }
  return h;
}
#endif

static mi_heap_t* thread_heap(void) {
  mp_thread_t* t = &mp_tls;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SHARED_HEAP")) return shared_heap();
#endif
  if (t->exiting) return NULL;
  /* Only a registered thread learns of its end (thread.c): no heap without it. */
  if (!t->registered) mp_thread_register();
  if (!t->registered) return NULL;
  if (t->heap == NULL) t->heap = mi_heap_new_in_arena(arena_id);
  return t->heap;
}

void* mp_arena_alloc(size_t size, size_t align, bool zero) {
  if (!mp_arena_ready()) return NULL;
  mi_heap_t* heap = thread_heap();
  if (heap == NULL) return NULL;
  int saved = errno;
  void* p;
  if (align != 0) p = zero ? mi_heap_zalloc_aligned(heap, size, align) : mi_heap_malloc_aligned_at(heap, size, align, 0);
  else p = zero ? mi_heap_zalloc(heap, size) : mi_heap_malloc(heap, size);
  errno = saved;
  if (p != NULL && (uintptr_t)p - arena_lo >= arena_size) {
    /* Not expected from an exclusive arena, but a record outside it would never be freed. */
    mi_free(p);
    return NULL;
  }
  return p;
}

void mp_arena_thread_exit(void) {
  /* mimalloc deletes this thread's heaps in a key destructor that runs after this one;
   * from here on the heap pointer may dangle, so it is forgotten. */
  mp_tls.exiting = true;
  mp_tls.heap = NULL;
}
