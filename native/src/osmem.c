/* Profiler memory. Everything the profiler keeps (records, buckets, snapshots) comes from
 * mmap here, never from the interposed malloc, and is counted against the budget set by
 * MIMALLOC_PROF_MAX_BYTES. Over budget an allocation fails and the caller drops the sample:
 * the application's allocation never fails because of the profiler. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

static atomic_size_t budget;  /* 0: unlimited */
static atomic_size_t held;

#define MP_PAGE 4096u
#define MP_CHUNK ((size_t)64 * 1024)

static size_t round_pages(size_t n) { return (n + MP_PAGE - 1) & ~(size_t)(MP_PAGE - 1); }

#ifdef MP_SANITIZE
/* Sanitizer test builds only (native/Makefile `sanitize`): the pages come from the sanitizer's
 * allocator, page-aligned and zeroed as from mmap, so that an access out of bounds or after
 * mp_os_free in the tables and writers is reported, and memory never released is a leak. */
#include <stdlib.h>
static void* os_map(size_t size, bool populate) {
  (void)populate;
  void* p = aligned_alloc(MP_PAGE, size);
  return p == NULL ? MAP_FAILED : memset(p, 0, size);
}
static void os_unmap(void* p, size_t size) {
  (void)size;
  free(p);
}
#else
static void* os_map(size_t size, bool populate) {
  return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | (populate ? MAP_POPULATE : 0), -1, 0);
}
static void os_unmap(void* p, size_t size) { munmap(p, size); }
#endif

void mp_os_set_budget(size_t max_bytes) { atomic_store(&budget, max_bytes); }

size_t mp_os_bytes(void) { return atomic_load_explicit(&held, memory_order_relaxed); }

static void* os_alloc(size_t size, bool budgeted, bool populate) {
  if (size == 0) return NULL;
  size = round_pages(size);
  size_t max = budgeted ? atomic_load_explicit(&budget, memory_order_relaxed) : 0;
  size_t before = atomic_fetch_add(&held, size);
  if (max != 0 && before + size > max) {
    atomic_fetch_sub(&held, size);
    return NULL;
  }
  void* p = os_map(size, populate);
  if (p == MAP_FAILED) {
    atomic_fetch_sub(&held, size);
    return NULL;
  }
  return p;
}

/* The tables' arrays are probed (read) before they are written. A read of a page that was
 * never touched maps the kernel's shared zero page, and the first write then replaces it,
 * which flushes that address from the TLB of every CPU running the process: an interprocessor
 * interrupt per page, measured as the largest single cost of a sample on Node (bench/README.md).
 * So their pages are made writable at once (MAP_POPULATE), as a write would have made them. */
void* mp_os_alloc(size_t size) { return os_alloc(size, true, true); }

/* Static tables that are read before they are written get the same treatment: their pages are
 * made writable at start, with MADV_POPULATE_WRITE (Linux 5.14), or else by a write to each
 * page that changes nothing. Whole pages: populating a page leaves whatever else is on it as
 * it was. Preserves errno. */
#if !defined(MADV_POPULATE_WRITE) && defined(__linux__)
#define MADV_POPULATE_WRITE 23 /* the kernel's value (Linux 5.14); musl 1.2.3's headers lack the name */
#endif
void mp_prewrite(void* p, size_t n) {
  if (n == 0) return;
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(MP_PAGE - 1), hi = round_pages((uintptr_t)p + n);
  int saved = errno;
#ifdef MADV_POPULATE_WRITE
  bool done = madvise((void*)lo, hi - lo, MADV_POPULATE_WRITE) == 0;
#else
  bool done = false;
#endif
  uintptr_t word = ((uintptr_t)p + 3) & ~(uintptr_t)3; /* a word of the table on each of its pages */
  for (uintptr_t a = word; !done && a < (uintptr_t)p + n; a = (a & ~(uintptr_t)(MP_PAGE - 1)) + MP_PAGE)
    __atomic_fetch_add((uint32_t*)a, 0, __ATOMIC_RELAXED);
  errno = saved;
}

/* For a dump's own short-lived buffers: a profile must stay writable once the budget that
 * limits what is kept is full. Still counted in mp_os_bytes while held. */
void* mp_os_alloc_transient(size_t size) { return os_alloc(size, false, false); }

void mp_os_free(void* p, size_t size) {
  if (p == NULL || size == 0) return;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_LEAK")) return; /* the memory gate's control: nothing is ever released */
#endif
  size = round_pages(size);
  os_unmap(p, size);
  atomic_fetch_sub(&held, size);
}

/* Each chunk starts with {next, size}; the payload follows. */
typedef struct chunk_s {
  struct chunk_s* next;
  size_t size;
} chunk_t;

void* mp_bump_alloc(mp_bump_t* bump, size_t size) {
  size = (size + 15) & ~(size_t)15;
  if (bump->cur == NULL || (size_t)(bump->end - bump->cur) < size) {
    size_t want = size + sizeof(chunk_t) + 16;
    if (want < MP_CHUNK) want = MP_CHUNK;
    chunk_t* c = os_alloc(want, true, false); /* written before read: its pages are made as they are used */
    if (c == NULL) return NULL;
    c->size = round_pages(want);
    c->next = bump->chunks;
    bump->chunks = c;
    bump->cur = (char*)c + ((sizeof(chunk_t) + 15) & ~(size_t)15);
    bump->end = (char*)c + c->size;
  }
  void* p = bump->cur;
  bump->cur += size;
  return p;
}

void mp_bump_release(mp_bump_t* bump) {
  chunk_t* c = bump->chunks;
  while (c != NULL) {
    chunk_t* next = c->next;
    mp_os_free(c, c->size);
    c = next;
  }
  memset(bump, 0, sizeof(*bump));
}
