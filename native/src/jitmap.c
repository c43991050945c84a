/* How far V8's perf map (/tmp/perf-<pid>.map) had been written when a bucket was made.
 *
 * V8 frees JIT code and reuses its addresses for other code while the program runs (an
 * interpreter entry trampoline of a function that tiered up, a module's top-level code after
 * it ran), and the map only ever grows: a later entry at an address says nothing of what ran
 * there earlier. A bucket therefore keeps the map's size at its making, and the profile
 * carries it per sample (label jit_map_bytes); the symboliser names each JavaScript frame by
 * the newest entry written before that size. V8 writes each entry as its code is made, before
 * the code runs, so every frame of a stack captured before the size is read has its entry in
 * the map by then.
 *
 * Only while MIMALLOC_PROF_PERF_MAP is set (run sets it: any of its processes may be Node),
 * and read only when a bucket is made. The file is opened once, found again after a fork
 * (another pid, another map) and never written or seeked: the descriptor is checked to still
 * be the file it was opened on (device and inode) before its size counts, so a program that
 * closes descriptors it did not open and reuses the number loses nothing. /tmp is everyone's:
 * the map is opened without following a link and without blocking (a FIFO planted under the
 * name would otherwise stop malloc for good), and only a regular file of this user counts.
 *
 * The size is the bucket's, taken when its first sample came: a later stack identical in every
 * frame (code of the same layout put at the same addresses) joins the bucket and keeps its
 * older size. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

static _Atomic int map_fd = -1;
static dev_t map_dev;
static ino_t map_ino;
static _Atomic uint64_t retry_at; /* CLOCK_MONOTONIC_COARSE ns before which no open is tried */
static atomic_bool opening;

#define RETRY_NS 5000000ull /* the map appears as V8 starts: until then (a C program: always) an open every 5 ms */

static void try_open(void) {
  uint64_t now = mp_coarse_ns();
  if (now < atomic_load_explicit(&retry_at, memory_order_relaxed)) return;
  if (atomic_exchange_explicit(&opening, true, memory_order_acquire)) return;
  if (atomic_load(&map_fd) < 0) {
    int saved = errno;
    char path[48] = "/tmp/perf-";
    size_t at = strlen(path);
    at += mp_fmt_u64(path + at, (uint64_t)getpid());
    memcpy(path + at, ".map", 5);
    /* a sampled malloc may come here: raw system calls, no cancellation point (cancel.h) */
    int fd = mp_open_nocancel(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid()) {
      map_dev = st.st_dev;
      map_ino = st.st_ino;
      atomic_store(&map_fd, fd);
    } else {
      if (fd >= 0) mp_close_nocancel(fd);
      atomic_store_explicit(&retry_at, now + RETRY_NS, memory_order_relaxed);
    }
    errno = saved;
  }
  atomic_store_explicit(&opening, false, memory_order_release);
}

/* perf_map is set at load, or once by the addon (never cleared): read and written atomically */
void mi_prof_jit_map_track(void) { __atomic_store_n(&mp_env.perf_map, true, __ATOMIC_RELAXED); }

uint64_t mp_jit_map_bytes(void) {
  if (!__atomic_load_n(&mp_env.perf_map, __ATOMIC_RELAXED)) return 0;
  int fd = atomic_load(&map_fd);
  if (fd < 0) {
    try_open();
    fd = atomic_load(&map_fd);
    if (fd < 0) return 0;
  }
  struct stat st;
  int saved = errno;
  bool ours = fstat(fd, &st) == 0 && st.st_dev == map_dev && st.st_ino == map_ino;
  errno = saved;
  if (!ours) { /* closed behind our back, its number perhaps reused: not ours to close */
    int expected = fd;
    atomic_compare_exchange_strong(&map_fd, &expected, -1);
    return 0;
  }
  return st.st_size > 0 ? (uint64_t)st.st_size : 0;
}

void mp_jit_child_reinit(void) {
  /* the parent's map, still open here: this process writes another (or none); closed only if
   * the number is still that file (the program may have closed it and reused the number) */
  int fd = atomic_exchange(&map_fd, -1);
  struct stat st;
  int saved = errno;
  if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == map_dev && st.st_ino == map_ino) mp_close_nocancel(fd);
  errno = saved;
  atomic_store(&opening, false);
  atomic_store(&retry_at, 0);
}
