/* resident.c's calls around the system calls that take mappings away (interpose.c's munmap and
 * mremap). A range is marked before the call, with a ticket that names the call, and taken out
 * of the record after it only if it still carries that ticket: a mapping another thread made
 * at the freed address in between carries none, so it stays (see resident.c, "Invariants"). */
#ifndef MP_RESIDENT_H
#define MP_RESIDENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Before munmap(p, len): marks the recorded ranges in [p, p + len rounded up to pages). The
 * result is passed to mp_resident_unmap_end after the call; 0: nothing to do after it. */
uint64_t mp_resident_unmap_begin(void* p, size_t len);
/* After it: `unmapped` (the call succeeded) takes the marked ranges out, else unmarks them. */
void mp_resident_unmap_end(uint64_t ticket, void* p, size_t len, bool unmapped);

/* mremap's state between the two calls, on the caller's stack (nothing in here allocates):
 * what the old range holds (owners, by offset) is copied before the call, since another
 * thread may record a fresh mapping there as soon as the kernel frees it. */
#define MP_REMAP_PIECES 8
typedef struct mp_remap_s {
  bool active;    /* false: the record is left as it was (refused arguments, lock not to be had) */
  bool dontunmap; /* MREMAP_DONTUNMAP: the old range stays mapped */
  bool cut_after; /* test builds: the old order (MP_TEST_RESIDENT_CUT_AFTER) */
  bool tail_known; /* the old range's last page is recorded, by tail_owner: a growth is its */
  uint64_t ticket; /* the marks on the old range; 0: none */
  uintptr_t old, old_len, new_len; /* page-rounded */
  uintptr_t tail_owner;
  uintptr_t lost; /* recorded bytes of the old range past the pieces: counted untracked if moved */
  uint32_t pieces;
  struct {
    uintptr_t lo, hi, owner; /* offsets into the old range, ascending, adjacent ones of one owner merged */
  } piece[MP_REMAP_PIECES];
} mp_remap_t;

/* Before mremap(old, old_len, new_len, flags, ...). */
void mp_resident_remap_begin(mp_remap_t* st, void* old, size_t old_len, size_t new_len, int flags);
/* After it, with its result (MAP_FAILED: the call failed). */
void mp_resident_remap_end(const mp_remap_t* st, void* result);

#endif
