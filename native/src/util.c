/* Small utilities that never allocate: a spinlock, number formatting, buffered fd output,
 * warnings on stderr, cancellation brackets. Safe before main, inside malloc, and in a forked
 * child. No function here is a cancellation point (cancel.h): output goes through
 * mp_write_nocancel, /proc reads through raw system calls. */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

/* ---- cancellation (cancel.h) ------------------------------------------------------------ */
#define CANCEL_UNTOUCHED (-1) /* mp_cancel_off changed nothing: the test builds' control */

int mp_cancel_off(void) {
#ifdef MP_TEST_HOOKS
  /* the cancel gate's control (test/reliability/hostile-cancel.test.ts): entry points stay
   * cancellable */
  if (mp_test_hook("MP_TEST_CANCELLABLE_API")) return CANCEL_UNTOUCHED;
#endif
  int old = PTHREAD_CANCEL_ENABLE;
  (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  return old;
}

void mp_cancel_restore(int saved) {
  if (saved == CANCEL_UNTOUCHED) return;
  int ignored;
  (void)pthread_setcancelstate(saved, &ignored);
}

ssize_t mp_write_nocancel(int fd, const void* buf, size_t len) {
  for (;;) {
    long w = syscall(SYS_write, fd, buf, len); /* glibc's syscall() is no cancellation point */
    if (w >= 0 || errno != EINTR) return (ssize_t)w;
  }
}

void mp_pause_nocancel(long ns) {
  struct timespec pause = {0, ns};
  (void)syscall(SYS_nanosleep, &pause, NULL); /* an early wake (a signal) only shortens it */
}

int mp_open_nocancel(const char* path, int flags, int mode) { return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode); }

ssize_t mp_read_nocancel(int fd, void* buf, size_t len) {
  for (;;) {
    long n = syscall(SYS_read, fd, buf, len);
    if (n >= 0 || errno != EINTR) return (ssize_t)n;
  }
}

void mp_close_nocancel(int fd) { (void)syscall(SYS_close, fd); }

/* ---- spinlock ---------------------------------------------------------------------- */
/* Critical sections are a few hash operations long, so spinning beats sleeping; yield
 * after a while in case the holder was descheduled. fork() is handled by the caller
 * taking every lock in the prepare handler (process.c). debug.h states the discipline that
 * debug builds check here. */
/* At a thread's first lock (depth 0), while it blocks the real-time signals around its
 * sections (signals.c mp_signals_section_begin): the bits it blocked, before the lock counts. */
static inline uint64_t section_begins(unsigned depth) {
  return __builtin_expect(mp_section_block_until != 0, 0) && depth == 0 ? mp_signals_section_begin() : 0;
}

#if MP_DEBUG_ON
#define MP_MAX_HELD 96
static __thread struct {
  unsigned depth;
  const mp_lock_t* held[MP_MAX_HELD];
} held_locks __attribute__((tls_model("initial-exec")));

void mp_assert_fail(const char* cond, const char* file, int line) {
  char num[24];
  num[mp_fmt_u64(num, (uint64_t)line)] = 0;
  char msg[512] = "assertion failed: ";
  size_t n = mp_strlen(msg);
  const char* parts[] = {cond, " (", file, ":", num, ")"};
  for (size_t k = 0; k < sizeof(parts) / sizeof(*parts); k++)
    for (size_t i = 0; parts[k][i] != 0 && n < sizeof(msg) - 1; i++) msg[n++] = parts[k][i];
  msg[n] = 0;
  mp_write_stderr(msg);
  abort();
}

static void note_lock(const mp_lock_t* lock) {
  mp_assert(lock->level != 0);
  mp_assert(mp_tls.in_profiler);
  if (held_locks.depth > 0) {
    const mp_lock_t* top = held_locks.held[held_locks.depth - 1];
    mp_assert(lock->level > top->level || (lock->level == top->level && lock > top));
  }
  mp_assert(held_locks.depth < MP_MAX_HELD);
  uint64_t section_bits = section_begins(held_locks.depth);
  held_locks.held[held_locks.depth++] = lock;
  atomic_signal_fence(memory_order_seq_cst);
  if (section_bits != 0) mp_section_blocked |= section_bits;
}

