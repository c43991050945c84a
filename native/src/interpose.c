/* The only file that exports libc's allocation names, with glibc's semantics for errno and
 * degenerate arguments, in front of the system mimalloc.
 *
 * The hot entry points (malloc, free, calloc, realloc, operator new and delete) jump through
 * a dispatch table. While the profiler is stopped and exact counters are off, the table
 * points at mimalloc itself (or a plain wrapper where glibc's semantics differ), so an
 * armed-but-stopped library costs one indirect jump, as a bare forwarder does. While active
 * it points at the watching versions:
 *  - allocation: subtract the request from the thread's countdown; no borrow -> mimalloc;
 *  - free: one test of the pointer's low bits against the free-side filter; miss -> mimalloc.
 * Everything else happens in the slow paths (sampler.c). Built without frame pointers so
 * that entry points leave rbp alone, and every hop to a slow path is a tail jump: the slow
 * path then sees the caller's return address and frame chain.
 *
 * Switching the table needs no other synchronisation: no record exists while it points at
 * mimalloc, and a block sampled after the switch reaches another thread only through that
 * thread's own synchronisation, which orders the table store before its free. */
#define _GNU_SOURCE
#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

/* Aliases need not repeat the glibc declarations' attributes (leaf, nothrow, malloc). */
#pragma GCC diagnostic ignored "-Wmissing-attributes"

#define EXPORT __attribute__((visibility("default")))
#define RA __builtin_return_address(0)

/* countdown -= n; true unless that borrowed, reached zero, or left bit 63 set (a countdown
 * that a signal handler's siglongjmp left wrapped between an earlier subtraction and its slow
 * path would else never borrow again; the slow path draws anew, sampler.c decide). One
 * subtract on the TLS slot and two branches: the compiler would otherwise load, copy, store
 * and compare. */
static inline __attribute__((always_inline)) bool take(size_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* mp_tls.countdown is the first member; its TLS offset comes from the GOT (initial-exec). */
  __asm__ goto("movq mp_tls@gottpoff(%%rip), %%r11\n\t"
               "subq %0, %%fs:(%%r11)\n\t"
               "jbe %l[slow]\n\t"
               "js %l[slow]"
               : /* no outputs */
               : "r"(n)
               : "cc", "memory", "r11"
               : slow);
  return true;
slow:
  return false;
#else
  uint64_t c = mp_tls.countdown;
  mp_tls.countdown = c - n;
  return mp_likely(c > n && c - n <= MP_COUNTDOWN_MAX);
#endif
}

/* One test against the filter's mask (internal.h): while profiling only sampler-aligned
 * pointers go on to the slow path. */
static inline __attribute__((always_inline)) bool filtered(const void* p) {
#if defined(__x86_64__) && defined(__GNUC__)
  /* `test` takes the mask from memory: one instruction, where the compiler makes two. */
  __asm__ goto("testq %0, mp_filter_mask(%%rip)\n\t"
               "je %l[hit]"
               : /* no outputs */
               : "r"(p)
               : "cc"
               : hit);
  return false;
hit:
  return true;
#else
  return mp_unlikely(((uintptr_t)p & __atomic_load_n(&mp_filter_mask, __ATOMIC_RELAXED)) == 0);
#endif
}

static inline bool is_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

static void* enomem(void) {
  errno = ENOMEM;
  return NULL;
}

/* glibc fails an impossible request with ENOMEM; mimalloc returns NULL and reports it to its
 * error handler (EOVERFLOW or ENOMEM) without touching errno. The handler sets errno, so the
 * entry points need no size check of their own. */
static void on_mimalloc_error(int err, void* arg) {
  (void)arg;
  if (err == ENOMEM || err == EOVERFLOW) errno = ENOMEM;
}

void mp_interpose_init(void) { mi_register_error(on_mimalloc_error, NULL); }

/* ---- the dispatch table -------------------------------------------------------------------- */
static void* watching_malloc(size_t n) {
  if (take(n)) return mi_malloc(n);
  return mp_alloc_slow(n, 0, 0, RA);
}

