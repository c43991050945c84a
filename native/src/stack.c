/* Stack capture inside malloc.
 *
 * Where unwind rules are available (unwind.c: x86-64, glibc >= 2.35) the walk follows them
 * from the caller's exact registers (pc, sp, rbp): a frame of code built without frame
 * pointers steps by its call-frame information, a frame that no object describes (V8's JIT
 * code, which keeps frame pointers) by the frame-pointer chain, and the walk ends where the
 * rules mark the outermost frame (_start, the thread start in clone). Each step reads at most
 * two words, both checked against the thread's stack bounds and above the previous frame, so
 * the stack pointer strictly increases and a wrong rule can end a stack early but never read
 * outside the stack. A warm step costs a cache probe and two loads; no step takes a lock.
 *
 * Elsewhere, and on an alternate signal stack (bounds unknown), a frame-pointer walk runs
 * first: cheap, and the only method that crosses V8's JIT frames. Every step is checked
 * against the thread's stack bounds, alignment and strictly increasing addresses. A chain
 * that ends on a bad link, or on a null frame pointer anywhere but in libc's thread and
 * process start routines, is captured again with the unwind-table unwinder (glibc
 * backtrace); the deeper one is kept.
 *
 * Runs with mp_tls.in_profiler set and no profiler lock held: backtrace() may allocate on
 * first use (it loads libgcc_s), which mp_stack_init does ahead of time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#ifdef __GLIBC__
#include <execinfo.h>
#else
#include <unwind.h>
#endif
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "internal.h"

#ifndef __GLIBC__
/* musl has no backtrace(): libgcc_s's unwinder, loaded at the first call (mp_stack_init's, as
 * glibc's backtrace loads it), its own frame left out as glibc leaves out its own. Without
 * libgcc_s (not installed) no frames: stacks end where the frame pointers end. Never linked in:
 * the compiler's static unwinder is built for its own C library. */
typedef _Unwind_Reason_Code (*bt_unwind_fn)(_Unwind_Trace_Fn, void*);
typedef _Unwind_Ptr (*bt_getip_fn)(struct _Unwind_Context*);
static bt_unwind_fn bt_unwind;
static bt_getip_fn bt_getip;

typedef struct {
  void** buf;
  int n, max, skip;
} bt_walk_t;

static _Unwind_Reason_Code bt_step(struct _Unwind_Context* ctx, void* arg) {
  bt_walk_t* w = arg;
  if (w->skip > 0) {
    w->skip--;
    return _URC_NO_REASON;
  }
  uintptr_t ip = bt_getip(ctx);
  if (ip == 0 || w->n >= w->max) return _URC_END_OF_STACK;
  w->buf[w->n++] = (void*)ip;
  return _URC_NO_REASON;
}

static __attribute__((noinline)) int backtrace(void** buf, int size) {
  static bool loaded;
  if (!__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) {
    void* h = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
      bt_getip = (bt_getip_fn)dlsym(h, "_Unwind_GetIP");
      bt_unwind = bt_getip != NULL ? (bt_unwind_fn)dlsym(h, "_Unwind_Backtrace") : NULL;
    }
    __atomic_store_n(&loaded, true, __ATOMIC_RELEASE);
  }
  bt_walk_t w = {buf, 0, size, 1};
  if (size > 0 && bt_unwind != NULL) bt_unwind(bt_step, &w);
  return w.n;
}
#endif

typedef struct text_range_s {
  uintptr_t base; /* load base, to find the object */
  uintptr_t lo, hi; /* its executable segments */
} text_range_t;

static text_range_t self_text; /* this library */
static text_range_t libc_text; /* where complete chains end */

static int find_text(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  text_range_t* r = arg;
  if (info->dlpi_addr != r->base) return 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (r->lo == 0 || lo < r->lo) r->lo = lo;
    if (hi > r->hi) r->hi = hi;
  }
  return 1;
}

static void learn_text(void* symbol, text_range_t* r) {
  Dl_info info;
  if (dladdr(symbol, &info) == 0) return;
  r->base = (uintptr_t)info.dli_fbase;
  dl_iterate_phdr(find_text, r);
}

static bool within(const text_range_t* r, uintptr_t pc) { return pc - r->lo < r->hi - r->lo; }

#if MP_UNWIND_CFI && defined(MP_TEST_HOOKS)
static void report_check(void);
#endif

