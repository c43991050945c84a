/* glibc's malloc introspection (mallinfo2, mallinfo, malloc_trim, malloc_stats, malloc_info,
 * mallopt), answered from mimalloc. Under the preload glibc's own arena holds nothing, so its
 * answers were wrong: arena=0 uordblks=0 with 100 MiB live, malloc_trim 0 without asking
 * mimalloc anything.
 *
 * Rules of this file:
 *  - these calls are never on an allocation path, so they may use stdio, which may allocate
 *    through the interposed malloc like any caller's allocation (the guard is clear);
 *  - only mimalloc API present in both 2.0.9 and 3.x is called: mi_process_info, mi_collect;
 *  - the profiler's locks are taken only through mp_stats_fill, with mp_tls.in_profiler set
 *    around it (as mi_prof_stats_get does); on a thread already inside the profiler (a libc
 *    call underneath profiler code) the estimate is skipped and the fallback used instead;
 *  - nothing is invented: a figure mimalloc cannot give is 0, or for bytes in use the
 *    documented upper bound below;
 *  - like the rest of the malloc family, none of them is a cancellation point: each runs with
 *    cancellation disabled (cancel.h), since mallinfo2 takes the table's locks and
 *    malloc_stats/malloc_info write with stdio (glibc's own malloc_stats marks stderr
 *    not-cancellable while it prints). mallopt calls nothing.
 *
 * The numbers (struct mallinfo2; glibc's malloc.h and mallinfo(3) give each field's meaning):
 *  arena     "non-mmapped space allocated from system": mimalloc's committed bytes
 *            (mi_process_info's current_commit), what the allocator holds from the OS, in-use
 *            and free blocks together. mimalloc gets it all with mmap, but none of it is a
 *            per-block mapping in glibc's sense (hblks), so it is all arena.
 *            mimalloc's counter can fall behind: before 2.1.2 (Debian 12 ships 2.0.9) freeing
 *            a segment of an arena that allows decommit (the profiler's sample arena was
 *            one, reserved uncommitted, until 2026-12-03), subtracts its committed bytes twice
 *            (mi_segment_os_free, then _mi_arena_free's _mi_os_decommit), and 3.0.1 drifts
 *            down slightly too (a purged page used again is not counted again). So a
 *            negative counter reads 0, and `arena` is never below a known uordblks
 *            (sources 1 and 2 below): the lower bound that is certain.
 *  ordblks   number of free chunks: 0, not known (mimalloc keeps no global count).
 *  smblks    number of fastbin blocks: 0, mimalloc has no fastbins.
 *  hblks     number of mmapped regions, i.e. blocks that got their own mapping: 0. mimalloc
 *  hblkhd    has none of glibc's kind (a huge block gets a segment of its own, but no public
 *            API counts those, and their bytes are in `arena` already: counting them here too
 *            would break glibc's "system bytes incl. mmap = arena + hblkhd").
 *  usmblks   0: glibc documents it as "always 0, preserved for backwards compatibility"
 *            (malloc.h; mallinfo(3): "This field is unused, and is always 0"). The peak is
 *            reported where glibc reports one: malloc_info's <system type="max">.
 *  fsmblks   space in freed fastbin blocks: 0, no fastbins.
 *  uordblks  "total allocated space", bytes in use, from the best source there is:
 *             1. exact counters on (mp_events_on): mp_exact.live_bytes, the usable bytes of
 *                the blocks allocated since the counters were switched on and still live (a
 *                negative count, from blocks allocated before and freed after, reads 0);
 *             2. else the profiler running: its unbiased (Horvitz-Thompson) estimate of the
 *                live requested bytes, mp_stats_fill's estimated_live_bytes;
 *             3. else no better number exists: `arena` itself, the conservative upper bound
 *                (every byte in use is committed), so that fordblks reads 0: a caller that
 *                takes arena - uordblks as free space gets "nothing known to be free" rather
 *                than an invented figure.
 *  fordblks  "total free space": arena - uordblks, or 0.
 *  keepcost  "top-most, releasable space": 0, mimalloc has no top chunk.
 * mallinfo() is mallinfo2() with every field cast to int, as glibc does (it truncates).
 *
 * malloc_trim(pad): mi_collect(true); pad has no meaning for mimalloc (glibc honours it only
 * at the top of the main heap). Returns 1 if memory was actually released to the OS, i.e.
 * mimalloc's committed bytes went down across the call (mimalloc lowers the counter only when
 * it decommits: madvise or munmap), else 0: glibc's documented return.
 *
 * malloc_stats: glibc's text on stderr for one arena ("Arena 0:"), from the mallinfo2 numbers;
 * "max mmap regions/bytes" are 0, as hblks is. glibc casts the byte counts to unsigned int
 * (they wrap above 4 GiB); the same right-aligned %10 columns here carry the whole size_t.
 *
 * malloc_info(options, fp): glibc's XML for one heap, from the same numbers: <total
 * type="rest"> is the free bytes (count 0: not known, as ordblks), <system type="max"> the
 * peak commit, the address space the commit (glibc's own choice for its main arena), no
 * mmapped blocks. options != 0: -1 with errno EINVAL, as malloc_info(3) documents (glibc 2.36
 * itself returns the value EINVAL and leaves errno alone; a caller that checks for non-zero
 * sees the failure either way).
 *
 * mallopt: accepted and ignored, returns 1. Every glibc parameter (M_MMAP_THRESHOLD,
 * M_ARENA_MAX, M_TRIM_THRESHOLD, ...) tunes glibc's allocator, which the preload replaced;
 * mimalloc's tuning is its MIMALLOC_* environment. glibc returns 1 on success, and also for
 * an unknown parameter, since its switch has no failing default (mallopt(3), BUGS: "an
 * invalid value for param does not generate an error"); its 0 is for a value out of range
 * for a parameter it applies, and none applies here. Returning 0 would make programs that
 * check it (mallopt(M_ARENA_MAX, n) at startup, say) report a failure for a setting that
 * simply does not concern mimalloc. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <mimalloc.h>
#include <stdio.h>

#include "cancel.h"
#include "internal.h"

#ifndef __GLIBC__
/* musl's <malloc.h> has neither: glibc's layouts, so that a program built for them reads ours. */
struct mallinfo2 {
  size_t arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
struct mallinfo {
  int arena, ordblks, smblks, hblks, hblkhd, usmblks, fsmblks, uordblks, fordblks, keepcost;
};
#endif

#define EXPORT __attribute__((visibility("default")))

typedef struct mp_numbers_s {
  size_t arena;  /* what mimalloc holds from the OS (see the top of the file) */
  size_t peak;   /* its peak */
  size_t in_use; /* uordblks */
} mp_numbers_t;

/* mimalloc's committed bytes, signed: mimalloc's counter is an int64 that can go negative
 * (before 2.1.2, see the top of the file). */
static long long current_commit(long long* peak) {
  size_t elapsed, user, sys, rss, peak_rss, commit, peak_commit, faults;
  mi_process_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
  if (peak != NULL) *peak = (long long)peak_commit;
  return (long long)commit;
}

static void numbers(mp_numbers_t* n) {
  long long peak;
  long long commit = current_commit(&peak);
  n->arena = commit > 0 ? (size_t)commit : 0;
  bool known = false;
  if (atomic_load(&mp_events_on)) {
    long long live = atomic_load(&mp_exact.live_bytes);
    n->in_use = live > 0 ? (size_t)live : 0;
    known = true;
  } else {
    bool guard = mp_tls.in_profiler;
    if (atomic_load(&mp_state.running) && !guard) {
      mi_prof_stats_t s;
      mp_tls.in_profiler = true; /* mp_stats_fill takes the table's locks */
      mp_stats_fill(&s);
      mp_profiler_leave(&mp_tls, guard);
      /* stopped meanwhile: the table was being cleared, the estimate means nothing */
      if (s.running) {
        n->in_use = s.estimated_live_bytes > 0 ? (size_t)s.estimated_live_bytes : 0;
        known = true;
      }
    }
  }
  if (!known)
    n->in_use = n->arena; /* no better number: the upper bound (see the top of the file) */
  else if (n->in_use > n->arena)
    n->arena = n->in_use; /* the counter fell behind (see the top of the file): the lower bound */
  n->peak = peak > 0 && (size_t)peak > n->arena ? (size_t)peak : n->arena;
}

EXPORT struct mallinfo2 mallinfo2(void) {
  int cancel = mp_cancel_off();
  mp_numbers_t n;
  numbers(&n);
  mp_cancel_restore(cancel);
  struct mallinfo2 m = {0};
  m.arena = n.arena;
  m.uordblks = n.in_use;
  m.fordblks = n.arena > n.in_use ? n.arena - n.in_use : 0;
  return m;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo m;
  m.arena = (int)m2.arena;
  m.ordblks = (int)m2.ordblks;
  m.smblks = (int)m2.smblks;
  m.hblks = (int)m2.hblks;
  m.hblkhd = (int)m2.hblkhd;
  m.usmblks = (int)m2.usmblks;
  m.fsmblks = (int)m2.fsmblks;
  m.uordblks = (int)m2.uordblks;
  m.fordblks = (int)m2.fordblks;
  m.keepcost = (int)m2.keepcost;
  return m;
}
#pragma GCC diagnostic pop

EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  int cancel = mp_cancel_off();
  long long before = current_commit(NULL);
  mi_collect(true);
  long long after = current_commit(NULL);
  mp_cancel_restore(cancel);
  return after < before ? 1 : 0;
}

