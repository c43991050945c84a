/* Writing a profile to a file, atomically: the snapshot is formatted into a temporary file
 * beside the target (O_EXCL, mode 0600), fsync'd and renamed over it. Any failure removes
 * the temporary file and returns false with errno set; a reader never sees a partial
 * profile. SIGXFSZ is blocked while writing so an RLIMIT_FSIZE overrun is an error
 * (EFBIG), not the death of the process. No profiler lock is held while writing.
 * The whole dump runs with cancellation disabled (cancel.h): open, write, fsync and close are
 * cancellation points, and a thread cancelled there would leave its guard set, the snapshot's
 * memory and descriptor behind, and the temporary file in place. Bracketed here, not in the
 * API, because dumps also run at exit, on SIGTERM and from the periodic thread. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

static atomic_uint tmp_counter;



static bool tmp_name(const char* path, char* out, size_t cap) {
  size_t n = mp_strlen(path);
  char suffix[64] = ".tmp.";
  size_t k = 5;
  k += mp_fmt_u64(suffix + k, (uint64_t)getpid());
  suffix[k++] = '.';
  k += mp_fmt_u64(suffix + k, atomic_fetch_add(&tmp_counter, 1));
  if (n + k + 1 > cap) return false;
  memcpy(out, path, n);
  memcpy(out + n, suffix, k);
  out[n + k] = 0;
  return true;
}

bool mp_dump(const char* path_in, mp_format_t format, bool peak) {
  int cancel = mp_cancel_off();
  mp_thread_t* t = &mp_tls;
  bool guard = t->in_profiler;
  t->in_profiler = true;
  /* the names off the stack, with the output's buffer: a fatal signal's dump runs on whatever
   * stack the signalled thread has left */
  struct names_s {
    char path[MI_PROF_DUMP_PATH_MAX], tmp[MI_PROF_DUMP_PATH_MAX + 64];
  }* names = NULL;
  int err = 0;
  mp_out_t* out = NULL;
  mp_snapshot_t snap;
  memset(&snap, 0, sizeof(snap));

  if (path_in == NULL || path_in[0] == 0) {
    err = EINVAL;
    goto done;
  }
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_DUMP_STACK_HOG")) { /* the signal-stack test's control: 4 KiB more stack, as the names and reads once took */
    volatile uint8_t* hog = __builtin_alloca(4096); /* only when asked: the frame is otherwise the production build's */
    for (size_t i = 0; i < 4096; i += 256) hog[i] = (uint8_t)i;
  }
#endif
  if ((names = mp_os_alloc_transient(sizeof(*names))) == NULL) {
    err = ENOMEM;
    goto done;
  }
  char* path = names->path;
  char* tmp = names->tmp;
  if (!mp_expand_path(path_in, path, sizeof(names->path)) || !tmp_name(path, tmp, sizeof(names->tmp))) {
    err = ENAMETOOLONG;
    goto done;
  }
  mp_table_check();
  snap.interval = (double)mp_state.interval;
  snap.accum = mp_state.accum;
  if (peak) {
    mp_peak_t p;
    mp_table_peak(&p);
    snap.peak = true;
    snap.peak_bytes = p.bytes;
    snap.peak_ns = p.ns;
    snap.rounding = p.rounding;
  } else {
    snap.rounding = mp_table_rounding();
  }
  mp_stats_fill(&snap.stats);
  snap.profiler_resident = mp_profiler_resident();
  if (!mp_snapshot_take(&snap) || (out = mp_os_alloc_transient(sizeof(mp_out_t))) == NULL) {
    err = ENOMEM;
    goto done;
  }

  sigset_t saved;
  mp_sigxfsz_block(&saved);
  out->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (out->fd < 0) {
    err = errno;
  } else {
    (void)fchmod(out->fd, 0600);
    if (format == MP_FORMAT_PROTO) mp_write_proto(out, &snap);
    else mp_write_text(out, &snap);
    mp_out_flush(out);
    err = out->err;
    if (err == 0 && fsync(out->fd) != 0) err = errno;
    if (close(out->fd) != 0 && err == 0) err = errno;
    if (err == 0 && rename(tmp, path) != 0) err = errno;
    if (err != 0) unlink(tmp);
  }
  mp_sigxfsz_restore(&saved);

done:
  if (out != NULL) mp_os_free(out, sizeof(mp_out_t));
  if (names != NULL) mp_os_free(names, sizeof(*names));
  if (snap.rows != NULL) mp_snapshot_free(&snap);
  mp_profiler_leave(t, guard);
  mp_cancel_restore(cancel);
  if (err != 0) errno = err;
  return err == 0;
}