static void note_unlock(const mp_lock_t* lock) {
  mp_assert(held_locks.depth > 0 && held_locks.held[held_locks.depth - 1] == lock);
  held_locks.depth--;
}

void mp_locks_forget(void) { held_locks.depth = 0; }
unsigned mp_locks_held(void) { return held_locks.depth; }
static inline void note_released(void) { atomic_signal_fence(memory_order_seq_cst); } /* as below */
#else
/* Production builds count them: a sampler section that a signal handler left by siglongjmp is
 * taken up again only when it held no lock, and a signal that lands while one is held is held
 * back (signals.c). Counted before a lock is tried and after it is released, so that 0 is
 * never said of a thread that holds one. One TLS add each way. */
static __thread unsigned held_count __attribute__((tls_model("initial-exec")));
static inline void note_lock(const mp_lock_t* lock) {
  (void)lock;
  uint64_t section_bits = section_begins(held_count);
  held_count++;
  atomic_signal_fence(memory_order_seq_cst);
  if (section_bits != 0) mp_section_blocked |= section_bits;
}
static inline void note_unlock(const mp_lock_t* lock) { (void)lock; }
static inline void note_released(void) {
  atomic_signal_fence(memory_order_seq_cst);
  held_count--;
  atomic_signal_fence(memory_order_seq_cst); /* stored before mp_held_signals is read: a signal
                                                 between would be held with no release to come */
}
void mp_locks_forget(void) { held_count = 0; }
unsigned mp_locks_held(void) { return held_count; }
#endif

/* The real-time signals that the section ending with this release blocked (signals.c
 * mp_signals_section_begin), taken while it still counts its last lock: a handler that runs
 * between here and their unblocking (one held back and delivered, or one that comes once the
 * count is 0) finds them blocked and leaves them to this release, whatever sections or forks
 * it makes. */
static inline uint64_t take_section_bits(void) {
  if (__builtin_expect(mp_section_blocked == 0, 1) || mp_locks_held() != 1) return 0;
  uint64_t bits = mp_section_blocked;
  mp_section_blocked = 0;
  atomic_signal_fence(memory_order_seq_cst);
  return bits;
}

/* A lock given up (released, or not taken after all): uncounted only once free, then the
 * signals held back meanwhile, and those the section blocked, once this thread holds none. */
static inline void uncount(const mp_lock_t* lock) {
  uint64_t section_bits = take_section_bits();
#ifdef MP_TEST_HOOKS
  if (mp_locks_held() == 1) mp_test_steal_held(0);
#endif
  note_unlock(lock);
  note_released();
#ifdef MP_TEST_HOOKS
  if (mp_locks_held() == 0) mp_test_steal_held(1);
#endif
  if (__builtin_expect((mp_held_signals | section_bits) != 0, 0)) {
    if (mp_locks_held() == 0) mp_signals_release(section_bits);
    else mp_section_blocked |= section_bits; /* a handler took a lock and kept it: its release */
  }
}

static inline bool try_take(mp_lock_t* lock) {
  return !atomic_load_explicit(&lock->held, memory_order_relaxed) &&
         !atomic_exchange_explicit(&lock->held, 1, memory_order_acquire);
}

void mp_lock(mp_lock_t* lock) {
  note_lock(lock);
  for (unsigned spins = 0; !try_take(lock); spins++) {
    if (spins > 64) sched_yield();
    else mp_spin_hint();
  }
}

/* Counted before the take, as mp_lock does: a signal in between is held back (signals.c). */
bool mp_lock_briefly(mp_lock_t* lock) {
  note_lock(lock);
  for (unsigned spins = 0; spins <= 256; spins++) { /* a critical section's length, several times over */
    if (try_take(lock)) return true;
    mp_spin_hint();
  }
  uncount(lock);
  return false;
}

bool mp_lock_try(mp_lock_t* lock) {
  note_lock(lock);
  if (try_take(lock)) return true;
  uncount(lock);
  return false;
}

/* Uncounted only once released (debug builds' count too): a signal in between is held back. */
void mp_unlock(mp_lock_t* lock) {
  atomic_store_explicit(&lock->held, 0, memory_order_release);
  atomic_signal_fence(memory_order_seq_cst);
  uncount(lock);
}

/* For the fork child, where only this thread exists: every lock is free again. */
void mp_lock_reset(mp_lock_t* lock) { atomic_store_explicit(&lock->held, 0, memory_order_relaxed); }

