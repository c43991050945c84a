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
 * Version differences (public API only): mi_arena_id_t is an int in 2.x and a pointer in
 * 3.x (the header we build against decides); 2.x heaps are bound to the thread that made
 * them and are deleted by mimalloc at that thread's exit, so 2.x gets one lazily created
 * heap per thread, dropped before the thread's destructors run (thread.c); 3.x heaps
 * allocate from any thread, so 3.x gets one heap. 3.x serves alignments up to 64 KiB
 * from an arena, 2.x up to 16 MiB; larger ones return NULL and the sample is dropped. */
#include <errno.h>
#include <mimalloc.h>

#include "internal.h"

#if MP_MI_MAJOR(MI_MALLOC_VERSION) >= 3
#define MP_HEAP_PER_THREAD 0
#else
#define MP_HEAP_PER_THREAD 1
#endif

static mp_lock_t arena_lock;
static atomic_bool arena_ready;
static mi_arena_id_t arena_id;
static uintptr_t arena_lo, arena_size;
#if !MP_HEAP_PER_THREAD
static mi_heap_t* shared_heap;
#endif

bool mp_arena_init(size_t bytes) {
  if (atomic_load(&arena_ready)) return true;
  mp_lock(&arena_lock);
  if (!atomic_load(&arena_ready)) {
    mi_arena_id_t id;
    int saved = errno;
    if (mi_reserve_os_memory_ex(bytes, false /*commit*/, false /*large*/, true /*exclusive*/, &id) == 0) {
      size_t size = 0;
      void* lo = mi_arena_area(id, &size);
      if (lo != NULL && size != 0) {
        arena_id = id;
        arena_lo = (uintptr_t)lo;
        arena_size = size;
#if !MP_HEAP_PER_THREAD
        shared_heap = mi_heap_new_in_arena(id);
        if (shared_heap != NULL)
#endif
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

static mi_heap_t* thread_heap(void) {
#if MP_HEAP_PER_THREAD
  mp_thread_t* t = &mp_tls;
  if (t->exiting) return NULL;
  if (t->heap == NULL) t->heap = mi_heap_new_in_arena(arena_id);
  return t->heap;
#else
  return shared_heap;
#endif
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
  /* mimalloc 2.x deletes this thread's heaps after the thread's destructors begin; from
   * here on the heap pointer may dangle, so it is forgotten. Its live blocks move to the
   * thread's backing heap and stay valid. */
  mp_tls.exiting = true;
  mp_tls.heap = NULL;
}

const char* mp_mimalloc_kind(void) { return MP_HEAP_PER_THREAD ? "per-thread arena heaps" : "shared arena heap"; }