#ifdef MP_TEST_HOOKS
static atomic_ullong time_ns[MP_TIME_PARTS], time_n[MP_TIME_PARTS];
static bool timing;
uint64_t mp_test_clock(void) {
  if (!timing) return 0;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
void mp_test_time(unsigned part, uint64_t since) {
  if (!timing || since == 0) return;
  atomic_fetch_add_explicit(&time_ns[part], mp_test_clock() - since, memory_order_relaxed);
  atomic_fetch_add_explicit(&time_n[part], 1, memory_order_relaxed);
}
#endif

void mp_stack_init(void) {
  static bool done;
  if (done) return;
  done = true;
  learn_text((void*)&mp_stack_capture, &self_text);
  learn_text((void*)&getpid, &libc_text);
  mp_unwind_init();
  mp_rules_load();
#if MP_UNWIND_CFI && defined(MP_TEST_HOOKS)
  /* here, not at the first check: a sample inside atexit's own allocation holds its lock */
  if (mp_test_hook("MP_TEST_UNWIND_CHECK") || mp_test_hook("MP_TEST_UNWIND_COUNTS")) atexit(report_check);
#endif
#ifdef MP_TEST_HOOKS
  timing = mp_test_hook("MP_TEST_UNWIND_COUNTS");
#endif
  /* glibc loads libgcc_s (dlopen) at the first backtrace: now, not inside a sampled malloc.
   * Since glibc 2.34 a size of 0 loads it and unwinds nothing: an unwind here would read the
   * eh_frame of libc and of the loader through their mappings, whose fault-around made
   * ~160 KiB of them this process's RSS (bench/README.md), for frames nobody asked for. Before
   * 2.34 a size of 0 returns first: one frame, then. */
  void* warm[1];
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  (void)backtrace(warm, 0);
#else
  (void)backtrace(warm, 1);
#endif
}

/* The thread's stack bounds, learned at its first sample from the mapping that holds its
 * stack pointer in /proc/self/maps, read with plain system calls. Not pthread_getattr_np:
 * it holds the thread's own descriptor lock while it allocates (its /proc/self/maps line
 * buffer for the main thread, its affinity mask for every thread), so a sample taken inside
 * a program's own pthread_getattr_np(pthread_self()) (Rust's runtime and V8 call it as they
 * start) would wait on that lock forever. The main thread's stack grows down to its rlimit:
 * its low bound is the top less the rlimit (at most 1 GiB). On an alternate signal stack
 * nothing is learned yet (the sample takes the checked frame-pointer path). */
/* Linux >= 6.11 answers for one address with an ioctl on the maps file (PROCMAP_QUERY, whose
 * layout is the kernel's ABI, spelled out here for older headers); a Node process's maps run
 * to hundreds of lines, whose reading cost about 0.1 ms per thread's first sample. */
struct mp_procmap_query {
  uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
  uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
  uint64_t vma_name_addr, build_id_addr;
};
_Static_assert(sizeof(struct mp_procmap_query) == 104, "the kernel's struct procmap_query");
#define MP_PROCMAP_QUERY 0xC0686611ul /* _IOWR('f', 17, struct procmap_query) */

#if MP_UNWIND_CFI && defined(MP_TEST_HOOKS)
static atomic_ullong bounds_by_query, bounds_by_text, bounds_by_attr; /* how each thread's bounds were learned */
#define COUNT_BOUNDS(how) atomic_fetch_add(&bounds_by_##how, 1)
#else
#define COUNT_BOUNDS(how) ((void)0)
#endif

typedef struct mapping_s {
  uintptr_t start, end;
} mapping_t;

/* One ioctl on an open maps file: the mapping that covers addr (flags 0), false where the
 * kernel has no PROCMAP_QUERY. errno is the caller's to keep. */
static bool query_mapping(int fd, uintptr_t addr, mapping_t* m) {
  struct mp_procmap_query q = {.size = sizeof(q), .query_addr = addr};
  if (ioctl(fd, MP_PROCMAP_QUERY, &q) != 0 || q.vma_start > addr || addr >= q.vma_end) return false;
  m->start = (uintptr_t)q.vma_start;
  m->end = (uintptr_t)q.vma_end;
  return true;
}

/* The mapping that holds addr, from /proc/self/maps: only at load (mp_stack_learn_bounds),
 * never inside an allocation. */
static bool mapping_of(uintptr_t addr, uintptr_t* lo, uintptr_t* hi) {
  int saved = errno;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    errno = saved;
    return false;
  }
  mapping_t m;
  bool by_query = true;
#ifdef MP_TEST_HOOKS
  by_query = !mp_test_hook("MP_TEST_MAPS_TEXT"); /* the bounds from the text, as before Linux 6.11 */
#endif
  if (by_query && query_mapping(fd, addr, &m)) {
    *lo = m.start;
    *hi = m.end;
    close(fd);
    errno = saved;
    COUNT_BOUNDS(query);
    return true;
  }
  char buf[4096], head[48];
  size_t h = 0;
  bool in_head = true, found = false;
  ssize_t got;
  while (!found && (got = read(fd, buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < got && !found; i++) {
      char c = buf[i];
      if (c == '\n') {
        h = 0;
        in_head = true;
      } else if (in_head && c == ' ') { /* "start-end" in hex */
        in_head = false;
        uintptr_t a = 0, b = 0;
        size_t k = 0;
        for (; k < h && head[k] != '-'; k++) a = a * 16 + (uintptr_t)(head[k] <= '9' ? head[k] - '0' : (head[k] | 32) - 'a' + 10);
        for (k++; k < h; k++) b = b * 16 + (uintptr_t)(head[k] <= '9' ? head[k] - '0' : (head[k] | 32) - 'a' + 10);
        if (a <= addr && addr < b) {
          *lo = a;
          *hi = b;
          found = true;
        }
      } else if (in_head && h < sizeof(head)) {
        head[h++] = c;
      }
    }
  }
  close(fd);
  errno = saved;
  if (found) COUNT_BOUNDS(text);
  return found;
}

/* ---- the sample path's scratch ----------------------------------------------------------------
 * A sampled malloc may run on a thread whose stack has little room left (PTHREAD_STACK_MIN
 * threads, handlers on an 8 KiB alternate stack): its buffers live here, not on the stack. A
 * thread claims a slot at its first sample and gives it back when it ends; a slot is one
 * thread's alone, and a thread is in at most one sample at a time (in_profiler), so no slot is
 * ever used by two walks at once. Slots are static (the pages of those never claimed stay
 * untouched); past them, a slot of profiler memory of its own. */
/* The last walk of a thread, step by step (rule_walk): the registers each step started from
 * and the stack words it read, so that a later walk that reaches the same registers can take
 * the rest from here after checking that every one of those words still holds what it held. */
typedef struct memo_step_s {
  uintptr_t pc, sp, fp;   /* the step's registers (pc: frames[i]) */
  uintptr_t at[3], val[3]; /* the words it read (a signal frame's three, else up to two) */
  uint8_t cells;
  bool exact;
#if defined(__aarch64__)
  bool inexact; /* sp came from a frame record (a lower bound): the rules' walk takes sp-based steps by the chain */
  uintptr_t lr_at; /* where the last signal frame saved x30 (a leaf's return address is read there) */
#endif
} memo_step_t;

typedef struct walk_memo_s {
  uintptr_t hi, next_lo, next_hi, stop_sp; /* what bounded the walk: a memo serves only the same */
  unsigned max, steps, n;                  /* n == 0: none */
  bool complete;
  uintptr_t last; /* frames[n - 1] */
  memo_step_t step[MI_PROF_MAX_BT];
} walk_memo_t;

/* A walk's use of the memo (rule_walk): in the scratch, not on the sample's stack. */
typedef struct memo_use_s {
  const walk_memo_t* last;
  walk_memo_t* record;
  unsigned next; /* the first step of `last` not yet passed */
  bool hit;      /* the walk's end was taken from `last` */
  bool kept;     /* `record` holds the whole walk all the same (its steps, then the memo's) */
#if defined(__aarch64__)
  bool inexact; /* the walk's state at the step under way (memo_step_t) */
  uintptr_t lr_at;
#endif
} memo_use_t;

typedef struct mp_scratch_s {
  memo_use_t use;                /* the walk under way's */
  mp_unwind_walk_t walk;         /* the walk under way's windows (unwind.c) */
  uintptr_t frames[MI_PROF_MAX_BT];
  void* raw[MI_PROF_MAX_BT + 8]; /* backtrace()'s frames, this library's own among them */
  uint32_t index;                /* in `slots`, or SCRATCH_SLOTS: its own memory */
  uint32_t memo_now;             /* which of `memo` holds the last walk */
  walk_memo_t memo[2];           /* the last walk, and the one being taken */
} mp_scratch_t;

#define SCRATCH_SLOTS 64u
static mp_scratch_t slots[SCRATCH_SLOTS];
static atomic_bool slot_taken[SCRATCH_SLOTS];

uintptr_t* mp_stack_scratch(mp_thread_t* t) {
  if (mp_likely(t->scratch != NULL)) return t->scratch->frames;
  mp_assert(t->in_profiler && !t->exiting); /* a slot claimed after the thread's release would be lost */
  for (uint32_t i = 0; i < SCRATCH_SLOTS; i++) {
    if (atomic_load_explicit(&slot_taken[i], memory_order_relaxed)) continue;
    if (atomic_exchange_explicit(&slot_taken[i], true, memory_order_acquire)) continue;
    slots[i].index = i;
    slots[i].memo[0].n = slots[i].memo[1].n = 0; /* another thread's stack */
    t->scratch = &slots[i];
    return t->scratch->frames;
  }
  mp_scratch_t* own = mp_os_alloc(sizeof(mp_scratch_t));
  if (own == NULL) return NULL;
  own->index = SCRATCH_SLOTS;
  own->memo[0].n = own->memo[1].n = 0;
  t->scratch = own;
  return own->frames;
}

void mp_stack_release(mp_thread_t* t) {
  mp_scratch_t* s = t->scratch;
  if (s == NULL) return;
  t->scratch = NULL;
  if (s->index < SCRATCH_SLOTS) atomic_store_explicit(&slot_taken[s->index], false, memory_order_release);
  else mp_os_free(s, sizeof(mp_scratch_t));
}

/* A fork child's only thread is the one that forked: every other slot is free again (their
 * threads are gone; a slot of their own memory is lost, as the child's copy of it). */
void mp_stack_child_reinit(void) {
  const mp_scratch_t* mine = mp_tls.scratch;
  for (uint32_t i = 0; i < SCRATCH_SLOTS; i++)
    if (mine != &slots[i]) atomic_store_explicit(&slot_taken[i], false, memory_order_relaxed);
}

/* The calling thread's bounds, outside any allocation: the thread that loads the library (the
 * main thread, at the load constructor, before the program's own code runs) by the mapping
 * that holds its stack pointer, whose low bound is the top less the stack rlimit (at most
 * 1 GiB: the main stack grows); a thread started through pthread_create or thrd_create by
 * pthread_getattr_np in its start wrapper, before the program's start routine (glibc answers
 * for such a thread from its descriptor: no file, nothing a sandbox installed later denies).
 * Threads made otherwise (glibc's own helpers) have none: their samples take libgcc's
 * unwinder. */
void mp_stack_learn_bounds(void) {
  mp_thread_t* t = &mp_tls;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_BOUNDS_PTHREAD")) return; /* the control learns them inside the sample */
#endif
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0), lo = 0, hi = 0;
  bool guard = t->in_profiler;
  t->in_profiler = true; /* pthread_getattr_np allocates: not a sample of the program's */
  t->stack_lo = 1; /* meanwhile: unknown */
  t->stack_hi = 0;
  if (syscall(SYS_gettid) == getpid()) {
    if (mapping_of(sp, &lo, &hi)) {
      struct rlimit rl;
      uintptr_t room = (uintptr_t)1 << 30;
      if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < room) room = rl.rlim_cur;
      if (hi - lo < room) lo = hi > room ? hi - room : 0;
    }
  } else {
    int saved = errno;
    pthread_attr_t attr;
    void* addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != NULL) {
        lo = (uintptr_t)addr;
        hi = (uintptr_t)addr + size;
        COUNT_BOUNDS(attr);
      }
      pthread_attr_destroy(&attr);
    }
    errno = saved;
  }
  if (lo < hi && lo <= sp && sp < hi) {
    t->stack_lo = lo;
    t->stack_hi = hi;
  }
  mp_profiler_leave(t, guard);
}

