/* The profile's data: buckets (one per distinct stack and requested size) and the records
 * of live sampled blocks (block address -> bucket).
 *
 * Both tables are sharded, each shard behind its own spinlock, so samples taken on
 * different threads rarely meet; no lock is held while a stack is captured, and the locks
 * nest only as record shard then bucket shard (never the reverse).
 *
 * Buckets hold raw sampled counts. All samples in a bucket have the same size, so the
 * unsampling weight 1/p(size) is one number per bucket and a heap_v2 row built from a
 * bucket is size-homogeneous: pprof's per-row correction is then exact.
 * A bucket's `live` counts the records that point at it plus the adds under way, so a bucket
 * with live == 0 is unreachable from any record. Once it can no longer show in a profile (no
 * live sample and nothing cumulative: at once without MIMALLOC_PROF_ACCUM, at reset with it)
 * it is unlinked and its memory kept for the next bucket of the same depth: the profiler's
 * memory follows the live samples, not every (stack, size, thread) ever sampled, so threads
 * that come and go (each has its own buckets) do not grow it. Bucket memory is OS memory from
 * per-shard bump allocators, released at stop.
 *
 * The peak: the table keeps a running estimate of the bytes in use (Σ size · w over live
 * records). When it passes the last peak by a step (1/32 of it, at least 1 MiB), one sample
 * path copies every bucket's `live` into its `peak`, under all bucket locks: the number of
 * copies is logarithmic in the peak (about 32 · ln(peak / 1 MiB)), and the peak profile is
 * within a step, and the running estimate's lag (below), of the true high-water mark of the
 * estimate. The peak's bytes are summed from the copied counts, so the figure and the
 * profile of the peak always agree. A bucket whose `peak` is not 0
 * still shows (it is kept from retiring) until a later copy clears it. */
#include <string.h>
#include <time.h>

#include "fastmath.h"
#include "internal.h"

#define SHARDS 16u  /* bucket shards */
#define RSHARDS MP_RECORD_SHARDS /* record shards (RSHARDS + SHARDS locks are held at once at a fork) */
/* Each shard's first array is a small static one, and the next is a page: a profile of a heap
 * of a few hundred MiB at the default interval has a few hundred live records and buckets, so
 * a page per shard (RSHARDS + SHARDS of them) would be most of the profiler's memory. The
 * static arrays are written at start (mp_table_init), for the reason mp_os_alloc populates. */
#define BUCKET_INDEX_FIRST 64u
#define BUCKET_INDEX_PAGE 512u
#define RECORD_CAP_FIRST 16u
#define RECORD_CAP_PAGE 256u

typedef struct bucket_shard_s {
  mp_lock_t lock;
  mp_bucket_t** index;   /* chained hash index, power-of-two size */
  size_t index_cap;
  size_t count;
  mp_bump_t mem;
  struct mp_bucket_s* spare[MI_PROF_MAX_BT + 1]; /* retired buckets by depth, through `next` */
  char pad[64];
} bucket_shard_t;

typedef struct record_s {
  uintptr_t addr; /* 0: empty slot */
  /* the bucket, whose low bit (buckets are word-aligned) says that the block was rounded up
   * to a larger size class (mp_recorded_t) */
  uintptr_t tagged;
} record_t;

static inline mp_bucket_t* rec_bucket(const record_t* r) { return (mp_bucket_t*)(r->tagged & ~(uintptr_t)1); }
static inline mp_recorded_t rec_of(const record_t* r) { return (mp_recorded_t){rec_bucket(r)->size, (r->tagged & 1) != 0}; }
static inline uintptr_t rec_tag(mp_bucket_t* b, bool rounded) {
  mp_assert(((uintptr_t)b & 1) == 0);
  return (uintptr_t)b | (rounded ? 1 : 0);
}

typedef struct record_shard_s {
  mp_lock_t lock;
  record_t* slots;     /* open addressing, linear probing, backward-shift deletion */
  size_t cap;
  /* This shard's change to the estimate of bytes in use not yet added to est_live; read and
   * written under the lock only; |pending| < EST_FLUSH between critical sections. */
  int64_t pending;
  /* Heap bytes its live rounded records hold beyond their requests (mp_rounding_extra):
   * written under the lock, read by mp_table_rounding without it. */
  size_t rounding;
  char pad[64];
} record_shard_t;