static void watching_free(void* p) {
  if (filtered(p)) {
    mp_free_slow(p);
    return;
  }
  mi_free(p);
}

static void* watching_zalloc(size_t n) {
  if (take(n)) return mi_zalloc(n);
  return mp_alloc_slow(n, 0, MP_ZERO, RA);
}

static void* plain_realloc(void* p, size_t n) {
  if (n == 0 && p != NULL) { /* glibc: realloc(p, 0) frees p and returns NULL */
    mi_free(p);
    return NULL;
  }
  return mi_realloc(p, n);
}

static void* watching_realloc(void* p, size_t n);

static void* plain_new(size_t n) {
  void* p = mi_malloc(n);
  if (mp_likely(p != NULL)) return p;
  return mp_new_fail(n, 0, false);
}

static void* plain_new_nothrow(size_t n) {
  void* p = mi_malloc(n);
  if (mp_likely(p != NULL)) return p;
  return mp_new_fail(n, 0, true);
}

static void* watching_new(size_t n) {
  if (take(n)) return plain_new(n);
  return mp_alloc_slow(n, 0, MP_NEW, RA);
}

static void* watching_new_nothrow(size_t n) {
  if (take(n)) return plain_new_nothrow(n);
  return mp_alloc_slow(n, 0, MP_NEW | MP_NOTHROW, RA);
}

typedef struct entry_table_s {
  void* (*malloc)(size_t);
  void (*free)(void*);
  void* (*zalloc)(size_t);
  void* (*realloc)(void*, size_t);
  void* (*new)(size_t);
  void* (*new_nothrow)(size_t);
} entry_table_t;

static entry_table_t entry = {mi_malloc, mi_free, mi_zalloc, plain_realloc, plain_new, plain_new_nothrow};

static void* watching_calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return enomem();
  if (take(n)) return mi_zalloc(n);
  return mp_alloc_slow(n, 0, MP_ZERO, RA);
}

static const mp_direct_t* direct_names(size_t* count);

void mp_entry_update(bool watching) {
  size_t count;
  const mp_direct_t* names = direct_names(&count);
  if (!watching) mp_bind_direct(names, count, false); /* callers back on the table first */
  if (watching) {
    __atomic_store_n(&entry.free, watching_free, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.realloc, watching_realloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.malloc, watching_malloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.zalloc, watching_zalloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.new, watching_new, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.new_nothrow, watching_new_nothrow, __ATOMIC_SEQ_CST);
  } else {
    __atomic_store_n(&entry.malloc, mi_malloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.zalloc, mi_zalloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.new, plain_new, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.new_nothrow, plain_new_nothrow, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.realloc, plain_realloc, __ATOMIC_SEQ_CST);
    __atomic_store_n(&entry.free, mi_free, __ATOMIC_SEQ_CST);
  }
  if (watching) mp_bind_direct(names, count, true); /* the table is watching already */
}

/* ---- C ------------------------------------------------------------------------------------ */
EXPORT void* malloc(size_t n) { return entry.malloc(n); }

/* Whether the program's malloc is this one (false when the library was loaded with dlopen:
 * the program's calls bind elsewhere). A call is the test, not an address: a non-PIE
 * executable's canonical address of malloc is its own PLT stub. Run at load, before the
 * entry table is first switched. */
static __thread bool probe_hit __attribute__((tls_model("initial-exec")));
static void* probe_malloc(size_t n) {
  probe_hit = true;
  return mi_malloc(n);
}

bool mp_interpose_probe(void) {
  void* (*volatile program_malloc)(size_t) = malloc; /* through the GOT: the program's binding */
  void (*volatile program_free)(void*) = free;
  probe_hit = false;
  __atomic_store_n(&entry.malloc, probe_malloc, __ATOMIC_SEQ_CST);
  void* p = program_malloc(16);
  __atomic_store_n(&entry.malloc, mi_malloc, __ATOMIC_SEQ_CST);
  program_free(p);
  return probe_hit;
}

EXPORT void free(void* p) { entry.free(p); }