/* Inside a sample, bounds are never learned: a thread without them is marked as tried. The
 * test builds' control reproduces the old way (pthread_getattr_np inside the sample), which
 * waits forever on the descriptor lock of a thread sampled inside its own
 * pthread_getattr_np. */
static void bounds_unknown(mp_thread_t* t) {
  t->stack_lo = 1; /* tried: do not retry */
  t->stack_hi = 0;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_BOUNDS_PTHREAD")) {
    pthread_attr_t attr;
    void* addr = NULL;
    size_t size = 0;
    if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0 && addr != NULL) {
      t->stack_lo = (uintptr_t)addr;
      t->stack_hi = (uintptr_t)addr + size;
    }
    pthread_attr_destroy(&attr);
  }
#endif
}

/* Returns the number of frames written; *broken tells whether the chain ended on a link
 * that failed a check rather than on a null frame pointer. A frame record at or above
 * stop_sp (the cut, see mp_stack_capture) ends the walk. */
static unsigned fp_walk(uintptr_t* frames, unsigned n, unsigned max, uintptr_t fp, uintptr_t stop_sp, bool* broken) {
  mp_thread_t* t = &mp_tls;
  uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
  *broken = false;
  if (sp < t->stack_lo || sp >= t->stack_hi) { /* unknown bounds or an alternate stack */
    *broken = true;
    return n;
  }
  uintptr_t low = sp;
  while (n < max) {
    if (fp == 0 || fp >= stop_sp) break;
    if (fp < low || fp > t->stack_hi - 2 * sizeof(uintptr_t) || (fp & (sizeof(uintptr_t) - 1)) != 0) {
      *broken = true;
      break;
    }
    uintptr_t next = ((uintptr_t*)fp)[0];
    uintptr_t ret = mp_strip_ra(((uintptr_t*)fp)[1]);
    if (ret < 4096) break;
    frames[n++] = ret;
    if (next != 0 && next <= fp) {
      *broken = true;
      break;
    }
    low = fp + 2 * sizeof(uintptr_t);
    fp = next;
  }
  return n;
}