EXPORT void malloc_stats(void) {
  int cancel = mp_cancel_off();
  struct mallinfo2 m = mallinfo2();
  fprintf(stderr,
          "Arena 0:\n"
          "system bytes     = %10zu\n"
          "in use bytes     = %10zu\n"
          "Total (incl. mmap):\n"
          "system bytes     = %10zu\n"
          "in use bytes     = %10zu\n"
          "max mmap regions = %10u\n"
          "max mmap bytes   = %10lu\n",
          m.arena, m.uordblks, m.arena + m.hblkhd, m.uordblks + m.hblkhd, 0u, 0ul);
  mp_cancel_restore(cancel);
}

EXPORT int malloc_info(int options, FILE* fp) {
  if (options != 0) {
    errno = EINVAL;
    return -1;
  }
  int cancel = mp_cancel_off();
  mp_numbers_t n;
  numbers(&n);
  size_t free_bytes = n.arena > n.in_use ? n.arena - n.in_use : 0;
  /* count="0": the number of free blocks is not known (ordblks) */
  fprintf(fp,
          "<malloc version=\"1\">\n"
          "<heap nr=\"0\">\n"
          "<sizes>\n"
          "</sizes>\n"
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n"
          "<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n"
          "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</heap>\n"
          "<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
          "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
          "<total type=\"mmap\" count=\"0\" size=\"0\"/>\n"
          "<system type=\"current\" size=\"%zu\"/>\n"
          "<system type=\"max\" size=\"%zu\"/>\n"
          "<aspace type=\"total\" size=\"%zu\"/>\n"
          "<aspace type=\"mprotect\" size=\"%zu\"/>\n"
          "</malloc>\n",
          free_bytes, n.arena, n.peak, n.arena, n.arena, free_bytes, n.arena, n.peak, n.arena, n.arena);
  mp_cancel_restore(cancel);
  return 0;
}

EXPORT int mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}
