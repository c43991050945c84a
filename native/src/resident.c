/* Who mapped the process's anonymous memory, and how much of it is resident: the RSS
 * breakdown (src/node/rss.cts) needs it to tell mimalloc's memory from V8's heaps, a
 * library's own mappings and thread stacks, all of which look alike in /proc/self/smaps.
 * mimalloc's own "committed" figure is no guide (2.x counts memory as committed when it maps
 * it, long before it is touched), and V8's heap statistics see one isolate and not the pages
 * it keeps pooled between collections.
 *
 * mimalloc (2.x and 3.x), V8 and libraries map and unmap through libc's mmap and munmap,
 * called through their PLT, so the interposed names (interpose.c) see every such call. Each
 * mapping is recorded with its owner: the object (executable or library) whose code called
 * mmap, by its load address. Any munmap, and any new mapping over an old one, takes the
 * range out of the record, whoever calls it; mremap carries the owners of what it moves or
 * grows. Residency is asked of the kernel with mincore(2) when a figure is wanted. Mappings
 * made by raw system calls (glibc's own thread stacks, the loader, a runtime that skips libc)
 * are not recorded: they stay "other". Lengths are rounded up to pages, as the kernel does.
 *
 * Invariants:
 *  - the record holds disjoint ranges sorted by start, under `record_lock` (record_check);
 *  - a range leaves the record only while its addresses cannot belong to a newer mapping.
 *    A new mapping is recorded after its system call, so its range is recorded only once the
 *    kernel has made it: cutting what was there before is always right. A call that frees
 *    addresses (munmap, mremap) cannot cut after its system call: by then another thread's
 *    mmap may have been given the addresses and recorded them (defect n7). Nor before it: the
 *    call may fail (EINVAL, ENOMEM). So before the call the freed ranges are marked with a
 *    ticket naming the call (split at the call's bounds so that a mark covers no more than it
 *    frees), and after it only ranges still carrying that ticket are taken out (or unmarked,
 *    if it failed). A mapping recorded in between carries ticket 0 and stays; a marked range
 *    it overlaps is cut by it like any other (its addresses were freed). Marked ranges still
 *    count as mapped: until the call returns they may be;
 *  - calls of the program that race on the same addresses (an munmap of a range another
 *    thread is mapping with MAP_FIXED) have no order the record could know: the last one to
 *    reach the record wins;
 *  - nothing in here allocates, and the lock is never waited on for long: a thread that
 *    finds it held by itself (a signal handler that maps, nested in a recording: the lock
 *    word names its holder) or held past SPIN_LIMIT (a child forked without the fork
 *    handlers while another thread held it) gives up, and the mapping is
 *    counted in `untracked` instead (or left recorded after its munmap, which mincore then
 *    finds gone, and which the next mapping at that address replaces). So mmap and munmap
 *    can never block on the profiler, in any thread, handler or child;
 *  - a measurement copies the record out under the lock and asks mincore with it released. */
#define _GNU_SOURCE
#include <errno.h>
#include <link.h>
#include <mimalloc.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "resident.h"

#define BLOCK 256u    /* ranges per block */
#define BLOCKS 256u   /* 65 536 ranges in all: 1.5 MiB of address space, touched as it fills */
#define SPIN_LIMIT 100000u /* tries before giving up on the lock (~ms) */

typedef struct region_s {
  uintptr_t lo, hi;
  uintptr_t owner; /* load address of the object that mapped it; 0 unknown */
  uint64_t ticket; /* 0, or the munmap/mremap in flight that frees it (see the invariants) */
} region_t;

/* The record: blocks of ranges sorted by start, and the blocks in order, so that an insert or
 * a removal moves at most one block's ranges (V8 alone maps a 256 KiB page at a time: a large
 * heap is tens of thousands of ranges). Every block in `order` holds at least one range. */
typedef struct block_s {
  uint32_t n;
  region_t r[BLOCK];
} block_t;