/* libgcc's unwinder (glibc backtrace) from here, this library's frames skipped: into frames,
 * when it finds more than the n already there and starts at the same caller. Its buffer is the
 * thread's scratch; its own stack use (several KiB) is allowed only with room to spare below
 * (FALLBACK_ROOM) on the thread's own stack, never on an alternate stack or one whose bounds
 * are unknown. */
#define FALLBACK_ROOM ((uintptr_t)32 * 1024)
static unsigned unwind_tables(uintptr_t* frames, unsigned n, unsigned max) {
  mp_thread_t* t = &mp_tls;
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  if (t->scratch == NULL || here < t->stack_lo || here >= t->stack_hi || here - t->stack_lo < FALLBACK_ROOM) return n;
  void** raw = t->scratch->raw;
  int got = backtrace(raw, (int)(max + 8));
  int i = 0;
  while (i < got && within(&self_text, (uintptr_t)raw[i])) i++;
  if (got - i <= (int)n || (uintptr_t)raw[i] != frames[0]) return n;
  unsigned m = 0;
  for (; i < got && m < max; i++) frames[m++] = (uintptr_t)raw[i];
  return m;
}

/* A chain is complete when it reached libc's start routines: its last frame is in libc, or
 * the one before it (the main thread's walk may step once more, into the executable's
 * _start, whose frame pointer is the 0 it set itself). */
static bool reached_start(const uintptr_t* frames, unsigned n) {
  return within(&libc_text, frames[n - 1]) || (n >= 2 && within(&libc_text, frames[n - 2]));
}

/* The library's own frames (the thread start wrapper at the root of every thread made by
 * pthread_create) are not the program's: left out, so no profile charges it. */
static unsigned drop_own_frames(uintptr_t* frames, unsigned n) {
  if (n <= 1) return n;
  const uintptr_t lo = self_text.lo, size = self_text.hi - self_text.lo; /* not reloaded per frame */
  unsigned i = 1;
  while (i < n && frames[i] - lo >= size) i++; /* most stacks have none: nothing is moved */
  unsigned k = i;
  for (; i < n; i++)
    if (frames[i] - lo >= size) frames[k++] = frames[i];
  return k;
}

#if MP_UNWIND_CFI && defined(MP_TEST_HOOKS)
/* Test builds: every stack is compared with libgcc's unwinder (glibc backtrace) over the
 * same frames, and the tally printed at exit (with the walks that fell back to libgcc's
 * unwinder because no rule could take a step); the unwind test reads it. Both start at the
 * caller of the interposed call; backtrace's own extra frames (this library's) are skipped. */
static atomic_ullong checked, agreed, fell_back;
static atomic_ullong memo_whole, memo_part; /* walks taken from the memo from their first step, from a later one */
static void mp_stack_count_fallback(void) { atomic_fetch_add(&fell_back, 1); }
/* " name=value" at line + *n, within the line's cap. */
static void report_field(char* line, size_t cap, size_t* n, const char* name, uint64_t value) {
  size_t len = strlen(name);
  if (*n + len + 24 > cap) return;
  memcpy(line + *n, name, len);
  *n += len;
  *n += mp_fmt_u64(line + *n, value);
}

static void report_check(void) {
  char line[768];
  size_t n = 0;
  uint64_t parsed, given, give_calls;
  mp_unwind_counts(&parsed, &given, &give_calls);
  report_field(line, sizeof(line), &n, "unwind check: stacks=", atomic_load(&checked));
  report_field(line, sizeof(line), &n, " agreed=", atomic_load(&agreed));
  report_field(line, sizeof(line), &n, " fallbacks=", atomic_load(&fell_back));
  report_field(line, sizeof(line), &n, " bounds_query=", atomic_load(&bounds_by_query));
  report_field(line, sizeof(line), &n, " bounds_text=", atomic_load(&bounds_by_text));
  report_field(line, sizeof(line), &n, " rules_parsed=", parsed);
  report_field(line, sizeof(line), &n, " given_back=", given);
  report_field(line, sizeof(line), &n, " give_calls=", give_calls);
  report_field(line, sizeof(line), &n, " bounds_attr=", atomic_load(&bounds_by_attr));
  report_field(line, sizeof(line), &n, " memo_whole=", atomic_load(&memo_whole));
  report_field(line, sizeof(line), &n, " memo_part=", atomic_load(&memo_part));
  static const char* const names[MP_TIME_PARTS] = {" sample", " walk", " miss", " give", " alloc", " record", " new_bucket", " peak"};
  for (unsigned i = 0; timing && i < MP_TIME_PARTS; i++) {
    char name[24];
    size_t k = mp_strlen(names[i]);
    memcpy(name, names[i], k);
    memcpy(name + k, "_n=", 4);
    report_field(line, sizeof(line), &n, name, atomic_load(&time_n[i]));
    memcpy(name + k, "_ns=", 5);
    report_field(line, sizeof(line), &n, name, atomic_load(&time_ns[i]));
  }
  line[n++] = '\n';
  (void)!write(2, line, n);
}