/* ---- formatting --------------------------------------------------------------------- */
size_t mp_fmt_u64(char* buf, uint64_t v) {
  char tmp[24];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

size_t mp_fmt_hex_bytes(char* buf, const uint8_t* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    buf[2 * i] = digits[bytes[i] >> 4];
    buf[2 * i + 1] = digits[bytes[i] & 15];
  }
  return 2 * n;
}

/* ---- writing files past RLIMIT_FSIZE ---------------------------------------------------------- */
void mp_sigxfsz_block(sigset_t* before) {
  sigset_t block;
  sigemptyset(&block);
  sigaddset(&block, SIGXFSZ);
  pthread_sigmask(SIG_BLOCK, &block, before);
}

void mp_sigxfsz_restore(const sigset_t* before) {
  sigset_t pending, block;
  sigemptyset(&block);
  sigaddset(&block, SIGXFSZ);
  /* one our own write raised: consumed, so that it is not delivered on unblocking */
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ) && !sigismember(before, SIGXFSZ)) {
    struct timespec zero = {0, 0};
    (void)sigtimedwait(&block, NULL, &zero);
  }
  pthread_sigmask(SIG_SETMASK, before, NULL);
}

/* ---- ELF notes ------------------------------------------------------------------------------ */
size_t mp_note_build_id(const void* notes, size_t size, size_t align, const uint8_t** id) {
  const uint8_t* p = notes;
  size_t left = size;
  align = align == 8 ? 8 : 4;
  while (left >= sizeof(ElfW(Nhdr))) {
    ElfW(Nhdr) n;
    memcpy(&n, p, sizeof(n));
    size_t name = ((size_t)n.n_namesz + align - 1) & ~(align - 1);
    size_t desc = ((size_t)n.n_descsz + align - 1) & ~(align - 1);
    if (sizeof(n) + name + n.n_descsz > left) break;
    const uint8_t* nm = p + sizeof(n);
    if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && memcmp(nm, "GNU", 4) == 0) {
      *id = nm + name;
      return n.n_descsz;
    }
    if (sizeof(n) + name + desc >= left) break;
    p += sizeof(n) + name + desc;
    left -= sizeof(n) + name + desc;
  }
  return 0;
}

