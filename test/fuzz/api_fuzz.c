/* libFuzzer harness: random sequences of the allocator API with the profiler started,
 * stopped, reset, dumped and reconfigured in between (the fuzz gate of
 * test/reliability/fuzz.test.ts).
 *
 * Built with clang -fsanitize=fuzzer,address,undefined against the library's sources built
 * the same way (native/Makefile `sanitize`, build/fuzz): ASan's allocator stays the process's,
 * the library's malloc family is reached under its renamed names (mp_san_malloc ...), and
 * profiler memory comes from ASan (osmem.c, MP_SANITIZE), so an overflow or a use after free
 * in the tables or the writers is a report, and memory not released by mi_prof_stop a leak.
 *
 * An input is a sequence of operations, one opcode byte and its argument bytes each, over 32
 * block slots. Checked as it runs: contents survive realloc, calloc zeroes, alignments hold,
 * usable sizes cover requests, dumps succeed or fail with errno set, the sampled figures never
 * exceed the live blocks. Checked at its end, after every block is freed with the profiler
 * still running: no live sample is left (no record outlives its block). Every input ends
 * with the profiler stopped and exact counters off, so inputs are independent.
 *
 * -DPLANTED_BUG: the positive control. A block of 3000..3099 bytes is freed behind the
 * profiler's back (straight to mimalloc), as a free path that forgot its bookkeeping would. */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mimalloc-pprof/profile.h"

/* The library's entry points, renamed in the sanitizer build (native/Makefile). */
void* mp_san_malloc(size_t);
void* mp_san_calloc(size_t, size_t);
void* mp_san_realloc(void*, size_t);
void* mp_san_reallocarray(void*, size_t, size_t);
void mp_san_free(void*);
int mp_san_posix_memalign(void**, size_t, size_t);
void* mp_san_aligned_alloc(size_t, size_t);
void* mp_san_memalign(size_t, size_t);
void* mp_san_valloc(size_t);
void* mp_san_pvalloc(size_t);
size_t mp_san_malloc_usable_size(void*);
void* mp_san__Znwm(size_t);
void mp_san__ZdlPv(void*);
void* mp_san__ZnwmSt11align_val_t(size_t, size_t);
void mp_san__ZdlPvSt11align_val_t(void*, size_t);
void mi_free(void*);

#define SLOTS 32

typedef struct slot_s {
  unsigned char* p;
  size_t size;
  unsigned char fill;
  enum { K_MALLOC, K_NEW, K_NEW_ALIGNED } kind;
  size_t align;
} slot_t;

static slot_t slots[SLOTS];
static char dump_dir[256];

typedef struct reader_s {
  const uint8_t* data;
  size_t len, pos;
} reader_t;

static uint8_t u8(reader_t* r) { return r->pos < r->len ? r->data[r->pos++] : 0; }
static uint16_t u16(reader_t* r) { return (uint16_t)(u8(r) | (u8(r) << 8)); }

#define CHECK(cond, what)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "api_fuzz: invariant broken: %s (%s:%d)\n", what, __FILE__, __LINE__); \
      abort();                                                                         \
    }                                                                                  \
  } while (0)

/* Sizes across mimalloc's classes: small, medium, large, huge, and impossible. */
static size_t pick_size(reader_t* r) {
  uint8_t c = u8(r);
  uint16_t v = u16(r);
  switch (c % 8) {
    case 0: return v % 65;
    case 1: case 2: return v % 1024;
    case 3: return v;                              /* up to 64 KiB */
    case 4: return (size_t)v << 4;                 /* up to 1 MiB */
    case 5: return ((size_t)v << 5) % (2u << 20);  /* up to 2 MiB */
    case 6: return v % 64 == 63 ? (size_t)20 << 20 : (size_t)1 << (v % 23); /* 4 MiB; 20 MiB: huge */
    default: return v % 3 == 0 ? SIZE_MAX - v : v % 3 == 1 ? (size_t)PTRDIFF_MAX + v : 64 + v % 4096;
  }
}

static size_t stored(size_t size) { return size < 4096 ? size : 4096; } /* bytes filled and checked */

static void fill(slot_t* s, unsigned char value) {
  s->fill = value;
  memset(s->p, value, stored(s->size));
}

static void check_fill(const slot_t* s, size_t upto) {
  size_t n = stored(upto < s->size ? upto : s->size);
  for (size_t i = 0; i < n; i++) CHECK(s->p[i] == s->fill, "block contents kept");
}

static void release(slot_t* s) {
  if (s->p == NULL) return;
  check_fill(s, s->size);
  if (s->kind == K_NEW) mp_san__ZdlPv(s->p);
  else if (s->kind == K_NEW_ALIGNED) mp_san__ZdlPvSt11align_val_t(s->p, s->align);
#ifdef PLANTED_BUG
  else if (s->size >= 3000 && s->size < 3100) mi_free(s->p); /* behind the profiler's back */
#endif
  else mp_san_free(s->p);
  s->p = NULL;
}