EXPORT void* calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return enomem();
  return entry.zalloc(n);
}

static inline void* realloc_impl(void* p, size_t n, void* ra) {
  uint64_t c = mp_tls.countdown;
  if (mp_likely(p != NULL && n != 0 && c > n && c <= MP_COUNTDOWN_MAX && !filtered(p))) {
    mp_tls.countdown = c - n;
    return mi_realloc(p, n);
  }
  return mp_realloc_slow(p, n, ra);
}

static void* watching_realloc(void* p, size_t n) { return realloc_impl(p, n, RA); }

EXPORT void* realloc(void* p, size_t n) { return entry.realloc(p, n); }

EXPORT void* reallocarray(void* p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) return enomem();
  return entry.realloc(p, n);
}

static inline void* aligned_impl(size_t align, size_t n, void* ra) {
  if ((ptrdiff_t)n < 0) return enomem(); /* mimalloc's aligned path fails it silently */
  if (take(n)) return mi_malloc_aligned_at(n, align, 0);
  return mp_alloc_slow(n, align, 0, ra);
}

/* Reports through its result and leaves errno alone. The slow path does both itself, so the
 * hop to it stays a tail jump (a plain call would leave rbp to the compiler). */
EXPORT int posix_memalign(void** out, size_t align, size_t n) {
  if (!is_pow2(align) || align % sizeof(void*) != 0) return EINVAL;
  if ((ptrdiff_t)n < 0) return ENOMEM; /* mimalloc's aligned path fails it silently */
  if (!take(n)) return mp_posix_memalign_slow(out, align, n, RA);
  int saved = errno;
  void* p = mi_malloc_aligned_at(n, align, 0);
  errno = saved;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

/* glibc >= 2.38: a zero or non-power-of-two alignment is EINVAL. */
EXPORT void* aligned_alloc(size_t align, size_t n) {
  if (!is_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return aligned_impl(align, n, RA);
}

/* glibc: small alignments are malloc's; others round up to a power of two. mimalloc's malloc
 * guarantees 8 bytes only (its 8- and 24-byte blocks), so 16 takes the aligned path. */
static inline void* memalign_impl(size_t align, size_t n, void* ra) {
  if (align <= sizeof(void*)) {
    if (take(n)) return mi_malloc(n);
    return mp_alloc_slow(n, 0, 0, ra);
  }
  if (align > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  if (!is_pow2(align)) align = (size_t)1 << (64 - __builtin_clzl(align));
  return aligned_impl(align, n, ra);
}

EXPORT void* memalign(size_t align, size_t n) { return memalign_impl(align, n, RA); }

static size_t page_size(void) {
  static size_t cached;
  if (cached == 0) cached = (size_t)sysconf(_SC_PAGESIZE);
  return cached;
}

EXPORT void* valloc(size_t n) { return memalign_impl(page_size(), n, RA); }

EXPORT void* pvalloc(size_t n) {
  size_t page = page_size();
  size_t rounded;
  if (__builtin_add_overflow(n, page - 1, &rounded)) {
    errno = ENOMEM;
    return NULL;
  }
  rounded &= ~(page - 1);
  return memalign_impl(page, rounded == 0 ? page : rounded, RA);
}

EXPORT size_t malloc_usable_size(void* p) { return mp_usable_size(p); }

EXPORT void cfree(void* p) __attribute__((alias("free")));
EXPORT void free_sized(void* p, size_t n) {
  (void)n;
  free(p);
}
EXPORT void free_aligned_sized(void* p, size_t align, size_t n) {
  (void)align;
  (void)n;
  free(p);
}

/* glibc's internal names: the system libmimalloc exports them too, and a caller reaching
 * for them must not bypass the profiler's bookkeeping. */
EXPORT void* __libc_malloc(size_t n) __attribute__((alias("malloc")));
EXPORT void __libc_free(void* p) __attribute__((alias("free")));
EXPORT void __libc_cfree(void* p) __attribute__((alias("free")));
EXPORT void* __libc_calloc(size_t c, size_t n) __attribute__((alias("calloc")));
EXPORT void* __libc_realloc(void* p, size_t n) __attribute__((alias("realloc")));
EXPORT void* __libc_memalign(size_t a, size_t n) __attribute__((alias("memalign")));
EXPORT void* __libc_valloc(size_t n) __attribute__((alias("valloc")));
EXPORT void* __libc_pvalloc(size_t n) __attribute__((alias("pvalloc")));
EXPORT int __posix_memalign(void** out, size_t a, size_t n) __attribute__((alias("posix_memalign")));

/* ---- C++ operator new / delete, every form -------------------------------------------------- */
typedef void (*new_handler_t)(void);
extern new_handler_t _ZSt15get_new_handlerv(void) __attribute__((weak));
extern void _ZSt17__throw_bad_allocv(void) __attribute__((weak, noreturn));

void* mp_new_fail(size_t size, size_t align, bool nothrow) {
  for (;;) {
    new_handler_t handler = _ZSt15get_new_handlerv != NULL ? _ZSt15get_new_handlerv() : NULL;
    if (handler == NULL) {
      if (nothrow) return NULL;
      if (_ZSt17__throw_bad_allocv != NULL) _ZSt17__throw_bad_allocv();
      abort();
    }
    handler(); /* may throw, or free memory */
    void* p = align != 0 ? mi_malloc_aligned_at(size, align, 0) : mi_malloc(size);
    if (p != NULL) return p;
  }
}

static inline void* new_impl(size_t n, size_t align, unsigned flags, void* ra) {
  if (take(n)) {
    void* p = align != 0 ? mi_malloc_aligned_at(n, align, 0) : mi_malloc(n);
    if (mp_likely(p != NULL)) return p;
    return mp_new_fail(n, align, (flags & MP_NOTHROW) != 0);
  }
  return mp_alloc_slow(n, align, flags, ra);
}

#define NEW_FORMS(name, ...) EXPORT void* name(__VA_ARGS__)
NEW_FORMS(_Znwm, size_t n) { return entry.new(n); }
NEW_FORMS(_Znam, size_t n) { return entry.new(n); }
NEW_FORMS(_ZnwmRKSt9nothrow_t, size_t n, __attribute__((unused)) const void* tag) { return entry.new_nothrow(n); }
NEW_FORMS(_ZnamRKSt9nothrow_t, size_t n, __attribute__((unused)) const void* tag) { return entry.new_nothrow(n); }
NEW_FORMS(_ZnwmSt11align_val_t, size_t n, size_t a) { return new_impl(n, a, MP_NEW, RA); }
NEW_FORMS(_ZnamSt11align_val_t, size_t n, size_t a) { return new_impl(n, a, MP_NEW, RA); }
NEW_FORMS(_ZnwmSt11align_val_tRKSt9nothrow_t, size_t n, size_t a, const void* tag) { (void)tag; return new_impl(n, a, MP_NEW | MP_NOTHROW, RA); }
NEW_FORMS(_ZnamSt11align_val_tRKSt9nothrow_t, size_t n, size_t a, const void* tag) { (void)tag; return new_impl(n, a, MP_NEW | MP_NOTHROW, RA); }

EXPORT void _ZdlPv(void* p) __attribute__((alias("free")));
EXPORT void _ZdaPv(void* p) __attribute__((alias("free")));
#define DELETE_FORM(name, ...) \
  EXPORT void name(void* p, __VA_ARGS__) { free(p); }
DELETE_FORM(_ZdlPvm, __attribute__((unused)) size_t n)
DELETE_FORM(_ZdaPvm, __attribute__((unused)) size_t n)
DELETE_FORM(_ZdlPvSt11align_val_t, __attribute__((unused)) size_t a)
DELETE_FORM(_ZdaPvSt11align_val_t, __attribute__((unused)) size_t a)
DELETE_FORM(_ZdlPvmSt11align_val_t, __attribute__((unused)) size_t n, __attribute__((unused)) size_t a)
DELETE_FORM(_ZdaPvmSt11align_val_t, __attribute__((unused)) size_t n, __attribute__((unused)) size_t a)
DELETE_FORM(_ZdlPvRKSt9nothrow_t, __attribute__((unused)) const void* tag)
DELETE_FORM(_ZdaPvRKSt9nothrow_t, __attribute__((unused)) const void* tag)
DELETE_FORM(_ZdlPvSt11align_val_tRKSt9nothrow_t, __attribute__((unused)) size_t a, __attribute__((unused)) const void* tag)
DELETE_FORM(_ZdaPvSt11align_val_tRKSt9nothrow_t, __attribute__((unused)) size_t a, __attribute__((unused)) const void* tag)

/* ---- direct binding (bind.c) ------------------------------------------------------------------
 * Each exported name whose body, while profiling, only forwards to a watching version (the
 * table's, or with an argument it ignores). The exported addresses are taken through hidden
 * aliases: the address of a default-visibility function may be the executable's PLT stub. */
#define SELF(ret, self, name, ...) extern ret self(__VA_ARGS__) __attribute__((alias(#name), visibility("hidden")))
SELF(void*, mp_self_malloc, malloc, size_t);
SELF(void, mp_self_free, free, void*);
SELF(void*, mp_self_calloc, calloc, size_t, size_t);
SELF(void*, mp_self_realloc, realloc, void*, size_t);
SELF(void*, mp_self_new, _Znwm, size_t);
SELF(void*, mp_self_new_array, _Znam, size_t);
SELF(void*, mp_self_new_nothrow, _ZnwmRKSt9nothrow_t, size_t, const void*);
SELF(void*, mp_self_new_array_nothrow, _ZnamRKSt9nothrow_t, size_t, const void*);
SELF(void, mp_self_delete_sized, _ZdlPvm, void*, size_t);
SELF(void, mp_self_delete_array_sized, _ZdaPvm, void*, size_t);

static const mp_direct_t* direct_names(size_t* count) {
  static const mp_direct_t names[] = {
      {"malloc", (const void*)mp_self_malloc, (const void*)watching_malloc},
      {"__libc_malloc", (const void*)mp_self_malloc, (const void*)watching_malloc},
      {"free", (const void*)mp_self_free, (const void*)watching_free},
      {"cfree", (const void*)mp_self_free, (const void*)watching_free},
      {"__libc_free", (const void*)mp_self_free, (const void*)watching_free},
      {"_ZdlPv", (const void*)mp_self_free, (const void*)watching_free},
      {"_ZdaPv", (const void*)mp_self_free, (const void*)watching_free},
      {"_ZdlPvm", (const void*)mp_self_delete_sized, (const void*)watching_free},
      {"_ZdaPvm", (const void*)mp_self_delete_array_sized, (const void*)watching_free},
      {"calloc", (const void*)mp_self_calloc, (const void*)watching_calloc},
      {"__libc_calloc", (const void*)mp_self_calloc, (const void*)watching_calloc},
      {"realloc", (const void*)mp_self_realloc, (const void*)watching_realloc},
      {"__libc_realloc", (const void*)mp_self_realloc, (const void*)watching_realloc},
      {"_Znwm", (const void*)mp_self_new, (const void*)watching_new},
      {"_Znam", (const void*)mp_self_new_array, (const void*)watching_new},
      {"_ZnwmRKSt9nothrow_t", (const void*)mp_self_new_nothrow, (const void*)watching_new_nothrow},
      {"_ZnamRKSt9nothrow_t", (const void*)mp_self_new_array_nothrow, (const void*)watching_new_nothrow},
  };
  _Static_assert(sizeof(names) / sizeof(*names) <= MP_DIRECT_MAX, "MP_DIRECT_MAX");
  *count = sizeof(names) / sizeof(*names);
  return names;
}

/* ---- V8's sampling heap profiler: where it took each sample (jsanchor.c) ------------------
 * Bound only into the object that holds SampleObject, once armed: equivalent to the exported
 * operator new and sized delete (through the table, correct profiling or not) besides the
 * anchor's record, so the slots' invariant (bind.c) holds with these as a third value. */
void* mp_entry_new(size_t n) { return entry.new(n); }

static void* anchor_new(size_t n) {
  void* ra = RA;
  if (mp_unlikely(n == MP_ANCHOR_SIZE && (uintptr_t)ra - mp_anchor_site.lo < mp_anchor_site.len && mp_tls.anchoring))
    return mp_anchor_new_slow(n, ra);
  return entry.new(n);
}

static void anchor_delete_sized(void* p, size_t n) {
  if (mp_unlikely(n == MP_ANCHOR_SIZE && mp_tls.anchoring)) mp_anchor_forget(p);
  entry.free(p);
}

bool mp_bind_anchors(const void* in_object) {
  const void* new_from[] = {(const void*)mp_self_new, (const void*)watching_new};
  const void* delete_from[] = {(const void*)mp_self_delete_sized, (const void*)watching_free};
  if (mp_bind_object(in_object, "_Znwm", new_from, 2, (const void*)anchor_new) == 0) return false;
  if (mp_bind_object(in_object, "_ZdlPvm", delete_from, 2, (const void*)anchor_delete_sized) != 0) return true;
  /* without the deletes, anchors would outlive their samples: none at all */
  const void* back[] = {(const void*)anchor_new};
  (void)mp_bind_object(in_object, "_Znwm", back, 1, (const void*)mp_self_new);
  return false;
}

/* ---- pthread_mutex_unlock: how libuv's thread pool is watched (pool.c) -------------------- */
/* One or two compares in front of glibc's: the slow path only for the pool's mutex (when
 * learned) or while a probe runs. */
EXPORT int pthread_mutex_unlock(pthread_mutex_t* mutex) {
  if (mp_unlikely((void*)mutex == mp_pool.mutex || mp_pool.probing)) return mp_pool_unlock_slow(mutex);
  return mp_libc_mutex_unlock(mutex);
}

/* ---- mmap, munmap and mremap: which mappings are mimalloc's (resident.c) ------------------
 * Straight to the kernel, as glibc's own wrappers do on x86-64 and aarch64 (they only turn the result into
 * errno): glibc exports no other public name for them, and mimalloc maps during its own
 * initialisation, before any constructor of this library, where no lookup may run. Off
 * x86-64 and aarch64 glibc nothing is interposed, and the RSS breakdown says mimalloc's part is unknown.
 * The record is told before a call that frees addresses and after it (resident.h): after
 * alone, another thread could be given the addresses in between. errno and the result are
 * the system call's, whatever the record does. */
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__GLIBC__)
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "resident.h"

EXPORT void* mmap(void* addr, size_t len, int prot, int flags, int fd, off_t offset) {
  void* p = (void*)syscall(SYS_mmap, addr, len, prot, flags, fd, offset);
  if (p != MAP_FAILED) {
    int saved = errno;
    mp_resident_mapped(p, len, flags, RA);
    errno = saved;
  }
  return p;
}
EXPORT void* mmap64(void* addr, size_t len, int prot, int flags, int fd, off_t offset) __attribute__((alias("mmap")));

EXPORT int munmap(void* addr, size_t len) {
  uint64_t ticket = mp_resident_unmap_begin(addr, len);
  int rc = (int)syscall(SYS_munmap, addr, len);
  if (ticket != 0) {
    int saved = errno;
    mp_resident_unmap_end(ticket, addr, len, rc == 0);
    errno = saved;
  }
  return rc;
}

/* glibc's prototype: the new address is read only with MREMAP_FIXED, as glibc's own does. */
EXPORT void* mremap(void* old, size_t old_len, size_t new_len, int flags, ...) {
  void* target = NULL;
  if (flags & MREMAP_FIXED) {
    va_list ap;
    va_start(ap, flags);
    target = va_arg(ap, void*);
    va_end(ap);
  }
  mp_remap_t st;
  mp_resident_remap_begin(&st, old, old_len, new_len, flags);
  void* p = (void*)syscall(SYS_mremap, old, old_len, new_len, flags, target);
  int saved = errno;
  mp_resident_remap_end(&st, p);
  errno = saved;
  return p;
}
#endif