/* The running estimate of bytes in use (Σ size · w over live records) is est_live plus every
 * shard's pending part: a shard adds its part to est_live, under its own lock, once the part
 * reaches ±EST_FLUSH, so threads that sample at a high rate (intervals under EST_FLUSH: at
 * larger ones every change is at least one interval and is added at once) do not all write
 * one cache line. Outside the shard locks est_live is then within RSHARDS * EST_FLUSH (1 MiB,
 * PEAK_MIN_STEP) of the estimate either way, and a peak is noticed at most that early or
 * late. Adding under the lock keeps every change inside what a clear or a fork sees. */
#define EST_FLUSH ((int64_t)16 << 10)
/* est_live and the peak's (bytes, CLOCK_REALTIME ns, the estimate that triggers the next copy,
 * copies taken). Relaxed: a copy may start a sample late. est_live has a line of its own. */
static _Alignas(64) _Atomic int64_t est_live;
static _Alignas(64) _Atomic int64_t peak_bytes;
static _Atomic uint64_t peak_ns;
static _Atomic size_t peak_rounding;
static _Atomic int64_t peak_next = (int64_t)1 << 20;
static atomic_ullong peak_copies;
static atomic_bool peak_busy;
#define PEAK_MIN_STEP ((int64_t)1 << 20)

static _Alignas(64) mp_bucket_t* index_first[SHARDS][BUCKET_INDEX_FIRST];

static bucket_shard_t bshards[SHARDS] = {[0 ... SHARDS - 1] = {.lock = MP_LOCK_INIT(MP_LEVEL_BUCKETS)}};
static record_shard_t rshards[RSHARDS] = {[0 ... RSHARDS - 1] = {.lock = MP_LOCK_INIT(MP_LEVEL_RECORDS)}};

/* A bucket's shard is its thread's (buckets are per thread): threads that sample at a high
 * rate then each take their own shard's lock, not one line that every thread writes. Thread
 * ids are mostly consecutive, so up to SHARDS threads rarely share one. Within the shard the
 * chain slot takes the hash's low bits. */
static inline unsigned bucket_shard_of(int32_t tid) { return (uint32_t)tid % SHARDS; }

double mp_weight(double size, double interval) {
  if (interval <= 1.0 || size <= 0.0) return 1.0;
  return 1.0 / mp_one_minus_exp_neg(size / interval);
}

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

static uint64_t hash_stack(size_t size, const uintptr_t* frames, unsigned depth, int32_t tid) {
  uint64_t h = mix(size + 0x9E3779B97F4A7C15ull) ^ mix((uint64_t)(uint32_t)tid);
  for (unsigned i = 0; i < depth; i++) h = mix(h ^ frames[i]) + i;
  return h;
}

/* A live sample's share of the estimate of bytes in use: size · w, in whole bytes. */
static int64_t estimate_of(size_t size) {
  return (int64_t)((double)size * mp_weight((double)size, (double)mp_state.interval) + 0.5);
}

/* ---- a shard's array: `first` elements in a static array, then a page's worth, then twice
 * as many at each growth ------------------------------------------------------------------- */
static size_t array_next_cap(size_t cap, size_t first, size_t page) { return cap == 0 ? first : cap == first ? page : cap * 2; }
static void* array_get(size_t cap, size_t first, void* first_array, size_t elem) {
  return cap == first ? first_array : mp_os_alloc(cap * elem);
}
/* The static first array is left empty for the shard's next start. */
static void array_put(void* a, size_t cap, size_t first, size_t elem) {
  if (cap == first) memset(a, 0, first * elem);
  else mp_os_free(a, cap * elem);
}

/* ---- buckets ----------------------------------------------------------------------------- */
static bool bucket_index_grow(bucket_shard_t* s) {
  size_t cap = array_next_cap(s->index_cap, BUCKET_INDEX_FIRST, BUCKET_INDEX_PAGE);
  mp_bucket_t** index = array_get(cap, BUCKET_INDEX_FIRST, index_first[s - bshards], sizeof(*index));
  if (index == NULL) return s->index_cap != 0; /* keep chaining in the old index */
  for (size_t i = 0; i < s->index_cap; i++) {
    mp_bucket_t* b = s->index[i];
    while (b != NULL) {
      mp_bucket_t* next = b->next;
      size_t j = b->hash & (cap - 1);
      b->next = index[j];
      index[j] = b;
      b = next;
    }
  }
  if (s->index_cap != 0) array_put(s->index, s->index_cap, BUCKET_INDEX_FIRST, sizeof(*index));
  s->index = index;
  s->index_cap = cap;
  return true;
}

