/* Which of the process's resident memory is mimalloc's: the regions it mapped from the OS,
 * and how much of them is resident now. The RSS breakdown (src/node/rss.ts) needs it to
 * tell the allocator's memory from V8's heap, thread stacks and other anonymous mappings,
 * all of which look alike in /proc/self/smaps; mimalloc's own "committed" figure is no
 * guide (2.x counts memory as committed when it maps it, long before it is touched).
 *
 * mimalloc (2.x and 3.x) maps and unmaps through libc's mmap and munmap, called through its
 * PLT, so the interposed names (interpose.c) see every call. A mapping whose caller's return
 * address lies in libmimalloc's image is recorded here; any munmap, and any MAP_FIXED
 * mapping, takes its range out of the record, whoever calls it (that memory is no longer
 * mimalloc's). Residency is asked of the kernel with mincore(2) when a figure is wanted.
 *
 * Invariants:
 *  - a slot's `lo` is 0 (empty), BUSY (being changed by one thread) or the region's start;
 *    `hi` is written only by the thread that moved `lo` to BUSY, and published by the
 *    release store of `lo`. Readers take (lo, hi) and re-check lo: a region changing under a
 *    reader is skipped or counted once, never twice;
 *  - recorded regions never overlap: mapping a range that overlaps a record is only possible
 *    with MAP_FIXED, which takes the range out first;
 *  - no lock and no allocation: mmap and munmap may be called from anywhere (a signal
 *    handler, a fork child, the loader), and the recording must not be able to block them.
 * A region the table cannot hold (more than REGION_SLOTS at once, i.e. terabytes of 2.x
 * segments) is counted in `untracked`, so the figures say they are incomplete. */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <mimalloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#define REGION_SLOTS 4096u
#define EMPTY ((uintptr_t)0)
#define BUSY ((uintptr_t)1)

typedef struct region_s {
  _Atomic(uintptr_t) lo;
  uintptr_t hi;
} region_t;

static region_t regions[REGION_SLOTS];
static atomic_ullong untracked;

/* libmimalloc's image, learned at its first mapping: 1 known, -1 cannot be known here. */
static atomic_int image_known;
static uintptr_t image_lo, image_hi;

static bool learn_image(void) {
  int known = atomic_load_explicit(&image_known, memory_order_acquire);
  if (known != 0) return known > 0;
#if MP_UNWIND_CFI
  /* lock-free and allocation-free: safe inside the loader and in a signal handler */
  struct dl_find_object info;
  if (_dl_find_object((void*)(uintptr_t)&mi_version, &info) == 0) {
    image_lo = (uintptr_t)info.dlfo_map_start;
    image_hi = (uintptr_t)info.dlfo_map_end;
    atomic_store_explicit(&image_known, 1, memory_order_release);
    return true;
  }
#endif
  atomic_store_explicit(&image_known, -1, memory_order_release);
  return false;
}

static bool claim(region_t* r, uintptr_t expected) {
  return atomic_compare_exchange_strong_explicit(&r->lo, &expected, BUSY, memory_order_acquire, memory_order_relaxed);
}

static void record(uintptr_t lo, uintptr_t hi) {
  unsigned start = (unsigned)(lo >> 21) % REGION_SLOTS;
  for (unsigned n = 0; n < REGION_SLOTS; n++) {
    region_t* r = &regions[(start + n) % REGION_SLOTS];
    if (atomic_load_explicit(&r->lo, memory_order_relaxed) != EMPTY || !claim(r, EMPTY)) continue;
    r->hi = hi;
    atomic_store_explicit(&r->lo, lo, memory_order_release);
    return;
  }
  atomic_fetch_add_explicit(&untracked, hi - lo, memory_order_relaxed);
}

/* [lo, hi) is no longer mimalloc's: every record loses its overlap with it. */
static void forget(uintptr_t lo, uintptr_t hi) {
  for (unsigned i = 0; i < REGION_SLOTS; i++) {
    region_t* r = &regions[i];
    for (;;) {
      uintptr_t rlo = atomic_load_explicit(&r->lo, memory_order_acquire);
      if (rlo <= BUSY) break; /* empty, or another thread's change (never of this range) */
      uintptr_t rhi = r->hi;
      if (rhi <= lo || rlo >= hi) break;
      if (!claim(r, rlo)) continue;
      bool left = rlo < lo, right = rhi > hi;
      if (left) {
        r->hi = lo;
        atomic_store_explicit(&r->lo, rlo, memory_order_release);
        if (right) record(hi, rhi);
      } else if (right) {
        atomic_store_explicit(&r->lo, hi, memory_order_release);
      } else {
        atomic_store_explicit(&r->lo, EMPTY, memory_order_release);
      }
      break;
    }
  }
}

void mp_resident_mapped(void* p, size_t len, int flags, const void* caller) {
  if (p == MAP_FAILED || len == 0) return;
  uintptr_t lo = (uintptr_t)p, hi = lo + len;
  if ((flags & MAP_FIXED) != 0) forget(lo, hi);
  if (learn_image() && (uintptr_t)caller - image_lo < image_hi - image_lo) record(lo, hi);
}

void mp_resident_unmapped(void* p, size_t len) {
  if (len == 0) return;
  forget((uintptr_t)p, (uintptr_t)p + len);
}

/* Resident bytes of [lo, hi): mincore over page-aligned steps. A range unmapped meanwhile
 * counts what was resident before it went. */
static uint64_t resident_in(uintptr_t lo, uintptr_t hi, unsigned char* vec, size_t vec_len, size_t page) {
  uint64_t bytes = 0;
  lo &= ~(page - 1);
  while (lo < hi) {
    size_t pages = (hi - lo + page - 1) / page;
    if (pages > vec_len) pages = vec_len;
    if (mincore((void*)lo, pages * page, vec) == 0)
      for (size_t i = 0; i < pages; i++) bytes += (vec[i] & 1) ? page : 0;
    lo += pages * page;
  }
  return bytes;
}

#define VEC_LEN ((size_t)1 << 16) /* pages per mincore call: 256 MiB of 4 KiB pages */

bool mi_prof_resident_get(mi_prof_resident_t* out) {
  if (out == NULL || out->size != sizeof(*out) || out->version != MI_PROF_RESIDENT_VERSION) {
    errno = EINVAL;
    return false;
  }
  uint32_t size = out->size, version = out->version;
  *out = (mi_prof_resident_t){.size = size, .version = version};
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char* vec = mmap(NULL, VEC_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (vec == MAP_FAILED) return false;
  out->allocator_known = atomic_load_explicit(&image_known, memory_order_acquire) > 0;
  for (unsigned i = 0; i < REGION_SLOTS; i++) {
    uintptr_t lo = atomic_load_explicit(&regions[i].lo, memory_order_acquire);
    if (lo <= BUSY) continue;
    uintptr_t hi = regions[i].hi;
    if (atomic_load_explicit(&regions[i].lo, memory_order_acquire) != lo || hi <= lo) continue;
    out->allocator_mapped += hi - lo;
    out->allocator_resident += resident_in(lo, hi, vec, VEC_LEN, page);
  }
  out->allocator_untracked = atomic_load_explicit(&untracked, memory_order_relaxed);
  uintptr_t arena_lo, arena_size;
  mp_arena_range(&arena_lo, &arena_size);
  if (arena_size > 0) out->arena_resident = resident_in(arena_lo, arena_lo + arena_size, vec, VEC_LEN, page);
  out->profiler_bytes = mp_os_bytes();
  munmap(vec, VEC_LEN);
  return true;
}