size_t mp_fmt_hex(char* buf, uint64_t v) {
  static const char digits[] = "0123456789abcdef";
  char tmp[16];
  size_t n = 0;
  do {
    tmp[n++] = digits[v & 15];
    v >>= 4;
  } while (v != 0);
  for (size_t i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
  return n;
}

size_t mp_strlen(const char* s) {
  size_t n = 0;
  while (s[n] != 0) n++;
  return n;
}

/* ---- stderr ---------------------------------------------------------------------------- */
static void write_all(int fd, const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = mp_write_nocancel(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

void mp_write_stderr(const char* msg) {
  char line[1024];
  static const char prefix[] = "mimalloc-pprof: ";
  size_t n = sizeof(prefix) - 1;
  memcpy(line, prefix, n);
  for (size_t i = 0; msg[i] != 0 && n < sizeof(line) - 1; i++) line[n++] = msg[i];
  line[n++] = '\n';
  int saved = errno;
  write_all(2, line, n);
  errno = saved;
}

void mp_warnf2(const char* a, const char* b, const char* c) {
  char line[900];
  size_t n = 0;
  const char* parts[3] = {a, b, c};
  for (int k = 0; k < 3; k++)
    for (size_t i = 0; parts[k] != NULL && parts[k][i] != 0 && n < sizeof(line) - 1; i++)
      line[n++] = parts[k][i];
  line[n] = 0;
  mp_write_stderr(line);
}

bool mp_expand_path(const char* path, char* out, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; path[i] != 0; i++) {
    if (path[i] == '%' && path[i + 1] == 'p') {
      char num[24];
      size_t len = mp_fmt_u64(num, (uint64_t)getpid());
      if (n + len >= cap) return false;
      memcpy(out + n, num, len);
      n += len;
      i++;
    } else {
      if (n + 1 >= cap) return false;
      out[n++] = path[i];
    }
  }
  out[n] = 0;
  return n > 0;
}

/* ---- buffered output ----------------------------------------------------------------- */
void mp_out_flush(mp_out_t* out) {
  size_t off = 0;
  while (off < out->len && out->err == 0) {
    ssize_t w = mp_write_nocancel(out->fd, out->buf + off, out->len - off);
    if (w < 0) {
      out->err = errno;
    } else if (w == 0) {
      out->err = EIO;
    } else {
      off += (size_t)w;
      out->written += (uint64_t)w;
    }
  }
  out->len = 0;
}

void mp_out_bytes(mp_out_t* out, const void* data, size_t len) {
  const char* p = data;
  while (len > 0 && out->err == 0) {
    size_t room = sizeof(out->buf) - out->len;
    size_t k = len < room ? len : room;
    memcpy(out->buf + out->len, p, k);
    out->len += k;
    p += k;
    len -= k;
    if (out->len == sizeof(out->buf)) mp_out_flush(out);
  }
}

void mp_out_str(mp_out_t* out, const char* s) { mp_out_bytes(out, s, mp_strlen(s)); }

void mp_out_u64(mp_out_t* out, uint64_t v) {
  char buf[24];
  mp_out_bytes(out, buf, mp_fmt_u64(buf, v));
}

void mp_out_i64(mp_out_t* out, int64_t v) {
  if (v < 0) {
    mp_out_bytes(out, "-", 1);
    mp_out_u64(out, (uint64_t)0 - (uint64_t)v);
  } else {
    mp_out_u64(out, (uint64_t)v);
  }
}

void mp_out_hex(mp_out_t* out, uint64_t v) {
  char buf[20] = {'0', 'x'};
  mp_out_bytes(out, buf, 2 + mp_fmt_hex(buf + 2, v));
}

/* The process's peak resident set (VmHWM in /proc/self/status), in bytes; 0 when unknown.
 * Read without allocating: it goes into dumps, which run compares across processes. Raw system
 * calls: no cancellation point even outside a dump's bracket. */
uint64_t mp_process_start_ms;

void mp_note_process_start(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  mp_process_start_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Read in small pieces: a fatal signal's dump calls it on whatever stack the signalled thread
 * has left (the key may straddle two pieces: the tail of one is kept before the next). */
uint64_t mp_peak_rss(void) {
  static const char key[] = "\nVmHWM:";
  enum { KEY = sizeof(key) - 1, PIECE = 256 };
  int fd = mp_open_nocancel("/proc/self/status", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return 0;
  char buf[KEY + PIECE + 1];
  size_t kept = 0;
  bool found = false;
  uint64_t kb = 0;
  for (;;) {
    ssize_t n = mp_read_nocancel(fd, buf + kept, PIECE);
    if (n <= 0) break;
    size_t len = kept + (size_t)n, i = 0;
    buf[len] = 0;
    if (!found) {
      for (; i + KEY <= len && memcmp(buf + i, key, KEY) != 0; i++) {}
      if (i + KEY > len) { /* not in this piece: its last KEY - 1 bytes may begin it */
        kept = len < KEY - 1 ? len : KEY - 1;
        memmove(buf, buf + len - kept, kept);
        continue;
      }
      found = true;
      i += KEY;
    }
    for (; i < len && buf[i] != '\n'; i++) /* the figure may itself straddle pieces */
      if (buf[i] >= '0' && buf[i] <= '9') kb = kb * 10 + (uint64_t)(buf[i] - '0');
    if (i < len) break;
    kept = 0;
  }
  mp_close_nocancel(fd);
  return found ? kb * 1024 : 0;
}

unsigned mp_struct_version(const void* s, size_t size_now, size_t size_v1) {
  uint32_t head[2] = {0, 0}; /* size, version */
  if (s != NULL) memcpy(head, s, sizeof(head));
  unsigned version = s == NULL ? 0 : head[0] == size_now && head[1] == 2 ? 2 : head[0] == size_v1 && head[1] == 1 ? 1 : 0;
  if (version == 0) errno = EINVAL;
  return version;
}

uint64_t mp_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int64_t mp_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

bool mp_wait_turn(int64_t* deadline, int64_t limit_ns) {
  int64_t now = mp_monotonic_ns();
  if (*deadline == 0) *deadline = now + limit_ns;
  if (now > *deadline) return false;
  sched_yield();
  return true;
}
