/* Internal assertions, in the spirit of mimalloc's mi_assert_internal: the rules that the
 * comments of this library state are also checked by a debug build (`make -C native DEBUG=1`,
 * which defines MP_DEBUG). A failed assertion writes file:line and the condition to stderr
 * with write(2) (no allocation, usable inside malloc) and aborts. In a production build every
 * assertion compiles to nothing, and its condition is not evaluated.
 *
 * Lock discipline, checked per thread in debug builds:
 *  - a profiler lock is taken only with mp_tls.in_profiler set (so that a signal handler or
 *    an allocation underneath never re-enters the profiler on a thread that holds a lock);
 *  - locks nest by increasing level; locks of one level nest only by increasing address (a
 *    shard family taken whole in index order: the fork handler's take-everything, the peak
 *    copy's bucket shards, the debug table check), and are released last-in, first-out. */
#ifndef MP_DEBUG_H
#define MP_DEBUG_H

#include <stdbool.h>

#if defined(MP_DEBUG) && MP_DEBUG
#define MP_DEBUG_ON 1
__attribute__((noreturn, visibility("hidden"))) void mp_assert_fail(const char* cond, const char* file, int line);
#define mp_assert(cond) ((cond) ? (void)0 : mp_assert_fail(#cond, __FILE__, __LINE__))
#else
#define MP_DEBUG_ON 0
#define mp_assert(cond) ((void)0)
#endif

/* Lock levels: a thread may take a lock only at a higher level than every lock it holds. */
typedef enum mp_lock_level_e {
  MP_LEVEL_LOADER = 1, /* mp_loader_lock: first in fork's prepare handler */
  MP_LEVEL_API,        /* the lifecycle lock */
  MP_LEVEL_THREADS,    /* the registry of threads (thread.c) */
  MP_LEVEL_RECORDS,    /* record shards (table.c) */
  MP_LEVEL_BUCKETS,    /* bucket shards (table.c): taken under a record shard, never the reverse */
  MP_LEVEL_CALLBACKS,  /* the memory-events callback table's writers (events.c), taken alone */
  MP_LEVEL_WINDOW,     /* the window's set (window.c): a leaf, after the callbacks' in fork's prepare */
  MP_LEVEL_UNWIND_SETUP, /* unwind.c: an object's setup (its search table read), under objects_writer */
  MP_LEVEL_UNWIND,     /* unwind.c's writers (the rule cache, a CIE memo, the pages pending): leaves,
                          each tried once, never waited for */
} mp_lock_level_t;

#endif
