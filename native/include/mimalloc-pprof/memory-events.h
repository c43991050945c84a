/* mimalloc-pprof: the memory-events API of the original C system, in the preload library
 * `libmimalloc-pprof.so`. The names, types and meanings are the original's, so code written
 * for it builds unchanged (`#include <mimalloc/memory-events.h>` works too: that header
 * includes this one). It does not depend on profiling: tracking works with the profiler
 * stopped, and the profiler works with tracking off.
 *
 * Tracking
 *   Off by default. On with MIMALLOC_MEMORY_EVENTS=1 in the environment at start-up, or
 *   mi_memory_tracking_set_enabled(true) at any time (the same switch as the profiler's
 *   mi_prof_memory_events_enable). From the moment it is switched on, every allocation,
 *   free and reallocation on every thread is counted, in usable bytes (malloc_usable_size: a
 *   1000-byte request counts 1024 on mimalloc), and passed to the callbacks. What happened
 *   while tracking was off is not reconstructed: a block allocated before and freed after the
 *   switch lowers the live figures. For exact lifetime totals, switch it on before the first
 *   allocation (the environment variable does) and leave it on. While it is on, every call
 *   takes the library's slow path; while it is off, tracking costs nothing.
 *
 * Callbacks (mi_memory_set_callbacks)
 *   - run on the thread that allocated, freed or reallocated, after the operation completed,
 *     with no lock of mimalloc's or of this library held;
 *   - may call malloc, free and the rest: what a callback allocates or frees, and anything
 *     that happens on its thread while it runs, is counted but not reported (no callback
 *     nests), so the totals stay exact;
 *   - must be short and must not block: every allocation of the program waits for them;
 *   - must stay valid, with their `args`, until replaced or cleared (NULL table). A table
 *     being replaced may still be in use by a callback that started just before.
 *
 * Visitor (mi_memory_visit_live_allocations)
 *   Best effort, with mimalloc's public API only: it walks the calling thread's default heap
 *   (mimalloc before 3.2.6, which removed it from the API) and the calling thread's heap of
 *   sampled blocks (mi_heap_visit_blocks). It does not see
 *   blocks owned by other threads' heaps, blocks of heaps the program made itself
 *   (mi_heap_new), or, on mimalloc 2.x, blocks freed by another thread that this thread has
 *   not collected yet (they are reported as live). The visitor must not allocate, free or
 *   call into mimalloc while the walk is under way, and must not keep or dereference the
 *   addresses after it returns: another thread may free them at any moment.
 *
 * Unwrapped allocations (mi_unwrapped_*)
 *   Straight from the operating system (one mmap each, page granular), never through malloc:
 *   for instrumentation that must not recurse into the allocator, such as a callback that
 *   needs scratch memory. Not counted by tracking, not seen by the profiler. Their pointers
 *   go only to mi_unwrapped_free and mi_unwrapped_realloc, never to free, and the reverse.
 */
#ifndef MIMALLOC_PPROF_MEMORY_EVENTS_H
#define MIMALLOC_PPROF_MEMORY_EVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "profile.h"
/* The original's header includes mimalloc's, so code written for it may use mi_malloc and
 * the rest without including it itself. */
#if defined(__has_include)
#if __has_include(<mimalloc.h>)
#include <mimalloc.h>
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum mi_memory_change_kind_e {
  MI_MEMORY_ALLOCATE,     /* malloc, calloc, realloc(NULL, n), aligned forms, operator new */
  MI_MEMORY_FREE,         /* free, realloc(p, 0), operator delete */
  MI_MEMORY_RESIZE,       /* realloc(p, n), p and n not 0, moved or in place */
  MI_MEMORY_CHANGE_COUNT,
} mi_memory_change_kind_t;

typedef struct mi_memory_change_s {
  mi_memory_change_kind_t kind;
  uint64_t total_bytes;  /* live usable bytes counted after this change (all threads) */
  int64_t delta_bytes;   /* what this change did to them: > 0 allocate or grow, < 0 free or shrink */
  uint64_t request_size; /* the size asked for; 0 for a free */
} mi_memory_change_t;

typedef void(mi_memory_change_fun)(const mi_memory_change_t* change, void* arg);