static void check_against_reference(const uintptr_t* frames, unsigned n, unsigned max) {
  mp_thread_t* t = &mp_tls;
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  if (t->scratch == NULL || here < t->stack_lo || here >= t->stack_hi) return;
  void** raw = t->scratch->raw;
  int got = backtrace(raw, (int)(max + 8));
  int i = 0;
  while (i < got && within(&self_text, (uintptr_t)raw[i])) i++;
  uintptr_t other[MI_PROF_MAX_BT]; /* test builds only */
  unsigned m = 0;
  for (; i < got && m < max; i++) other[m++] = (uintptr_t)raw[i];
  m = drop_own_frames(other, m);
  bool same = m == n;
  for (unsigned k = 0; same && k < n; k++) same = other[k] == frames[k];
  atomic_fetch_add(&checked, 1);
  if (same) atomic_fetch_add(&agreed, 1);
}
#endif

#if MP_UNWIND_CFI
/* Asks for the cache slots of the return addresses that the frame-pointer chain from fp
 * names, before the walk needs them one after the other. Between two samples the program
 * has evicted the cache's lines, and the walk's lookups are serial (each pc comes from the
 * step before), so a cold lookup per frame would wait for memory once per frame; asked for
 * together, the waits overlap. Where a frame keeps no frame pointer the guess is wrong and
 * costs a useless prefetch: results never depend on it. Reads only words of the stack,
 * checked as fp_walk checks them. */
static void prefetch_rules(uintptr_t pc, uintptr_t sp, uintptr_t fp, uintptr_t hi, unsigned max) {
  mp_unwind_prefetch(pc - 1);
  for (unsigned n = 1; n < max; n++) {
    if (fp < sp || fp > hi - 2 * sizeof(uintptr_t) || (fp & 7) != 0) return;
    uintptr_t ret = ((const uintptr_t*)fp)[1];
    if (ret < 4096) return;
    mp_unwind_prefetch(ret - 1);
    sp = fp + 2 * sizeof(uintptr_t);
    fp = ((const uintptr_t*)fp)[0];
  }
}

/* A walk's use of the thread's memo (walk_memo_t): `last` is compared with (NULL: none that
 * fits), `record` takes this walk's steps (NULL: not kept). A step is a deterministic function
 * of its registers, its pc's rule (fixed while code with frames on the stack stays mapped) and
 * the words it reads, and those words lie on the stack above its sp: a walk that reaches the
 * registers a step of the last walk started from, and finds every word that step and the later
 * ones read unchanged, would read and produce what they did, to the end. */


static bool memo_holds(const walk_memo_t* m, unsigned from) {
  for (unsigned i = from; i < m->steps; i++)
    for (unsigned c = 0; c < m->step[i].cells; c++)
      if (*(const uintptr_t*)m->step[i].at[c] != m->step[i].val[c]) return false;
  return true;
}

#ifdef MP_TEST_HOOKS
static bool memo_trusted(void) { return mp_test_hook("MP_TEST_MEMO_TRUST"); } /* the memo test's control */
#else
static inline bool memo_trusted(void) { return false; }
#endif

/* At the start of step n - 1 (registers pc, sp, fp): whether the last walk passed the same
 * registers with its words unchanged; then frames[n..] are its frames after that step, n and
 * *complete what it would have ended with. Steps are compared in order of sp (which grows along
 * a walk), so a memo costs one comparison per step where it does not fit. */
static __attribute__((noinline)) bool memo_take(memo_use_t* u, uintptr_t* frames, unsigned* n, unsigned max, uintptr_t pc, uintptr_t sp,
                      uintptr_t fp, bool exact, bool* complete) {
  const walk_memo_t* m = u->last;
  while (u->next < m->steps && m->step[u->next].sp < sp) u->next++;
  if (u->next >= m->steps) return false;
  unsigned j = u->next;
  const memo_step_t* st = &m->step[j];
  if (st->sp != sp || st->pc != pc || st->fp != fp || st->exact != exact) return false;
#if defined(__aarch64__)
  if (st->inexact != u->inexact || st->lr_at != u->lr_at) return false;
#endif
  unsigned k = *n - 1;
  bool ended_by_max = m->n > m->steps; /* its last frame came from a step it never took */
  if (ended_by_max && k < j) return false; /* this walk would go on beyond what the memo knows */
  if (!memo_trusted() && !memo_holds(m, j)) {
    u->last = NULL; /* the stack changed under it: this walk is taken afresh */
    return false;
  }
  unsigned total = k + (m->n - j); /* frames 0..k, then the memo's after step j */
  if (total > max) total = max;
  for (unsigned i = k + 1, from = j + 1; i < total; i++, from++) frames[i] = from < m->steps ? m->step[from].pc : m->last;
  *complete = total == max || m->complete;
  *n = total;
  u->hit = true;
  /* The next walk most likely starts as this one did: the record becomes this walk, its own
   * steps and then the memo's (nothing to do when it took the memo whole). */
  walk_memo_t* rec = u->record;
  if (rec != NULL && (k != 0 || j != 0)) {
    unsigned steps = k + (m->steps - j);
    if (total == max && steps > max - 1) steps = max - 1; /* a walk that ends at max takes max - 1 steps */
    memcpy(&rec->step[k], &m->step[j], (steps - k) * sizeof(memo_step_t));
    rec->steps = steps;
    rec->n = total;
    rec->complete = *complete;
    rec->last = frames[total - 1];
    u->kept = true;
  }
  return true;
}