static void place(slot_t* s, void* p, size_t size, size_t align, int kind, unsigned char value) {
  if (p == NULL) return;
  if (align != 0) CHECK(((uintptr_t)p & (align - 1)) == 0, "alignment");
  CHECK(mp_san_malloc_usable_size(p) >= size, "usable size covers the request");
  s->p = p;
  s->size = size;
  s->align = align;
  s->kind = kind;
  fill(s, value);
}

static mi_prof_stats_t stats(void) {
  mi_prof_stats_t st;
  memset(&st, 0, sizeof(st));
  st.size = sizeof(st);
  st.version = MI_PROF_STATS_VERSION;
  CHECK(mi_prof_stats_get(&st), "mi_prof_stats_get");
  return st;
}

static void check_stats(void) {
  mi_prof_stats_t st = stats();
  size_t live = 0, bytes = 0;
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].p != NULL) {
      live++;
      bytes += slots[i].size;
    }
  /* Only this harness allocates through the library (libc uses ASan's allocator). */
  CHECK(st.live_samples <= live, "live samples <= live blocks");
  CHECK(st.live_sampled_bytes <= bytes, "live sampled bytes <= live bytes");
  CHECK(st.running == mi_prof_is_enabled(), "running flag");
}

static void dump(bool proto, unsigned k) {
  char path[512];
  snprintf(path, sizeof(path), "%s/p%u.%s", dump_dir, k % 4, proto ? "pb" : "heap");
  errno = 0;
  bool ok = proto ? mi_prof_dump_proto(path) : mi_prof_dump(path);
  /* a dump fails only for lack of memory (a tiny MIMALLOC_PROF_MAX_BYTES) */
  CHECK(ok || errno == ENOMEM, "dump succeeds or fails with ENOMEM");
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  snprintf(dump_dir, sizeof(dump_dir), "%s/mpp-fuzz-%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
           (int)getpid());
  mkdir(dump_dir, 0700);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t len) {
  reader_t r = {data, len, 0};
  unsigned dumps = 0;
  unsigned ops = 0;
  while (r.pos < r.len && ops++ < 256) {
    uint8_t op = u8(&r);
    slot_t* s = &slots[u8(&r) % SLOTS];
    unsigned char value = (unsigned char)(0x11 * (ops % 15 + 1));
    switch (op % 20) {
      case 0: case 1: { /* malloc */
        size_t n = pick_size(&r);
        release(s);
        place(s, mp_san_malloc(n), n, 0, K_MALLOC, value);
        break;
      }
      case 2: { /* calloc */
        size_t count = u8(&r) % 8, n = pick_size(&r);
        release(s);
        unsigned char* p = mp_san_calloc(count, n);
        size_t total;
        if (p != NULL && !__builtin_mul_overflow(count, n, &total)) {
          for (size_t i = 0; i < stored(total); i++) CHECK(p[i] == 0, "calloc zeroes");
          place(s, p, total, 0, K_MALLOC, value);
        } else if (p != NULL) {
          CHECK(false, "calloc overflow refused");
        }
        break;
      }
      case 3: case 4: { /* realloc: the prefix survives */
        size_t n = pick_size(&r);
        if (s->p != NULL && s->kind != K_MALLOC) break;
        unsigned char* p = mp_san_realloc(s->p, n);
        if (s->p != NULL && n == 0) { /* glibc: realloc(p, 0) frees p and returns NULL */
          CHECK(p == NULL, "realloc(p, 0) frees");
          s->p = NULL;
          break;
        }
        if (p == NULL) break; /* failed: the block is unchanged */
        if (s->p != NULL) {
          slot_t moved = *s;
          moved.p = p;
          check_fill(&moved, n);
        }
        place(s, p, n, 0, K_MALLOC, value);
        break;
      }
      case 5: { /* reallocarray */
        size_t count = u8(&r) % 8, n = pick_size(&r), total;
        if (s->p != NULL && s->kind != K_MALLOC) break;
        bool over = __builtin_mul_overflow(count, n, &total);
        unsigned char* p = mp_san_reallocarray(s->p, count, n);
        if (over) {
          CHECK(p == NULL, "reallocarray overflow refused");
          break;
        }
        if (s->p != NULL && total == 0) {
          CHECK(p == NULL, "reallocarray(p, 0, n) frees");
          s->p = NULL;
          break;
        }
        if (p == NULL) break;
        if (s->p != NULL) {
          slot_t moved = *s;
          moved.p = p;
          check_fill(&moved, total);
        }
        place(s, p, total, 0, K_MALLOC, value);
        break;
      }
      case 6: case 7: release(s); break;
      case 8: { /* posix_memalign */
        size_t align = (size_t)8 << (u8(&r) % 16), n = pick_size(&r);
        release(s);
        void* p = NULL;
        if (mp_san_posix_memalign(&p, align, n) == 0) place(s, p, n, align, K_MALLOC, value);
        break;
      }
      case 9: { /* aligned_alloc, memalign, valloc, pvalloc */
        uint8_t how = u8(&r);
        size_t align = (size_t)1 << (how % 20), n = pick_size(&r);
        release(s);
        if (how % 4 == 0) place(s, mp_san_aligned_alloc(align, n), n, align, K_MALLOC, value);
        else if (how % 4 == 1) place(s, mp_san_memalign(align, n), n, align, K_MALLOC, value);
        else if (how % 4 == 2) place(s, mp_san_valloc(n), n, 4096, K_MALLOC, value);
        else { /* pvalloc requests whole pages */
          size_t m = n % (64u << 20), pages = m == 0 ? 4096 : (m + 4095) & ~(size_t)4095;
          place(s, mp_san_pvalloc(m), pages, 4096, K_MALLOC, value);
        }
        break;
      }
      case 10: { /* operator new, plain and aligned (nothing is thrown below 1 MiB) */
        uint8_t how = u8(&r);
        size_t n = u16(&r) % (1u << 20);
        release(s);
        if (how % 2 == 0) place(s, mp_san__Znwm(n), n, 0, K_NEW, value);
        else {
          size_t align = (size_t)16 << (how % 10);
          place(s, mp_san__ZnwmSt11align_val_t(n, align), n, align, K_NEW_ALIGNED, value);
        }
        break;
      }
      case 11: { /* start, plain or seeded */
        size_t interval = (size_t)1 << (u8(&r) % 21); /* 1 B .. 1 MiB */
        bool seeded = u8(&r) % 2;
        bool was = mi_prof_is_enabled();
        bool ok = seeded ? mi_prof_start_seeded(interval, 7) : mi_prof_start(interval);
        CHECK(ok != was, "start succeeds exactly when stopped");
        break;
      }
      case 12: { /* start_ex: every field from the input */
        mi_prof_config_t c;
        memset(&c, 0, sizeof(c));
        c.size = sizeof(c);
        c.version = MI_PROF_CONFIG_VERSION;
        uint8_t a = u8(&r), b = u8(&r);
        c.mode = a % 2 ? MI_PROF_CONFIG_OVERRIDE : MI_PROF_CONFIG_FALLBACK;
        c.sample_interval = a & 2 ? (size_t)1 << (b % 21) : 0;
        c.max_profiler_bytes = a & 4 ? (size_t)u8(&r) << 12 : 0; /* up to 1 MiB: drops */
        c.has_seed = a & 8;
        c.seed = b;
        c.accum = a & 16;
        c.max_stack_depth = u8(&r) % (MI_PROF_MAX_BT + 1);
        c.dump_format = a & 32 ? MI_PROF_DUMP_PROTO : MI_PROF_DUMP_TEXT;
        bool was = mi_prof_is_enabled();
        CHECK(mi_prof_start_ex(&c) != was, "start_ex succeeds exactly when stopped");
        break;
      }
      case 13:
        mi_prof_stop();
        CHECK(stats().live_samples == 0, "stop discards every sample");
        break;
      case 14: mi_prof_reset(); break;
      case 15: if (dumps < 4) dump(u8(&r) % 2, dumps++); break;
      case 16: check_stats(); break;
      case 17: mi_prof_memory_events_enable(u8(&r) % 2); break;
      case 18: { /* usable size and a write over all of it */
        if (s->p == NULL) break;
        size_t usable = mp_san_malloc_usable_size(s->p);
        CHECK(usable >= s->size, "usable size");
        if (usable <= 65536) memset(s->p + s->size, 0x5a, usable - s->size);
        break;
      }
      default: { /* a burst of small blocks: samples at small intervals */
        size_t n = 1 + u8(&r) % 64;
        void* burst[64];
        for (size_t i = 0; i < n; i++) burst[i] = mp_san_malloc(8 + i * 24);
        for (size_t i = 0; i < n; i++) mp_san_free(burst[i]);
        break;
      }
    }
  }
  check_stats();
  bool running = mi_prof_is_enabled();
  for (int i = 0; i < SLOTS; i++) release(&slots[i]);
  if (running) {
    mi_prof_stats_t st = stats();
    if (st.live_samples != 0) {
      fprintf(stderr, "api_fuzz: invariant broken: %llu live samples after every block was freed\n",
              (unsigned long long)st.live_samples);
      abort();
    }
  }
  mi_prof_stop();
  mi_prof_memory_events_enable(false);
  return 0;
}