typedef struct mi_memory_callbacks_s {
  mi_memory_change_fun* handlers[MI_MEMORY_CHANGE_COUNT]; /* NULL: none for that kind */
  void* args[MI_MEMORY_CHANGE_COUNT];
} mi_memory_callbacks_t;

/* Switches tracking; returns true (the switch cannot fail). */
mi_prof_export bool mi_memory_tracking_set_enabled(bool enabled);
mi_prof_export mi_prof_nodiscard bool mi_memory_tracking_is_enabled(void);
/* The same as mi_memory_tracking_is_enabled. */
mi_prof_export mi_prof_nodiscard bool mi_memory_tracking_enabled(void);

/* Installs, replaces or (NULL) clears the callback table, which is copied. Any time, any
 * thread; returns true. */
mi_prof_export bool mi_memory_set_callbacks(const mi_memory_callbacks_t* callbacks);

/* Tagged with its size and version, so that fields added later at the end leave programs
 * built against this version working: declare it with mi_memory_snapshot_t_decl. */
#define MI_MEMORY_SNAPSHOT_VERSION 1
typedef struct mi_memory_snapshot_s {
  size_t size;
  int version;
  uint64_t live_bytes;  /* usable bytes live now */
  uint64_t accum_bytes; /* usable bytes allocated; a reallocation adds what it grew by */
  uint64_t live_count;  /* blocks live now */
  uint64_t accum_count; /* blocks allocated (a reallocation is not one) */
} mi_memory_snapshot_t;
#define mi_memory_snapshot_t_decl(name)      \
  mi_memory_snapshot_t name = {0};           \
  name.size = sizeof(mi_memory_snapshot_t); \
  name.version = MI_MEMORY_SNAPSHOT_VERSION

/* Fills `out` with the counters since tracking was first switched on; false (nothing
 * written) for NULL, a size smaller than version 1's or an unknown version. The figures are
 * read one by one, not as one consistent cut, while other threads allocate. */
mi_prof_export mi_prof_nodiscard bool mi_memory_snapshot(mi_memory_snapshot_t* out);

/* Calls `visitor` for each live block found (see the head of this file); it returns false to
 * stop the walk. Returns false for a NULL visitor or when called from a callback or visitor,
 * true otherwise (a walk stopped early included). */
typedef bool(mi_memory_allocation_visit_fun)(void* allocation, size_t usable_size, void* arg);
mi_prof_export bool mi_memory_visit_live_allocations(mi_memory_allocation_visit_fun* visitor, void* arg);

/* A window (mimalloc-pprof's own, not the original's): from mi_prof_window_open to
 * mi_prof_window_close, every block allocated (any thread, reallocations' results included)
 * is remembered until it is freed; the close gives the usable bytes and number of those still
 * live: what the code that ran in between allocated and kept, whatever blocks from before it
 * freed. It needs tracking on (open returns false otherwise, or when the memory for its set
 * cannot be mapped) and kept on until the close. One window at a time: an open while one is
 * open starts it afresh. A window that met more than 393 216 live blocks stops noting new
 * ones and sets `overflowed`: its figures are then a lower bound. Read gives the figures so far
 * and leaves the window open. Read and close return false when no window was open (`out` is
 * still written: zeros). */
typedef struct mi_prof_window_s {
  uint64_t live_bytes;
  uint64_t live_count;
  bool overflowed;
} mi_prof_window_t;
mi_prof_export bool mi_prof_window_open(void);
mi_prof_export bool mi_prof_window_read(mi_prof_window_t* out);
mi_prof_export bool mi_prof_window_close(mi_prof_window_t* out);

/* `alignment`: 0 for 16 bytes, else a power of two up to 1 MiB (NULL with EINVAL otherwise;
 * below 16 gives 16). realloc: NULL allocates, a new size of 0 frees and returns NULL;
 * otherwise a new block with the contents copied, and on failure `p` is left as it was.
 * Passing any other pointer is undefined: the 32 bytes before it are read, and a pointer
 * whose header lacks the magic number is ignored with one line on stderr. */
mi_prof_export void* mi_unwrapped_malloc(size_t size, size_t alignment);
mi_prof_export void mi_unwrapped_free(void* p);
mi_prof_export void* mi_unwrapped_realloc(void* p, size_t new_size, size_t alignment);

#ifdef __cplusplus
}
#endif
#endif