static inline uintptr_t memo_read(memo_step_t* st, uintptr_t at) {
  uintptr_t v = *(const uintptr_t*)at;
  if (st != NULL && st->cells < 3) {
    st->at[st->cells] = at;
    st->val[st->cells++] = v;
  }
  return v;
}

#if defined(__aarch64__)
/* A signal frame whose return trampoline has no call-frame information (Linux's vDSO has none
 * since 2020, qemu-user's none at all; libgcc knows them by their two instructions): where a step
 * has no rule and sp is exact, sp is the kernel's rt_sigframe (siginfo, then the ucontext) and
 * x29 the frame record the kernel wrote beyond it from the interrupted x29 and x30, which the
 * ucontext holds too. Reads only words of the stack, checked against its bounds. */
static bool bare_signal_frame(uintptr_t sp, uintptr_t fp, uintptr_t hi) {
  uintptr_t uc = sp + sizeof(siginfo_t);
  if ((sp & 15) != 0 || (fp & 7) != 0 || fp < uc + sizeof(ucontext_t) || fp > hi - 2 * sizeof(uintptr_t) ||
      fp - sp > ((uintptr_t)1 << 16))
    return false;
  const ucontext_t* u = (const ucontext_t*)uc;
  const uintptr_t* record = (const uintptr_t*)fp;
  return record[0] == (uintptr_t)u->uc_mcontext.regs[29] && record[1] == (uintptr_t)u->uc_mcontext.regs[30];
}
#endif

/* The rule-driven walk from the caller's registers; frames[0] is pc already. *complete tells
 * whether it ended at the outermost frame (or at `max`) rather than on a step it could not
 * take. */
/* [next_lo, next_hi): the thread's own stack when the walk starts on an alternate one (next_lo
 * 0 otherwise): a signal frame's interrupted stack pointer may lead there, and the walk goes on
 * within those bounds. */
