/* A window: the blocks allocated while it is open and still live (mi_prof_window_*, for a
 * test's memory budget: what the test allocated and kept, whatever the process's other
 * threads free or keep from before).
 *
 * Rules:
 *  - only the exact counters' slow paths (sampler.c) note blocks, so a window needs memory
 *    events on: mi_prof_window_open refuses otherwise, and the caller keeps them on until the
 *    close;
 *  - the members are a set of (address, usable bytes): open addressing with linear probing and
 *    backward-shift deletion (no tombstones, so a lookup ends at the first empty slot), in
 *    memory mapped for it, never malloc's (it is noted from inside malloc);
 *  - `bytes` and `count` are the members' sums, changed only with the set, under `lock`;
 *  - `lock` is a leaf: taken inside a sampler section around the set's own work only;
 *  - a block leaves the set before the allocator may hand its address out again (free and
 *    realloc note it before they call mimalloc), so an address is never a member twice; the
 *    one free the slow paths do not see, a signal handler's inside a sampler section (counted
 *    nowhere, as by the exact counters), leaves a stale member, which the address's next
 *    allocation replaces;
 *  - a full set notes no more (`overflowed`), and the close says so: its figures are then a
 *    lower bound. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "cancel.h"
#include "internal.h"
#include "mimalloc-pprof/memory-events.h"

#define WINDOW_SLOTS ((size_t)1 << 19) /* 8 MiB of slots, touched only as they fill */
#define WINDOW_MAX_MEMBERS (WINDOW_SLOTS / 4 * 3)

typedef struct slot_s {
  uintptr_t address; /* 0: empty */
  uint64_t bytes;
} slot_t;

atomic_bool mp_window_open;
static mp_lock_t lock = MP_LOCK_INIT(MP_LEVEL_WINDOW);
static slot_t* slots; /* WINDOW_SLOTS while open, NULL otherwise */
static uint64_t bytes, count;
static bool overflowed;

static size_t home(uintptr_t address) {
  uint64_t h = (uint64_t)address * UINT64_C(0x9E3779B97F4A7C15);
  return (size_t)(h >> 45) & (WINDOW_SLOTS - 1); /* the product's high bits: 2^19 slots */
}

void mp_window_note_alloc(const void* p, size_t usable) {
  mp_assert(mp_tls.in_profiler);
  mp_lock(&lock);
  if (slots != NULL && !overflowed) {
    if (count >= WINDOW_MAX_MEMBERS) {
      overflowed = true;
    } else {
      size_t i = home((uintptr_t)p);
      while (slots[i].address != 0 && slots[i].address != (uintptr_t)p) i = (i + 1) & (WINDOW_SLOTS - 1);
      if (slots[i].address == (uintptr_t)p) { /* its free went unseen (see the head): replaced */
        bytes -= slots[i].bytes;
        count--;
      }
      slots[i] = (slot_t){(uintptr_t)p, usable};
      bytes += usable;
      count++;
    }
  }
  mp_unlock(&lock);
}

/* Forgets `p` if it is a member; returns its bytes (0 if it was not). */
uint64_t mp_window_note_free(const void* p) {
  mp_assert(mp_tls.in_profiler);
  uint64_t was = 0;
  mp_lock(&lock);
  if (slots != NULL) {
    size_t i = home((uintptr_t)p);
    while (slots[i].address != 0 && slots[i].address != (uintptr_t)p) i = (i + 1) & (WINDOW_SLOTS - 1);
    if (slots[i].address != 0) {
      was = slots[i].bytes;
      bytes -= was;
      count--;
      /* backward shift: each later entry of the run moves into the hole unless its home lies
       * cyclically in (hole, j], where it is already reachable */
      size_t hole = i;
      for (size_t j = (i + 1) & (WINDOW_SLOTS - 1); slots[j].address != 0; j = (j + 1) & (WINDOW_SLOTS - 1)) {
        size_t h = home(slots[j].address);
        bool reachable = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
        if (reachable) continue;
        slots[hole] = slots[j];
        hole = j;
      }
      slots[hole] = (slot_t){0, 0};
    }
  }
  mp_unlock(&lock);
  return was;
}

bool mi_prof_window_open(void) {
  if (!atomic_load(&mp_events_on)) return false;
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  slot_t* fresh = mp_os_alloc_transient(WINDOW_SLOTS * sizeof(slot_t)); /* zeroed */
  slot_t* old = NULL;
  if (fresh != NULL) {
    mp_lock(&lock);
    old = slots;
    slots = fresh;
    bytes = count = 0;
    overflowed = false;
    atomic_store(&mp_window_open, true);
    mp_unlock(&lock);
  }
  if (old != NULL) mp_os_free(old, WINDOW_SLOTS * sizeof(slot_t));
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  return fresh != NULL;
}

/* The figures so far into `out`; with `close`, the window ends. Whether one was open. */
static bool window_report(mi_prof_window_t* out, bool close) {
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  mp_lock(&lock);
  slot_t* old = slots;
  if (out != NULL) *out = (mi_prof_window_t){.live_bytes = bytes, .live_count = count, .overflowed = overflowed};
  if (close) {
    slots = NULL;
    bytes = count = 0;
    atomic_store(&mp_window_open, false);
  }
  mp_unlock(&lock);
  if (close && old != NULL) mp_os_free(old, WINDOW_SLOTS * sizeof(slot_t));
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  return old != NULL;
}

bool mi_prof_window_read(mi_prof_window_t* out) { return window_report(out, false); }
bool mi_prof_window_close(mi_prof_window_t* out) { return window_report(out, true); }

/* fork: taken last in the prepare handler (a leaf), so the child never inherits it held or
 * the set half-changed; the child keeps the window (its blocks are its own copies). */
void mp_window_fork_prepare(void) { mp_lock(&lock); }
void mp_window_fork_parent(void) { mp_unlock(&lock); }
void mp_window_fork_child(void) { mp_lock_reset(&lock); }