/* Under the shard lock: the bucket for (size, frames, tid), or NULL. */
static mp_bucket_t* bucket_find(const bucket_shard_t* s, uint64_t h, size_t size, const uintptr_t* frames,
                                unsigned depth, int32_t tid) {
  if (s->index_cap == 0) return NULL;
  for (mp_bucket_t* b = s->index[h & (s->index_cap - 1)]; b != NULL; b = b->next)
    if (b->hash == h && b->size == size && b->depth == depth && b->tid == tid &&
        memcmp(b->frames, frames, depth * sizeof(uintptr_t)) == 0)
      return b;
  return NULL;
}

/* Under the shard lock: the bucket for (size, frames, tid), created if absent; NULL on budget. */
static mp_bucket_t* bucket_get(bucket_shard_t* s, uint64_t h, size_t size, const uintptr_t* frames, unsigned depth,
                               int32_t tid, const char thread[16], uint64_t jit_map_bytes) {
  if (s->index_cap == 0 && !bucket_index_grow(s)) return NULL;
  mp_bucket_t* b = bucket_find(s, h, size, frames, depth, tid);
  if (b != NULL) return b;
  if (s->count >= s->index_cap) (void)bucket_index_grow(s);
  b = s->spare[depth];
  if (b != NULL) {
    s->spare[depth] = b->next;
    b->live = b->allocs = b->peak = 0;
  } else if ((b = mp_bump_alloc(&s->mem, sizeof(mp_bucket_t) + depth * sizeof(uintptr_t))) == NULL) {
    return NULL;
  }
  b->hash = h;
  b->size = size;
  b->estimate = estimate_of(size); /* once per bucket: the interval is fixed until the stop clears it */
  b->rounding = mp_rounding_extra(size);
  b->depth = depth;
  b->tid = tid;
  memcpy(b->thread, thread, sizeof(b->thread));
  b->jit_map_bytes = jit_map_bytes;
  memcpy(b->frames, frames, depth * sizeof(uintptr_t));
  size_t j = h & (s->index_cap - 1);
  b->next = s->index[j];
  s->index[j] = b;
  s->count++;
  return b;
}

/* Under the shard lock: whether b can still show in a profile (the snapshot's rule). */
static bool bucket_shows(const mp_bucket_t* b) { return b->live != 0 || b->peak != 0 || (mp_state.accum && b->allocs != 0); }

/* Under the shard lock: b, already unlinked from the index, is kept for reuse. */
static void bucket_retire(bucket_shard_t* s, mp_bucket_t* b) {
  b->next = s->spare[b->depth];
  s->spare[b->depth] = b;
  s->count--;
}

/* ---- records ------------------------------------------------------------------------------ */
static size_t record_home(uintptr_t addr, size_t cap) { return mix(addr) & (cap - 1); }

static record_t record_first[RSHARDS][RECORD_CAP_FIRST];

static bool record_grow(record_shard_t* s) {
  size_t cap = array_next_cap(s->cap, RECORD_CAP_FIRST, RECORD_CAP_PAGE);
  record_t* slots = array_get(cap, RECORD_CAP_FIRST, record_first[s - rshards], sizeof(record_t));
  if (slots == NULL) return false;
  for (size_t i = 0; i < s->cap; i++) {
    if (s->slots[i].addr == 0) continue;
    size_t j = record_home(s->slots[i].addr, cap);
    while (slots[j].addr != 0) j = (j + 1) & (cap - 1);
    slots[j] = s->slots[i];
  }
  if (s->cap != 0) array_put(s->slots, s->cap, RECORD_CAP_FIRST, sizeof(record_t));
  s->slots = slots;
  s->cap = cap;
  return true;
}

/* A record's shard comes from its block's 64 KiB slice of the heap, not the block itself:
 * both mimalloc majors give a slice to one thread's heap at a time, so threads sampling at a
 * high rate mostly lock shards no other thread is using, where a hash of the address would
 * send every thread to every shard's line. */