static unsigned rule_walk(mp_unwind_walk_t* walk, uintptr_t* frames, unsigned max, uintptr_t pc, uintptr_t sp,
                          uintptr_t fp, uintptr_t hi, uintptr_t next_lo, uintptr_t next_hi, uintptr_t stop_sp,
                          bool* complete, memo_use_t* u) {
  unsigned n = 1;
  bool exact = false; /* pc is an interrupted instruction (after a signal frame), not a return address */
  *complete = false;
  walk_memo_t* rec = u->record;
  unsigned steps = 0;
#if defined(__aarch64__)
  bool sp_exact = true;  /* sp is the frame's own (not a frame record's lower bound) */
  uintptr_t lr_at = 0;   /* where a signal frame saved x30 */
  bool no_memo = false;  /* a signal frame found by its layout (bare_signal_frame): its words are not all in the memo's cells */
#endif
  while (n < max) {
#if defined(__aarch64__)
    u->inexact = !sp_exact;
    u->lr_at = lr_at;
#endif
#if defined(__aarch64__)
    if (u->last != NULL && !no_memo && memo_take(u, frames, &n, max, pc, sp, fp, exact, complete)) return n;
#else
    if (u->last != NULL && memo_take(u, frames, &n, max, pc, sp, fp, exact, complete)) return n;
#endif
    memo_step_t* st = NULL;
    if (rec != NULL) {
      st = &rec->step[steps];
      st->pc = pc;
      st->sp = sp;
      st->fp = fp;
      st->exact = exact;
      st->cells = 0;
#if defined(__aarch64__)
      st->inexact = !sp_exact;
      st->lr_at = lr_at;
#endif
    }
    steps++;
    mp_unwind_rule_t r;
    mp_unwind_rule(walk, exact ? pc : pc - 1, &r); /* a return address: the call is the byte before */
    uintptr_t cfa, next_fp = fp;
    exact = false;
    if (r.kind == MP_RULE_END) {
      *complete = true;
      break;
    }
#if defined(__aarch64__)
#ifdef MP_TEST_HOOKS
    if (r.kind == MP_RULE_FP && sp_exact && !mp_test_hook("MP_TEST_NO_BARE_SIGNAL") && bare_signal_frame(sp, fp, hi)) {
#else
    if (r.kind == MP_RULE_FP && sp_exact && bare_signal_frame(sp, fp, hi)) {
#endif
      r.kind = MP_RULE_SIGNAL;
      no_memo = true;
    }
    if (r.kind == MP_RULE_SIGNAL) { /* sp is the kernel's rt_sigframe: siginfo, then the ucontext */
      uintptr_t uc = sp + sizeof(siginfo_t);
      if (uc + offsetof(ucontext_t, uc_mcontext.pstate) > hi || (sp & 15) != 0) break;
      uintptr_t ipc = memo_read(st, uc + offsetof(ucontext_t, uc_mcontext.pc));
      uintptr_t isp = memo_read(st, uc + offsetof(ucontext_t, uc_mcontext.sp));
      if (next_lo != 0 && isp >= next_lo && isp < next_hi) { /* off the alternate stack: the thread's own */
        hi = next_hi;
        next_lo = 0;
      } else if (isp <= sp || isp > hi) {
        break;
      }
      if (ipc < 4096) break;
      frames[n++] = ipc;
      pc = ipc;
      sp = isp;
      fp = memo_read(st, uc + offsetof(ucontext_t, uc_mcontext.regs[29]));
      lr_at = uc + offsetof(ucontext_t, uc_mcontext.regs[30]); /* for an interrupted leaf */
      sp_exact = true;
      exact = true;
      continue;
    }
#else
    if (r.kind == MP_RULE_SIGNAL) { /* sp is the ucontext the kernel pushed above the handler's return */
      uintptr_t regs = sp + offsetof(ucontext_t, uc_mcontext.gregs);
      if (regs + (REG_RIP + 1) * sizeof(greg_t) > hi || (sp & 7) != 0) break;
      uintptr_t rip = memo_read(st, regs + REG_RIP * sizeof(greg_t)), rsp = memo_read(st, regs + REG_RSP * sizeof(greg_t));
      if (next_lo != 0 && rsp >= next_lo && rsp < next_hi) { /* off the alternate stack: the thread's own */
        hi = next_hi;
        next_lo = 0;
      } else if (rsp <= sp || rsp > hi) {
        break;
      }
      if (rip < 4096) break;
      frames[n++] = rip;
      pc = rip;
      sp = rsp;
      fp = memo_read(st, regs + REG_RBP * sizeof(greg_t));
      exact = true;
      continue;
    }
#endif
    uintptr_t ra_at;
    if (r.kind == MP_RULE_CFI) {
      cfa = (r.cfa_rbp ? fp : sp) + (uintptr_t)(intptr_t)r.cfa_off;
#if defined(__aarch64__)
      /* After a frame-pointer step sp is only a lower bound (the frame record sits at the
       * bottom of its frame): an sp-based rule is taken from x29 where the frame keeps its
       * record there (x29 and x30 saved side by side: CFA = x29 - fp_off), else not at all
       * (libgcc's unwinder then finishes the stack). */
      if (!sp_exact && !r.cfa_rbp) {
        if (r.fp_off == 0 || r.ra_words == 0 || 8 * (int)r.ra_words != -(r.fp_off + 8)) break;
        cfa = fp - (uintptr_t)(intptr_t)r.fp_off;
      }
      if (r.ra_words == 0) { /* still in x30: only the interrupted frame of a signal frame */
        if (lr_at == 0 || cfa < sp || cfa > hi || (cfa & 7) != 0) break;
        ra_at = lr_at;
      } else {
        if (cfa <= sp || cfa > hi || (cfa & 7) != 0) break;
        ra_at = cfa - 8 * (uintptr_t)r.ra_words;
        if (ra_at < sp) break;
      }
#else
      if (cfa <= sp || cfa > hi || (cfa & 7) != 0) break;
      ra_at = cfa - sizeof(uintptr_t);
#endif
      if (r.fp_off != 0) {
        uintptr_t at = cfa + (uintptr_t)(intptr_t)r.fp_off;
        if (at < sp || at > hi - sizeof(uintptr_t)) break;
        next_fp = memo_read(st, at);
      }
    } else if (r.kind == MP_RULE_DRAP) { /* both words sit in this frame, at rbp + k */
      uintptr_t at_cfa = fp + (uintptr_t)(intptr_t)r.cfa_off, at_fp = fp + (uintptr_t)(intptr_t)r.fp_off;
      if (at_cfa < sp || at_cfa > hi - sizeof(uintptr_t) || at_fp < sp || at_fp > hi - sizeof(uintptr_t)) break;
      cfa = memo_read(st, at_cfa);
      if (cfa <= sp || cfa > hi || (cfa & 7) != 0) break;
      ra_at = cfa - sizeof(uintptr_t);
      next_fp = memo_read(st, at_fp);
    } else {
      if (fp < sp || fp > hi - 2 * sizeof(uintptr_t) || (fp & 7) != 0) break;
      cfa = fp + 2 * sizeof(uintptr_t);
      ra_at = cfa - sizeof(uintptr_t);
      next_fp = memo_read(st, fp);
    }
#if defined(__aarch64__)
    /* the only two reads stay on the stack (x30 of an interrupted leaf: in the signal frame's
     * ucontext, checked when that frame was read) */
    mp_assert((ra_at == lr_at || (ra_at >= sp && ra_at + sizeof(uintptr_t) <= hi)) && cfa <= hi);
#else
    mp_assert(ra_at >= sp && ra_at + sizeof(uintptr_t) <= hi && cfa <= hi); /* the only two reads stay on the stack */
#endif
    if (cfa > stop_sp) { /* the next frame lies beyond the cut: the walk is done */
      *complete = true;
      break;
    }
    uintptr_t ret = mp_strip_ra(memo_read(st, ra_at));
    if (ret < 4096) break;
#if defined(__aarch64__)
    /* the frame-record step knows only that the caller's sp lies above the record; and x30
     * held the return address only in the frame the signal interrupted */
    sp_exact = r.kind == MP_RULE_CFI;
    lr_at = 0;
#endif
    frames[n++] = ret;
    pc = ret;
    sp = cfa;
    fp = next_fp;
  }
  if (n == max) *complete = true;
  if (rec != NULL) {
    rec->steps = steps;
    rec->n = n;
#if defined(__aarch64__)
    if (no_memo) rec->n = 0; /* not kept: the next walk starts afresh */
#endif
    rec->complete = *complete;
    rec->last = frames[n - 1];
  }
  return n;
}
#endif

#if MP_DEBUG_ON && MP_UNWIND_CFI
/* Debug builds: a walk taken from the memo is the walk taken afresh (into the scratch's other
 * buffer, in a frame of its own: the sample's stack budget holds in debug builds too). */
static __attribute__((noinline)) void check_memo_walk(const uintptr_t* frames, unsigned n, bool complete, unsigned max, void* ra,
                                                      uintptr_t sp, uintptr_t fp, uintptr_t hi, uintptr_t next_lo,
                                                      uintptr_t next_hi, uintptr_t cut) {
  mp_scratch_t* s = mp_tls.scratch;
  uintptr_t* fresh = (uintptr_t*)s->raw;
  fresh[0] = (uintptr_t)ra;
  bool fresh_complete;
  s->use = (memo_use_t){.last = NULL, .record = NULL};
  s->walk = (mp_unwind_walk_t)MP_UNWIND_WALK_INIT;
  unsigned m = rule_walk(&s->walk, fresh, max, (uintptr_t)ra, sp, fp, hi, next_lo, next_hi, cut, &fresh_complete, &s->use);
  mp_unwind_walk_end(&s->walk);
  mp_assert(m == n && fresh_complete == complete);
  for (unsigned i = 0; i < n; i++) mp_assert(fresh[i] == frames[i]);
}
#endif

#if MP_UNWIND_CFI
/* The alternate signal stack this thread runs on, if `here` is on it: its top, 0 otherwise. */
static uintptr_t alt_stack_top(uintptr_t here) {
  stack_t ss;
  int saved = errno;
  bool on = sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK) != 0 && here >= (uintptr_t)ss.ss_sp &&
            here - (uintptr_t)ss.ss_sp < ss.ss_size;
  errno = saved;
  return on ? (uintptr_t)ss.ss_sp + ss.ss_size : 0;
}
#endif