/* The record's lock: 0 free, else the owning thread's token (the address of its own TLS
 * byte), so a signal handler nested in a recording on the same thread sees that at once. */
static _Atomic(uintptr_t) record_lock;
static block_t* blocks; /* BLOCKS of them, mapped at the first record */
static uint16_t order[BLOCKS];
static uint32_t nblocks;
static uint16_t spare[BLOCKS]; /* blocks not in `order` */
static uint32_t nspare;
static size_t record_len;
static uint64_t tickets;   /* the last ticket handed out */
static uint32_t in_flight; /* calls between their marks and their sweep (a forked child's check) */
static atomic_ullong untracked;
static __thread char thread_token __attribute__((tls_model("initial-exec")));

/* Straight to the kernel: these run inside the interposed mmap. */
static void* raw_map(size_t bytes) {
  return (void*)syscall(SYS_mmap, NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}
static void raw_unmap(void* p, size_t bytes) { syscall(SYS_munmap, p, bytes); }

/* The kernel's page size (from the auxiliary vector: no system call, no lock). */
static uintptr_t page_size(void) {
  static uintptr_t page;
  if (page == 0) {
    uintptr_t p = (uintptr_t)getauxval(AT_PAGESZ);
    page = p != 0 ? p : 4096;
  }
  return page;
}

/* [p, p + len) as the kernel takes it: len rounded up to pages. False when the kernel refuses
 * the range (p not page-aligned, len 0 or past the address space: EINVAL), or, with
 * `rounded` false, when len is 0. */
static bool page_range(const void* p, size_t len, bool rounded, uintptr_t* lo, uintptr_t* hi) {
  uintptr_t page = page_size(), a = (uintptr_t)p;
  if (len == 0 || (rounded && (a & (page - 1)) != 0)) return false;
  uintptr_t size = rounded ? (len + page - 1) & ~(page - 1) : len;
  if (size < len || a + size < a) return false;
  *lo = a;
  *hi = a + size;
  return true;
}

static bool record_enter(void) {
  uintptr_t me = (uintptr_t)&thread_token;
  for (unsigned spins = 0;; spins++) {
    uintptr_t held = atomic_load_explicit(&record_lock, memory_order_relaxed);
    if (held == me) return false; /* nested in this thread's own recording */
    uintptr_t expected = 0;
    if (held == 0 && atomic_compare_exchange_weak_explicit(&record_lock, &expected, me, memory_order_acquire, memory_order_relaxed))
      return true;
    if (spins >= SPIN_LIMIT) return false;
    if (spins >= 64) sched_yield();
  }
}

static void record_leave(void) { atomic_store_explicit(&record_lock, 0, memory_order_release); }

static bool record_init(void) {
  if (blocks != NULL) return true;
  void* m = raw_map(BLOCKS * sizeof(block_t));
  if (m == MAP_FAILED) return false;
  blocks = (block_t*)m;
  for (uint32_t i = 0; i < BLOCKS; i++) spare[i] = (uint16_t)(BLOCKS - 1 - i);
  nspare = BLOCKS;
  return true;
}

static block_t* block_at(uint32_t b) { return &blocks[order[b]]; }

/* Where the first range whose end is above `addr` is, or would go: block b (nblocks when
 * past every range), index i. */
static void locate(uintptr_t addr, uint32_t* b_out, uint32_t* i_out) {
  uint32_t lo = 0, hi = nblocks;
  while (lo < hi) { /* the first block whose last range ends above addr */
    uint32_t mid = lo + (hi - lo) / 2;
    block_t* blk = block_at(mid);
    if (blk->r[blk->n - 1].hi <= addr) lo = mid + 1;
    else hi = mid;
  }
  *b_out = lo;
  *i_out = 0;
  if (lo == nblocks) return;
  block_t* blk = block_at(lo);
  uint32_t l = 0, h = blk->n;
  while (l < h) {
    uint32_t mid = l + (h - l) / 2;
    if (blk->r[mid].hi <= addr) l = mid + 1;
    else h = mid;
  }
  *i_out = l;
}

static void drop_block(uint32_t b) {
  spare[nspare++] = order[b];
  memmove(&order[b], &order[b + 1], (nblocks - b - 1) * sizeof(order[0]));
  nblocks--;
}

/* Inserts r before position (b, i) (b == nblocks: at the end). False when full. */
static bool insert_at(uint32_t b, uint32_t i, region_t r) {
  if (nblocks == 0) {
    if (nspare == 0) return false;
    order[0] = spare[--nspare];
    nblocks = 1;
    block_at(0)->n = 0;
    b = 0;
    i = 0;
  } else if (b == nblocks) {
    b = nblocks - 1;
    i = block_at(b)->n;
  }
  block_t* blk = block_at(b);
  if (blk->n == BLOCK) { /* split: the upper half moves to a new block after this one */
    if (nspare == 0) return false;
    uint16_t fresh = spare[--nspare];
    block_t* upper = &blocks[fresh];
    upper->n = BLOCK / 2;
    memcpy(upper->r, &blk->r[BLOCK / 2], (BLOCK / 2) * sizeof(region_t));
    blk->n = BLOCK / 2;
    memmove(&order[b + 2], &order[b + 1], (nblocks - b - 1) * sizeof(order[0]));
    order[b + 1] = fresh;
    nblocks++;
    if (i > BLOCK / 2) {
      blk = upper;
      i -= BLOCK / 2;
    }
  }
  memmove(&blk->r[i + 1], &blk->r[i], (blk->n - i) * sizeof(region_t));
  blk->r[i] = r;
  blk->n++;
  record_len++;
  return true;
}

/* Under the lock: no range keeps any part of [lo, hi). */
static void cut(uintptr_t lo, uintptr_t hi) {
  uint32_t b, i;
  locate(lo, &b, &i);
  while (b < nblocks) {
    block_t* blk = block_at(b);
    if (i == blk->n) {
      b++;
      i = 0;
      continue;
    }
    region_t r = blk->r[i];
    if (r.lo >= hi) return;
    if (r.lo < lo && r.hi > hi) { /* [lo, hi) inside: split */
      blk->r[i].hi = lo;
      region_t upper = r; /* a marked range's parts keep its ticket: both are freed by its call */
      upper.lo = hi;
      if (!insert_at(b, i + 1, upper))
        atomic_fetch_add_explicit(&untracked, r.hi - hi, memory_order_relaxed);
      return;
    }
    if (r.lo < lo) {
      blk->r[i].hi = lo;
      i++;
    } else if (r.hi > hi) {
      blk->r[i].lo = hi;
      return;
    } else {
      memmove(&blk->r[i], &blk->r[i + 1], (blk->n - i - 1) * sizeof(region_t));
      blk->n--;
      record_len--;
      if (blk->n == 0) {
        drop_block(b);
        i = 0;
      }
    }
  }
}

/* Debug builds: the record's invariants (sorted, disjoint, no empty block, counts agree):
 * the blocks' bounds at every change, every range at every 64th. */
static void record_check(void) {
#if MP_DEBUG
  static unsigned calls;
  bool full = (++calls & 63) == 0;
  size_t total = 0;
  uintptr_t last = 0;
  for (uint32_t b = 0; b < nblocks; b++) {
    block_t* blk = block_at(b);
    mp_assert(blk->n > 0 && blk->n <= BLOCK);
    mp_assert(blk->r[0].lo >= last && blk->r[0].lo < blk->r[blk->n - 1].hi);
    if (full)
      for (uint32_t i = 0; i < blk->n; i++) {
        mp_assert(blk->r[i].lo < blk->r[i].hi && blk->r[i].lo >= last);
        last = blk->r[i].hi;
      }
    last = blk->r[blk->n - 1].hi;
    total += blk->n;
  }
  mp_assert(total == record_len && nblocks + nspare == BLOCKS);
#endif
}

static uintptr_t owner_of(const void* caller) {
#if MP_UNWIND_CFI
  /* lock-free and allocation-free: safe inside the loader and in a signal handler */
  struct dl_find_object info;
  if (_dl_find_object((void*)caller, &info) == 0) return (uintptr_t)info.dlfo_map_start;
#else
  (void)caller;
#endif
  return 0;
}

#ifdef MP_TEST_HOOKS
/* Test builds: MP_TEST_* switches that each restore one old behaviour (the gates' controls):
 *  MP_TEST_RECORD_NO_CUT         munmap leaves the record alone (the model test's control);
 *  MP_TEST_RESIDENT_CUT_AFTER    munmap and mremap cut what they free after the system call;
 *  MP_TEST_RESIDENT_NO_ROUND     munmap's length is taken as given, not rounded up to pages;
 *  MP_TEST_RESIDENT_NO_REMAP     mremap leaves the record alone (as before it was interposed);
 *  MP_TEST_RESIDENT_FIXED_NO_CUT a file, shared or huge-page mapping leaves the record alone. */
#define HOOK(name) mp_test_hook(name)
#else
#define HOOK(name) false
#endif

/* munmap's ticket in the old order (MP_TEST_RESIDENT_CUT_AFTER): no marks, a cut afterwards. */
#define TICKET_CUT_AFTER UINT64_MAX

/* Under the lock: takes out the range at (b, i), which then names the next one (or i == n). */
static void remove_at(uint32_t* b, uint32_t* i) {
  block_t* blk = block_at(*b);
  memmove(&blk->r[*i], &blk->r[*i + 1], (blk->n - *i - 1) * sizeof(region_t));
  blk->n--;
  record_len--;
  if (blk->n == 0) {
    drop_block(*b);
    *i = 0;
  }
}

/* Under the lock: no range straddles addr (one that did is split in two, both keeping its
 * owner and ticket). False when the record is full (nothing changed then). */
static bool split_at(uintptr_t addr) {
  uint32_t b, i;
  locate(addr, &b, &i);
  if (b == nblocks) return true;
  block_t* blk = block_at(b);
  region_t r = blk->r[i];
  if (r.lo >= addr) return true;
  region_t upper = r;
  upper.lo = addr;
  blk->r[i].hi = addr;
  if (insert_at(b, i + 1, upper)) return true;
  blk->r[i].hi = r.hi;
  return false;
}

/* Under the lock, [lo, hi) split at both ends: every range in it is marked t (t == 0: left
 * as it is) and, with st, its owner copied out by offset. Returns how many ranges there are. */
static uint32_t mark(uintptr_t lo, uintptr_t hi, uint64_t t, mp_remap_t* st) {
  uint32_t b, i, n = 0;
  locate(lo, &b, &i);
  for (; b < nblocks; b++, i = 0) {
    block_t* blk = block_at(b);
    for (; i < blk->n; i++) {
      region_t* r = &blk->r[i];
      if (r->lo >= hi) return n;
      n++;
      if (t != 0) r->ticket = t;
      if (st == NULL) continue;
      uintptr_t plo = r->lo - st->old, phi = r->hi - st->old;
      uint32_t k = st->pieces;
      if (k > 0 && st->piece[k - 1].hi == plo && st->piece[k - 1].owner == r->owner) st->piece[k - 1].hi = phi;
      else if (k < MP_REMAP_PIECES) {
        st->piece[k].lo = plo;
        st->piece[k].hi = phi;
        st->piece[k].owner = r->owner;
        st->pieces++;
      } else st->lost += phi - plo;
      if (r->hi == hi) {
        st->tail_known = true;
        st->tail_owner = r->owner;
      }
    }
  }
  return n;
}

/* Under the lock: the ranges in [lo, hi) still marked t are taken out (remove) or unmarked.
 * A range marked t lies inside [lo, hi): it was split there when marked, and whatever cut it
 * since only made it smaller. */
static void sweep(uintptr_t lo, uintptr_t hi, uint64_t t, bool remove) {
  uint32_t b, i;
  locate(lo, &b, &i);
  while (b < nblocks) {
    block_t* blk = block_at(b);
    if (i == blk->n) {
      b++;
      i = 0;
      continue;
    }
    region_t* r = &blk->r[i];
    if (r->lo >= hi) return;
    if (r->ticket != t) i++;
    else if (!remove) {
      r->ticket = 0;
      i++;
    } else remove_at(&b, &i);
  }
}

/* Under the lock, [lo, hi) cut: records it for owner (counted untracked when full). */
static void record_range(uintptr_t lo, uintptr_t hi, uintptr_t owner) {
  uint32_t b, i;
  locate(lo, &b, &i);
  if (!insert_at(b, i, (region_t){.lo = lo, .hi = hi, .owner = owner}))
    atomic_fetch_add_explicit(&untracked, hi - lo, memory_order_relaxed);
}

void mp_resident_mapped(void* p, size_t len, int flags, const void* caller) {
  uintptr_t lo, hi;
  if (p == MAP_FAILED || !page_range(p, len, true, &lo, &hi)) return;
  /* Private anonymous memory only: files, shared memory and huge pages (hugetlbfs: smaps
   * names them /anon_hugepage) are named in /proc/self/smaps, where the breakdown counts them.
   * A huge-page mapping takes whole huge pages: at least 2 MiB on x86-64, the only place
   * this is called, when the flags do not say. */
  bool huge = (flags & MAP_HUGETLB) != 0;
  bool anonymous = (flags & MAP_ANONYMOUS) != 0 && (flags & MAP_SHARED) == 0 && !huge;
  if (huge) {
    unsigned shift = ((unsigned)flags >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK;
    uintptr_t size = shift != 0 ? (uintptr_t)1 << shift : (uintptr_t)2 << 20;
    uintptr_t rounded = lo + ((hi - lo + size - 1) & ~(size - 1));
    if (rounded > hi) hi = rounded;
  }
  /* A new mapping replaces whatever the record still had there, MAP_FIXED or not (a stale
   * range, or one marked by a call that freed it: see the invariants). */
  uintptr_t owner = anonymous ? owner_of(caller) : 0;
  if (!record_enter()) {
    if (anonymous) atomic_fetch_add_explicit(&untracked, hi - lo, memory_order_relaxed);
    return;
  }
  if (!anonymous) {
    if (blocks != NULL && !HOOK("MP_TEST_RESIDENT_FIXED_NO_CUT")) cut(lo, hi);
    record_leave();
    return;
  }
  if (record_init()) {
    cut(lo, hi);
    record_range(lo, hi, owner);
    record_check();
  } else {
    atomic_fetch_add_explicit(&untracked, hi - lo, memory_order_relaxed);
  }
  record_leave();
}

/* After a successful munmap, by address: the old order, which races (see the invariants);
 * only the test builds' control MP_TEST_RESIDENT_CUT_AFTER still calls it. */
void mp_resident_unmapped(void* p, size_t len) {
  uintptr_t lo, hi;
  if (blocks == NULL || !page_range(p, len, !HOOK("MP_TEST_RESIDENT_NO_ROUND"), &lo, &hi) || !record_enter()) return;
  cut(lo, hi);
  record_check();
  record_leave();
}

uint64_t mp_resident_unmap_begin(void* p, size_t len) {
  if (HOOK("MP_TEST_RECORD_NO_CUT")) return 0;
  if (HOOK("MP_TEST_RESIDENT_CUT_AFTER")) return TICKET_CUT_AFTER;
  uintptr_t lo, hi;
  /* nothing recorded yet, a range the kernel refuses, or the lock not to be had: the range
   * stays recorded (mincore finds it gone; the next mapping there replaces it) */
  if (blocks == NULL || !page_range(p, len, !HOOK("MP_TEST_RESIDENT_NO_ROUND"), &lo, &hi) || !record_enter()) return 0;
  uint64_t t = 0;
  if (split_at(lo) && split_at(hi)) {
    if (mark(lo, hi, tickets + 1, NULL) > 0) {
      t = ++tickets;
      in_flight++;
    }
  } else {
    cut(lo, hi); /* the record is full: cut now (a call that then fails leaves the range out) */
  }
  record_check();
  record_leave();
  return t;
}

void mp_resident_unmap_end(uint64_t ticket, void* p, size_t len, bool unmapped) {
  if (ticket == TICKET_CUT_AFTER) {
    if (unmapped) mp_resident_unmapped(p, len);
    return;
  }
  uintptr_t lo, hi;
  /* the lock not to be had: the marked ranges stay, as after a munmap that found it held */
  if (ticket == 0 || !page_range(p, len, !HOOK("MP_TEST_RESIDENT_NO_ROUND"), &lo, &hi) || !record_enter()) return;
  sweep(lo, hi, ticket, unmapped);
  in_flight--;
  record_check();
  record_leave();
}

void mp_resident_remap_begin(mp_remap_t* st, void* old, size_t old_len, size_t new_len, int flags) {
  st->active = false;
  uintptr_t lo = (uintptr_t)old, hi = lo, nlo, nhi;
  if (blocks == NULL || HOOK("MP_TEST_RESIDENT_NO_REMAP")) return;
  /* old_len 0 asks for a second mapping of shared pages (never recorded): the old range is
   * no range of the record's, only the new one's place matters */
  if (!page_range(old, new_len, true, &nlo, &nhi) || (old_len != 0 && !page_range(old, old_len, true, &lo, &hi))) return;
  *st = (mp_remap_t){.old = lo,
                     .old_len = hi - lo,
                     .new_len = nhi - nlo,
                     .dontunmap = (flags & MREMAP_DONTUNMAP) != 0,
                     .cut_after = HOOK("MP_TEST_RESIDENT_CUT_AFTER")};
  if (!record_enter()) return;
  /* split where the call may free: the old range's ends, and where a shrink in place cuts it */
  bool shrink = st->new_len < st->old_len;
  if (split_at(lo) && split_at(hi) && (!shrink || split_at(lo + st->new_len))) {
    /* MREMAP_DONTUNMAP frees nothing: its old range is only read */
    uint64_t t = st->dontunmap || st->cut_after ? 0 : tickets + 1;
    if (mark(lo, hi, t, st) > 0 && t != 0) {
      st->ticket = ++tickets;
      in_flight++;
    }
    st->active = true;
  }
  record_check();
  record_leave();
}

void mp_resident_remap_end(const mp_remap_t* st, void* result) {
  if (!st->active || (result == MAP_FAILED && st->ticket == 0) || !record_enter()) return;
  uintptr_t old = st->old, n = (uintptr_t)result;
  uint64_t t = st->ticket;
  uintptr_t keep = st->new_len < st->old_len ? st->new_len : st->old_len;
  if (result == MAP_FAILED) {
    sweep(old, old + st->old_len, t, false);
  } else if (n == old) { /* in place: the head stays, a shrunk tail is freed, a grown one is new */
    if (st->cut_after) {
      if (keep < st->old_len) cut(old + keep, old + st->old_len);
    } else if (t != 0) {
      sweep(old, old + keep, t, false);
      sweep(old + keep, old + st->old_len, t, true);
    }
  } else { /* moved: the old range freed (unless MREMAP_DONTUNMAP), its pieces at n */
    if (st->cut_after && !st->dontunmap) cut(old, old + st->old_len);
    else if (t != 0) sweep(old, old + st->old_len, t, true);
    cut(n, n + keep);
    for (uint32_t k = 0; k < st->pieces && st->piece[k].lo < keep; k++)
      record_range(n + st->piece[k].lo, n + (st->piece[k].hi < keep ? st->piece[k].hi : keep), st->piece[k].owner);
    if (st->lost != 0) atomic_fetch_add_explicit(&untracked, st->lost, memory_order_relaxed);
  }
  if (result != MAP_FAILED && st->new_len > st->old_len) { /* grown: the last page's owner's */
    cut(n + st->old_len, n + st->new_len);
    if (st->tail_known) record_range(n + st->old_len, n + st->new_len, st->tail_owner);
  }
  if (t != 0) in_flight--;
  record_check();
  record_leave();
}

static __thread bool forking __attribute__((tls_model("initial-exec"))); /* this thread's fork holds the record */
void mp_resident_fork_prepare(void) { forking = record_enter(); }
void mp_resident_fork_parent(void) {
  if (forking) record_leave();
}
/* Other threads' munmap and mremap calls may have been between their marks and their sweeps:
 * those threads are not in the child. Whether each call was made before the fork, the kernel
 * tells: mincore fails with ENOMEM on an unmapped page, and a marked range is freed whole or
 * not at all (it was split at the call's bounds). A range still mapped is unmarked. (A range
 * an mremap moved before the fork is not recorded at its new place in the child.) */
void mp_resident_fork_child(void) {
  atomic_store_explicit(&record_lock, 0, memory_order_relaxed);
  if (in_flight == 0 || blocks == NULL) return;
  int saved = errno;
  unsigned char v;
  uint32_t b = 0, i = 0;
  while (b < nblocks) {
    block_t* blk = block_at(b);
    if (i == blk->n) {
      b++;
      i = 0;
      continue;
    }
    region_t* r = &blk->r[i];
    if (r->ticket == 0) i++;
    else if (syscall(SYS_mincore, r->lo, page_size(), &v) == 0 || errno != ENOMEM) {
      r->ticket = 0;
      i++;
    } else remove_at(&b, &i);
  }
  in_flight = 0;
  errno = saved;
}

/* Resident bytes of [lo, hi) by mincore, page-aligned steps of at most vec_len pages. A range
 * unmapped meanwhile counts what mincore saw of it. */
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

/* The record, copied out (with the lock released afterwards); *len ranges. NULL if empty or
 * unavailable. Free with raw_unmap(copy, bytes). */
static region_t* copy_record(size_t* len, size_t* bytes) {
  *len = 0;
  *bytes = 0;
  if (blocks == NULL || !record_enter()) return NULL;
  size_t size = (record_len > 0 ? record_len : 1) * sizeof(region_t);
  region_t* copy = raw_map(size);
  if (copy != MAP_FAILED) {
    size_t n = 0;
    for (uint32_t b = 0; b < nblocks; b++) {
      memcpy(&copy[n], block_at(b)->r, block_at(b)->n * sizeof(region_t));
      n += block_at(b)->n;
    }
    *len = n;
    *bytes = size;
  }
  record_leave();
  return copy == MAP_FAILED ? NULL : copy;
}

/* Adds region r's figures to *mapped and *resident. */
static void add_region(const region_t* r, unsigned char* vec, size_t page, uint64_t* mapped, uint64_t* resident) {
  *mapped += r->hi - r->lo;
  if (vec != MAP_FAILED) *resident += resident_in(r->lo, r->hi, vec, VEC_LEN, page);
}

size_t mi_prof_mapping_owners(mi_prof_mapping_owner_t* out, size_t cap) {
  size_t n, bytes;
  region_t* regions = copy_record(&n, &bytes);
  if (regions == NULL) return 0;
  unsigned char* vec = raw_map(VEC_LEN);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t owners = 0;
  for (size_t i = 0; i < n; i++) {
    size_t k = 0;
    while (k < owners && k < cap && out[k].object != regions[i].owner) k++;
    if (k == owners) {
      owners++;
      if (k >= cap) continue; /* counted, not described */
      out[k] = (mi_prof_mapping_owner_t){.object = regions[i].owner};
    }
    if (k >= cap) continue;
    out[k].regions++;
    add_region(&regions[i], vec, page, &out[k].mapped, &out[k].resident);
  }
  if (vec != MAP_FAILED) raw_unmap(vec, VEC_LEN);
  raw_unmap(regions, bytes);
  return owners;
}

/* The library's static tables (.bss: the unwind cache, the free filter's counts, the shards'
 * first arrays), whose bounds the linker defines for each object: anonymous memory the loader
 * mapped, which the record never saw. Its initialised data (.data) is a mapping of its file,
 * which smaps names by path. */
extern char __bss_start[] __attribute__((visibility("hidden")));
extern char _end[] __attribute__((visibility("hidden")));

static uint64_t profiler_resident(const region_t* regions, size_t n, unsigned char* vec, size_t page) {
  uint64_t mapped = 0, resident = 0;
  if (vec == MAP_FAILED) return 0;
  uintptr_t self = owner_of((const void*)(uintptr_t)&mi_prof_resident_get);
  /* owners unknown, or the record not to be had now: what it holds, nearly all of it resident */
  if (self == 0 || regions == NULL) resident += mp_os_bytes();
  for (size_t i = 0; self != 0 && regions != NULL && i < n; i++)
    if (regions[i].owner == self) add_region(&regions[i], vec, page, &mapped, &resident);
  if (blocks != NULL) /* this record, mapped past the interposed mmap */
    resident += resident_in((uintptr_t)blocks, (uintptr_t)blocks + BLOCKS * sizeof(block_t), vec, VEC_LEN, page);
  uintptr_t bss = ((uintptr_t)__bss_start + page - 1) & ~(page - 1); /* its first page may be .data's */
  if (bss < (uintptr_t)_end) resident += resident_in(bss, (uintptr_t)_end, vec, VEC_LEN, page);
  return resident;
}

uint64_t mp_profiler_resident(void) {
  size_t n = 0, bytes;
  unsigned char* vec = raw_map(VEC_LEN);
  region_t* regions = copy_record(&n, &bytes);
  uint64_t resident = profiler_resident(regions, n, vec, (size_t)sysconf(_SC_PAGESIZE));
  if (regions != NULL) raw_unmap(regions, bytes);
  if (vec != MAP_FAILED) raw_unmap(vec, VEC_LEN);
  return resident;
}

static void resident_fill(mi_prof_resident_t* out, bool with_self) {
  uintptr_t mimalloc = owner_of((const void*)(uintptr_t)&mi_version);
  out->allocator_known = mimalloc != 0;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  unsigned char* vec = raw_map(VEC_LEN);
  size_t n = 0, bytes;
  region_t* regions = mimalloc != 0 || with_self ? copy_record(&n, &bytes) : NULL;
  for (size_t i = 0; mimalloc != 0 && regions != NULL && i < n; i++) /* however many other owners there are */
    if (regions[i].owner == mimalloc) add_region(&regions[i], vec, page, &out->allocator_mapped, &out->allocator_resident);
  if (with_self) out->profiler_resident = profiler_resident(regions, n, vec, page);
  if (regions != NULL) raw_unmap(regions, bytes);
  out->untracked = atomic_load_explicit(&untracked, memory_order_relaxed);
  if (vec != MAP_FAILED) raw_unmap(vec, VEC_LEN);
  out->profiler_bytes = mp_os_bytes();
}

/* Callers built against version 1 pass the struct without its version-2 field. */
#define RESIDENT_V1_SIZE offsetof(mi_prof_resident_t, profiler_resident)

_Static_assert(MI_PROF_RESIDENT_VERSION == 2, "mp_struct_version knows versions 1 and 2");
bool mi_prof_resident_get(mi_prof_resident_t* out) {
  unsigned layout = mp_struct_version(out, sizeof(*out), RESIDENT_V1_SIZE);
  if (layout == 0) return false;
  uint32_t size = out->size, version = out->version;
  mi_prof_resident_t full = {.size = size, .version = version};
  resident_fill(&full, layout == 2);
  memcpy(out, &full, size);
  return true;
}