static record_shard_t* record_shard(uintptr_t addr) { return &rshards[mp_record_shard_of(addr)]; }
mp_shard_count_t mp_record_counts[RSHARDS]; /* a shard's count of records in its slots */
static size_t* count_of(const record_shard_t* s) { return &mp_record_counts[s - rshards].n; }

_Alignas(64) uint8_t mp_record_hints[MP_RECORD_HINTS];
/* Under addr's record shard lock; records of other shards share the count, hence the atomics. */
static void hint_add(uintptr_t addr, int delta) {
  uint8_t* h = &mp_record_hints[mp_record_hint_of(addr)];
  uint8_t before = __atomic_load_n(h, __ATOMIC_RELAXED);
  do {
    mp_assert(delta > 0 || before > 0); /* never below the records it counts */
    if (before == MP_HINT_STUCK) return;
  } while (!__atomic_compare_exchange_n(h, &before, (uint8_t)(before + delta), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

/* The hashed counts are read by frees before any is written: a read
 * of a never-touched page maps the shared zero page, whose replacement at the first write
 * flushes the TLB of every CPU running the process (osmem.c). So their pages are written at
 * start. */
void mp_table_init(void) {
  static bool done;
  if (done) return;
  done = true;
  mp_prewrite(mp_record_hints, sizeof(mp_record_hints));
  mp_prewrite(record_first, sizeof(record_first));
  mp_prewrite(index_first, sizeof(index_first));
#ifdef MP_TEST_HOOKS
  /* the memory gate's control (test/native/footprint.test.ts): 1 MiB more, resident and kept */
  if (mp_test_hook("MP_TEST_BALLAST")) (void)mp_os_alloc((size_t)1 << 20);
#endif
}

/* Under the shard lock: index of addr's slot, or cap if absent. */
static size_t record_find(record_shard_t* s, uintptr_t addr) {
  if (s->cap == 0) return 0;
  for (size_t j = record_home(addr, s->cap);; j = (j + 1) & (s->cap - 1)) {
    if (s->slots[j].addr == addr) return j;
    if (s->slots[j].addr == 0) return s->cap;
  }
}

/* Under the shard lock: removes slot j, shifting later members of its probe run back. */
static void record_delete(record_shard_t* s, size_t j) {
  hint_add(s->slots[j].addr, -1);
  size_t mask = s->cap - 1;
  for (size_t k = (j + 1) & mask; s->slots[k].addr != 0; k = (k + 1) & mask) {
    size_t home = record_home(s->slots[k].addr, s->cap);
    /* slot k may move to j iff its home is not in the cyclic range (j, k] */
    if (((k - home) & mask) >= ((k - j) & mask)) {
      s->slots[j] = s->slots[k];
      j = k;
    }
  }
  s->slots[j].addr = 0;
  s->slots[j].tagged = 0;
  __atomic_store_n(count_of(s), *count_of(s) - 1, __ATOMIC_RELAXED);
}

/* A record of b is gone (or an add failed): b may retire, and is not touched after that. */
static void bucket_release_live(mp_bucket_t* b) {
  bucket_shard_t* bs = &bshards[bucket_shard_of(b->tid)];
  mp_lock(&bs->lock);
  mp_assert(b->live > 0); /* a record or an add under way holds it */
  if (b->live > 0 && --b->live == 0 && !bucket_shows(b)) {
    mp_bucket_t** link = &bs->index[b->hash & (bs->index_cap - 1)]; /* a live bucket is linked */
    while (*link != b) link = &(*link)->next;
    *link = b->next;
    bucket_retire(bs, b);
  }
  mp_unlock(&bs->lock);
}


/* Under rs->lock: adds delta to the shard's pending part, and the part to est_live once it
 * reaches ±EST_FLUSH; true when that brought est_live up to the next peak mark. */
static bool est_change(record_shard_t* rs, int64_t delta) {
  int64_t pending = rs->pending + delta;
  bool flush = pending >= EST_FLUSH || pending <= -EST_FLUSH;
  rs->pending = flush ? 0 : pending;
  mp_assert(rs->pending < EST_FLUSH && rs->pending > -EST_FLUSH);
  if (!flush) return false;
  int64_t now = atomic_fetch_add_explicit(&est_live, pending, memory_order_relaxed) + pending;
  return pending > 0 && now >= atomic_load_explicit(&peak_next, memory_order_relaxed);
}

/* est_live reached peak_next: every bucket's live count becomes its peak, on one thread at a
 * time (others go on: the next sample past the mark tries again). Buckets whose peak was all
 * that kept them retire. The peak's bytes are those of the copied counts. No other table lock
 * is held here. */
static void peak_copy(unsigned generation) {
  if (atomic_exchange_explicit(&peak_busy, true, memory_order_acquire)) return;
  for (unsigned i = 0; i < SHARDS; i++) {
    if (mp_lock_briefly(&bshards[i].lock)) continue;
    /* A shard held for longer (its holder descheduled, say): the copy waits for no one.
     * Still past the mark, the next sample that brings a shard's part in tries again; a peak
     * is lost this way only if the estimate never reaches the mark again, and the peak
     * profile then shows the last copy, at most one step (1/32) below the mark. */
    while (i-- > 0) mp_unlock(&bshards[i].lock);
    atomic_store_explicit(&peak_busy, false, memory_order_release);
    return;
  }
  if (atomic_load(&mp_state.running) && atomic_load(&mp_state.generation) == generation) {
    int64_t estimate = 0;
    for (unsigned i = 0; i < SHARDS; i++) {
      bucket_shard_t* bs = &bshards[i];
      for (size_t k = 0; k < bs->index_cap; k++) {
        mp_bucket_t** link = &bs->index[k];
        while (*link != NULL) {
          mp_bucket_t* b = *link;
          b->peak = b->live;
          estimate += (int64_t)b->live * b->estimate;
          if (!bucket_shows(b)) {
            *link = b->next;
            bucket_retire(bs, b);
          } else {
            link = &b->next;
          }
        }
      }
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store(&peak_bytes, estimate);
    atomic_store(&peak_rounding, mp_table_rounding());
    atomic_store(&peak_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    int64_t step = estimate / 32 > PEAK_MIN_STEP ? estimate / 32 : PEAK_MIN_STEP;
    atomic_store(&peak_next, estimate + step);
    atomic_fetch_add(&peak_copies, 1);
  }
  for (unsigned i = SHARDS; i-- > 0;) mp_unlock(&bshards[i].lock);
  atomic_store_explicit(&peak_busy, false, memory_order_release);
}

void mp_table_peak(mp_peak_t* peak) {
  peak->bytes = (double)atomic_load(&peak_bytes);
  peak->ns = atomic_load(&peak_ns);
  peak->snapshots = atomic_load(&peak_copies);
  peak->rounding = atomic_load(&peak_rounding);
}

/* Under rs->lock: a live record of b came (+1) or went (-1), rounded or not. */
static void rounding_change(record_shard_t* rs, const mp_bucket_t* b, bool rounded, int sign) {
  if (!rounded) return;
  size_t extra = b->rounding;
  mp_assert(sign > 0 || rs->rounding >= extra);
  __atomic_store_n(&rs->rounding, sign > 0 ? rs->rounding + extra : rs->rounding - extra, __ATOMIC_RELAXED);
}

size_t mp_table_rounding(void) {
  size_t sum = 0;
  for (unsigned i = 0; i < RSHARDS; i++) sum += __atomic_load_n(&rshards[i].rounding, __ATOMIC_RELAXED);
  return sum;
}

int mp_table_add(uintptr_t p, size_t size, bool rounded, const uintptr_t* frames, unsigned depth, int32_t tid,
                 void (*thread_name)(char out[16])) {
  uint64_t h = hash_stack(size, frames, depth, tid);
  bucket_shard_t* bs = &bshards[bucket_shard_of(tid)];
  mp_lock(&bs->lock);
  unsigned generation = atomic_load(&mp_state.generation);
  if (!atomic_load_explicit(&mp_state.running, memory_order_acquire)) { /* raced with stop */
    mp_unlock(&bs->lock);
    return 0;
  }
  mp_bucket_t* b = bucket_find(bs, h, size, frames, depth, tid);
  if (b == NULL) { /* a new bucket: its thread's name and the perf map's size are read with no lock held */
    mp_unlock(&bs->lock);
    MP_TEST_TIME_START(new_from);
    char name[16];
    thread_name(name);
    uint64_t jit_map_bytes = mp_jit_map_bytes();
    MP_TEST_TIME_END(MP_TIME_BUCKET, new_from);
    mp_lock(&bs->lock);
    if (!atomic_load_explicit(&mp_state.running, memory_order_acquire) || atomic_load(&mp_state.generation) != generation) {
      mp_unlock(&bs->lock);
      return 0;
    }
    b = bucket_get(bs, h, size, frames, depth, tid, name, jit_map_bytes);
  }
  if (b == NULL) {
    mp_unlock(&bs->lock);
    return -1;
  }
  b->live++;
  b->allocs++;
  mp_unlock(&bs->lock);

  /* Lock order: record shard, then bucket shard. A stop (and restart) between the two
   * critical sections has freed b: the generation tells, and b is not touched again. */
  record_shard_t* rs = record_shard(p);
  mp_lock(&rs->lock);
  if (!atomic_load(&mp_state.running) || atomic_load(&mp_state.generation) != generation) {
    mp_unlock(&rs->lock);
    return 0;
  }
  bool ok = true, peaked = false;
  size_t j = record_find(rs, p);
  if (j < rs->cap) { /* a record whose free was never seen (freed behind our back) */
    rounding_change(rs, rec_bucket(&rs->slots[j]), rec_of(&rs->slots[j]).rounded, -1);
    rounding_change(rs, b, rounded, +1);
    (void)est_change(rs, -rec_bucket(&rs->slots[j])->estimate);
    bucket_release_live(rec_bucket(&rs->slots[j]));
    rs->slots[j].tagged = rec_tag(b, rounded);
  } else if ((*count_of(rs) + 1) * 2 > rs->cap && !record_grow(rs)) {
    ok = false;
    bucket_release_live(b);
  } else {
    j = record_home(p, rs->cap);
    while (rs->slots[j].addr != 0) j = (j + 1) & (rs->cap - 1);
    rs->slots[j].addr = p;
    rs->slots[j].tagged = rec_tag(b, rounded);
    __atomic_store_n(count_of(rs), *count_of(rs) + 1, __ATOMIC_RELAXED);
    hint_add(p, 1);
    rounding_change(rs, b, rounded, +1);
  }
  if (ok) peaked = est_change(rs, b->estimate);
  mp_unlock(&rs->lock);
  if (peaked) {
    MP_TEST_TIME_START(peak_from);
    peak_copy(generation);
    MP_TEST_TIME_END(MP_TIME_PEAK, peak_from);
  }
  return ok ? 1 : -1;
}

/* p's record (size 0: none), and with `remove` its removal. */
static mp_recorded_t record_take(uintptr_t p, bool remove) {
  mp_recorded_t r = {0, false};
  if (!mp_table_may_hold(p)) return r;
  record_shard_t* rs = record_shard(p);
  mp_lock(&rs->lock);
  size_t j = record_find(rs, p);
  if (j < rs->cap) {
    mp_bucket_t* b = rec_bucket(&rs->slots[j]);
    r = rec_of(&rs->slots[j]);
    if (remove) {
      record_delete(rs, j);
      rounding_change(rs, b, r.rounded, -1);
      (void)est_change(rs, -b->estimate);
      bucket_release_live(b);
    }
  }
  mp_unlock(&rs->lock);
  return r;
}

mp_recorded_t mp_table_remove(uintptr_t p) { return record_take(p, true); }
mp_recorded_t mp_table_lookup(uintptr_t p) { return record_take(p, false); }

/* ---- whole-table operations ----------------------------------------------------------------- */
/* Records first, then buckets: once no record is left, nothing can reach a bucket. */
int64_t mp_table_clear(bool with_whole) {
  int64_t whole = 0;
  for (unsigned i = 0; i < RSHARDS; i++) {
    record_shard_t* rs = &rshards[i];
    mp_lock(&rs->lock);
    for (size_t j = 0; j < rs->cap; j++) {
      if (rs->slots[j].addr == 0) continue;
      const void* p = (const void*)rs->slots[j].addr;
      if (with_whole) whole += (int64_t)mp_unrecorded_extra(p, rec_of(&rs->slots[j]));
      hint_add(rs->slots[j].addr, -1); /* under the lock, as record_delete: never below the records */
    }
    if (rs->cap != 0) array_put(rs->slots, rs->cap, RECORD_CAP_FIRST, sizeof(record_t));
    rs->slots = NULL;
    rs->cap = 0;
    __atomic_store_n(count_of(rs), 0, __ATOMIC_RELAXED);
    rs->pending = 0;
    __atomic_store_n(&rs->rounding, 0, __ATOMIC_RELAXED);
    mp_unlock(&rs->lock);
  }
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    mp_lock(&bs->lock);
    if (bs->index_cap != 0) array_put(bs->index, bs->index_cap, BUCKET_INDEX_FIRST, sizeof(mp_bucket_t*));
    bs->index = NULL;
    bs->index_cap = bs->count = 0;
    memset(bs->spare, 0, sizeof(bs->spare));
    mp_bump_release(&bs->mem);
    mp_unlock(&bs->lock);
  }
  atomic_store(&est_live, 0);
  atomic_store(&peak_bytes, 0);
  atomic_store(&peak_ns, 0);
  atomic_store(&peak_rounding, 0);
  atomic_store(&peak_next, PEAK_MIN_STEP);
  atomic_store(&peak_copies, 0);
  return whole;
}

/* Buckets left with no live sample retire (no record points at them). */
void mp_table_reset_accum(void) {
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    mp_lock(&bs->lock);
    for (size_t k = 0; k < bs->index_cap; k++) {
      mp_bucket_t** link = &bs->index[k];
      while (*link != NULL) {
        mp_bucket_t* b = *link;
        b->allocs = 0;
        if (b->live == 0 && b->peak == 0) {
          *link = b->next;
          bucket_retire(bs, b);
        } else {
          link = &b->next;
        }
      }
    }
    mp_unlock(&bs->lock);
  }
}

void mp_table_lock_all(void) {
  for (unsigned i = 0; i < RSHARDS; i++) mp_lock(&rshards[i].lock);
  for (unsigned i = 0; i < SHARDS; i++) mp_lock(&bshards[i].lock);
}

void mp_table_unlock_all(void) {
  for (unsigned i = SHARDS; i-- > 0;) mp_unlock(&bshards[i].lock);
  for (unsigned i = RSHARDS; i-- > 0;) mp_unlock(&rshards[i].lock);
}

void mp_table_child_reinit(void) {
  /* A fork inside a copy's flag window (set before the bucket locks, cleared after them)
   * would otherwise leave the child without peak copies for good. */
  atomic_store(&peak_busy, false);
  for (unsigned i = 0; i < SHARDS; i++) mp_lock_reset(&bshards[i].lock);
  for (unsigned i = 0; i < RSHARDS; i++) mp_lock_reset(&rshards[i].lock);
}

#if MP_DEBUG_ON
/* Debug builds: the record <-> bucket invariant, with every lock held. Each record's address
 * is one that free's filter passes on, and it points at a linked bucket, and a bucket's `live` is at least the number of
 * records that point at it (the rest are adds under way, between their two sections). */
static bool bucket_linked(const mp_bucket_t* b) {
  const bucket_shard_t* bs = &bshards[bucket_shard_of(b->tid)];
  for (const mp_bucket_t* c = bs->index[b->hash & (bs->index_cap - 1)]; c != NULL; c = c->next)
    if (c == b) return true;
  return false;
}

void mp_table_check(void) {
  mp_table_lock_all();
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    size_t count = 0;
    for (size_t k = 0; k < bs->index_cap; k++)
      for (mp_bucket_t* b = bs->index[k]; b != NULL; b = b->next) {
        mp_assert(bucket_shard_of(b->tid) == i && (b->hash & (bs->index_cap - 1)) == k);
        b->refs = 0;
        count++;
      }
    mp_assert(count == bs->count);
  }
  uint64_t hinted = 0, counted = 0; /* counted: the records whose hashed count is not stuck */
  for (unsigned k = 0; k < MP_RECORD_HINTS; k++) {
    uint8_t v = __atomic_load_n(&mp_record_hints[k], __ATOMIC_RELAXED);
    if (v != MP_HINT_STUCK) hinted += v;
  }
  for (unsigned i = 0; i < RSHARDS; i++) {
    record_shard_t* rs = &rshards[i];
    size_t count = 0;
    for (size_t j = 0; j < rs->cap; j++) {
      if (rs->slots[j].addr == 0) continue;
      count++;
      uint8_t hint = __atomic_load_n(&mp_record_hints[mp_record_hint_of(rs->slots[j].addr)], __ATOMIC_RELAXED);
      mp_assert(hint != 0);
      if (hint != MP_HINT_STUCK) counted++;
      mp_assert(record_shard(rs->slots[j].addr) == rs);
      mp_assert((rs->slots[j].addr & mp_sample_mask) == 0); /* sampler.c: what free's filter passes on */
      mp_assert(bucket_linked(rec_bucket(&rs->slots[j])));
      rec_bucket(&rs->slots[j])->refs++;
    }
    mp_assert(count == *count_of(rs) && (rs->cap == 0 || 2 * count <= rs->cap));
  }
  mp_assert(hinted == counted); /* every lock is held: no add or removal is between its two steps */
  for (unsigned i = 0; i < SHARDS; i++)
    for (size_t k = 0; k < bshards[i].index_cap; k++)
      for (mp_bucket_t* b = bshards[i].index[k]; b != NULL; b = b->next) mp_assert(b->refs <= b->live);
  mp_table_unlock_all();
}
#else
void mp_table_check(void) {}
#endif

void mp_table_totals(mp_table_totals_t* t, double interval) {
  memset(t, 0, sizeof(*t));
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    mp_lock(&bs->lock);
    for (size_t k = 0; k < bs->index_cap; k++) {
      for (mp_bucket_t* b = bs->index[k]; b != NULL; b = b->next) {
        double w = mp_weight((double)b->size, interval);
        t->buckets++;
        t->live_samples += b->live;
        t->live_sampled_bytes += b->live * b->size;
        t->accum_samples += b->allocs;
        t->est_live_objects += (double)b->live * w;
        t->est_live_bytes += (double)b->live * (double)b->size * w;
        /* each block is kept with p = 1/w, independently of the others (disjoint stretches
         * of a Poisson process over bytes): Horvitz-Thompson's variance estimate */
        t->est_live_bytes_var += (double)b->live * (double)b->size * (double)b->size * w * (w - 1.0);
        t->est_accum_objects += (double)b->allocs * w;
        t->est_accum_bytes += (double)b->allocs * (double)b->size * w;
      }
    }
    mp_unlock(&bs->lock);
  }
}

bool mp_snapshot_take(mp_snapshot_t* snap) {
  /* Two passes under each lock would race with growth between them; size generously
   * from a first count and skip what no longer fits. */
  size_t rows = 0, frames = 0;
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    mp_lock(&bs->lock);
    for (size_t k = 0; k < bs->index_cap; k++)
      for (mp_bucket_t* b = bs->index[k]; b != NULL; b = b->next) {
        rows++;
        frames += b->depth;
      }
    mp_unlock(&bs->lock);
  }
  rows += 64;
  frames += 64 * MI_PROF_MAX_BT;
  size_t bytes = rows * sizeof(mp_row_t) + frames * sizeof(uintptr_t);
  char* mem = mp_os_alloc_transient(bytes);
  if (mem == NULL) return false;
  snap->rows = (mp_row_t*)mem;
  snap->frames = (uintptr_t*)(mem + rows * sizeof(mp_row_t));
  snap->map_bytes = bytes;
  snap->nrows = snap->nframes = 0;
  for (unsigned i = 0; i < SHARDS; i++) {
    bucket_shard_t* bs = &bshards[i];
    mp_lock(&bs->lock);
    for (size_t k = 0; k < bs->index_cap; k++)
      for (mp_bucket_t* b = bs->index[k]; b != NULL; b = b->next) {
        uint64_t live = snap->peak ? b->peak : b->live;
        if (live == 0 && (!snap->accum || b->allocs == 0)) continue;
        if (snap->nrows == rows || snap->nframes + b->depth > frames) continue;
        mp_row_t* r = &snap->rows[snap->nrows++];
        r->size = b->size;
        r->live = live;
        r->allocs = b->allocs;
        r->depth = b->depth;
        r->first = (uint32_t)snap->nframes;
        r->tid = b->tid;
        r->jit_map_bytes = b->jit_map_bytes;
        memcpy(r->thread, b->thread, sizeof(r->thread));
        memcpy(&snap->frames[snap->nframes], b->frames, b->depth * sizeof(uintptr_t));
        snap->nframes += b->depth;
      }
    mp_unlock(&bs->lock);
  }
  return true;
}

void mp_snapshot_free(mp_snapshot_t* snap) {
  mp_os_free(snap->rows, snap->map_bytes);
  snap->rows = NULL;
  snap->frames = NULL;
}