#ifdef MP_TEST_HOOKS
static unsigned capture(uintptr_t* frames, unsigned max, void* ra, uintptr_t sp, uintptr_t fp, uintptr_t stop_sp);
#endif

unsigned mp_stack_capture(uintptr_t* frames, unsigned max, void* ra, uintptr_t sp, uintptr_t fp, uintptr_t stop_sp) {
  mp_thread_t* t = &mp_tls;
  mp_assert(t->in_profiler && mp_locks_held() == 0);
  if (max == 0) return 0;
  if (t->stack_lo == 0 && t->stack_hi == 0) bounds_unknown(t);
  frames[0] = (uintptr_t)ra;
#ifdef MP_TEST_HOOKS
  /* the fork gate's control: a file held open across the walk, as when rules came from files */
  int held = mp_test_hook("MP_TEST_SAMPLE_OPEN") ? open("/proc/self/maps", O_RDONLY | O_CLOEXEC) : -1;
  if (mp_test_hook("MP_TEST_STACK_HOG")) { /* the stack gates' control: 8 KiB of scratch on the stack, as before */
    volatile uint8_t hog[8192];
    for (size_t i = 0; i < sizeof(hog); i += 512) hog[i] = (uint8_t)i;
    (void)hog[sizeof(hog) - 1];
  }
  if (held >= 0) { /* read as the rules once were, so that the descriptor is open for as long */
    char chunk[256];
    while (read(held, chunk, sizeof(chunk)) > 0) {
    }
  }
  unsigned n = capture(frames, max, ra, sp, fp, stop_sp);
  if (held >= 0) close(held);
  return n;
}

static unsigned capture(uintptr_t* frames, unsigned max, void* ra, uintptr_t sp, uintptr_t fp, uintptr_t stop_sp) {
  mp_thread_t* t = &mp_tls;
#endif
  uintptr_t here = (uintptr_t)__builtin_frame_address(0);
  bool on_own = here >= t->stack_lo && here < t->stack_hi;
#if MP_UNWIND_CFI
  /* On an alternate signal stack (a handler's allocation) the walk is bounded by it up to the
   * signal frame, and by the thread's own stack beyond. */
  uintptr_t hi = on_own ? t->stack_hi : alt_stack_top(here);
  if (hi != 0 && sp > here && sp <= hi) {
    bool complete;
    uintptr_t next_lo = on_own ? 0 : t->stack_lo, cut = stop_sp == 0 ? UINTPTR_MAX : stop_sp;
    /* the walk's state lives in the thread's scratch, not on the sample's stack */
    mp_scratch_t* s = t->scratch != NULL || t->exiting ? t->scratch : (mp_stack_scratch(t), t->scratch);
    if (s == NULL) goto frame_chain; /* an exiting thread that never sampled, or no memory for a scratch */
    memo_use_t* u = &s->use;
    const walk_memo_t* last = &s->memo[s->memo_now];
    bool fits = last->n != 0 && last->hi == hi && last->next_lo == next_lo && last->next_hi == t->stack_hi &&
                last->stop_sp == cut && last->max == max;
    *u = (memo_use_t){.last = fits ? last : NULL, .record = &s->memo[s->memo_now ^ 1]};
    if (u->last == NULL) prefetch_rules((uintptr_t)ra, sp, fp, hi, max); /* with a memo, most steps need no rule */
    s->walk = (mp_unwind_walk_t)MP_UNWIND_WALK_INIT;
    unsigned n = rule_walk(&s->walk, frames, max, (uintptr_t)ra, sp, fp, hi, next_lo, t->stack_hi, cut, &complete, u);
    mp_unwind_walk_end(&s->walk);
    if (!u->hit || u->kept) { /* the memo from now on */
      walk_memo_t* m = u->record;
      m->hi = hi;
      m->next_lo = next_lo;
      m->next_hi = t->stack_hi;
      m->stop_sp = cut;
      m->max = max;
      s->memo_now ^= 1;
    }
#if MP_DEBUG_ON
    if (u->hit && !memo_trusted()) check_memo_walk(frames, n, complete, max, ra, sp, fp, hi, next_lo, t->stack_hi, cut);
#endif
#ifdef MP_TEST_HOOKS
    if (u->hit) atomic_fetch_add(u->kept ? &memo_part : &memo_whole, 1);
    if (!complete) mp_stack_count_fallback();
    if (mp_test_hook("MP_TEST_UNWIND_FP_ONLY")) complete = true; /* the control: the rules' walk alone */
#endif
    if (!complete && stop_sp == 0) n = unwind_tables(frames, n, max); /* libgcc's unwinder knows no cut */
    n = drop_own_frames(frames, n);
#ifdef MP_TEST_HOOKS
    if (mp_test_hook("MP_TEST_UNWIND_CHECK")) check_against_reference(frames, n, max);
#endif
    return n;
  }
#else
  (void)ra; /* the caller put it in frames[0] */
  (void)sp;
  (void)here;
#endif
#if MP_UNWIND_CFI
frame_chain:;
#endif
  bool broken;
  uintptr_t cut = stop_sp == 0 ? UINTPTR_MAX : stop_sp;
  unsigned n = fp_walk(frames, 1, max, fp, cut, &broken);
  /* libgcc's unwinder knows no cut: a stack that is cut stays as the frame walk left it */
  if (n < max && stop_sp == 0 && on_own && (broken || !reached_start(frames, n))) n = unwind_tables(frames, n, max);
  return drop_own_frames(frames, n);
}
