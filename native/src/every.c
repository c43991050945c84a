/* Periodic profiles (MIMALLOC_PROF_DUMP_EVERY=milliseconds with MIMALLOC_PROF_DUMP_EVERY_PATH=
 * a path whose "%n" is the profile's number and "%p" the pid): one thread of the library's own
 * wakes every interval and dumps the profile (proto) while the profiler runs.
 *
 * The thread never touches the program: it is made with every signal blocked (so no signal
 * meant for the program is delivered to it), it leaves its own allocations out of profiles
 * (mi_prof_thread_exclude), and it uses only the dump's path (OS memory, no malloc). It is
 * started by the image that loads the library (an exec'd program starts its own); a forked
 * child without exec has none, since a thread cannot be made safely inside fork. A dump that
 * fails is said once. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "cancel.h"
#include "internal.h"

static char every_path[MI_PROF_DUMP_PATH_MAX];
static uint64_t every_ms;

/* `template` with "%n" replaced by n (the first one); "%p" is left for mp_dump. */
static bool numbered(const char* template, uint64_t n, char* out, size_t cap) {
  const char* at = strstr(template, "%n");
  size_t len = mp_strlen(template);
  if (at == NULL) {
    if (len + 1 > cap) return false;
    memcpy(out, template, len + 1);
    return true;
  }
  char digits[24];
  size_t d = mp_fmt_u64(digits, n);
  size_t head = (size_t)(at - template);
  if (len - 2 + d + 1 > cap) return false;
  memcpy(out, template, head);
  memcpy(out + head, digits, d);
  memcpy(out + head + d, at + 2, len - head - 2 + 1);
  return true;
}

static void* every_main(void* arg) {
  (void)arg;
  /* Nothing outside the library has this thread's handle, so nothing cancels it; its dumps
   * bracket themselves anyway (cancel.h). Disabled for good all the same: its nanosleep would
   * be the only cancellation point. */
  (void)mp_cancel_off();
  (void)prctl(PR_SET_NAME, "mpp-every", 0, 0, 0);
  (void)mi_prof_thread_exclude(true);
  bool warned = false;
  struct timespec step = {(time_t)(every_ms / 1000), (long)(every_ms % 1000) * 1000000L};
  for (uint64_t n = 1;; ) {
    while (nanosleep(&step, &step) != 0) { /* resumed after a stop signal: sleep the rest */ }
    step.tv_sec = (time_t)(every_ms / 1000);
    step.tv_nsec = (long)(every_ms % 1000) * 1000000L;
    if (!atomic_load(&mp_state.running)) continue;
    char path[MI_PROF_DUMP_PATH_MAX];
    if (!numbered(every_path, n, path, sizeof(path))) break;
    if (mp_dump(path, MP_FORMAT_PROTO, false)) {
      n++;
    } else if (!warned) {
      warned = true;
      mp_warnf2("cannot write a periodic profile to ", path, " (MIMALLOC_PROF_DUMP_EVERY): the next ones are tried, failures not said again");
    }
  }
  return NULL;
}

void mp_every_start(void) {
  const char* ms = mp_getenv("MIMALLOC_PROF_DUMP_EVERY");
  const char* path = mp_getenv("MIMALLOC_PROF_DUMP_EVERY_PATH");
  if (ms == NULL || ms[0] == 0) return;
  uint64_t v = 0;
  const char* c = ms;
  for (; *c >= '0' && *c <= '9' && v < 100000000u; c++) v = v * 10 + (uint64_t)(*c - '0');
  size_t plen = path == NULL ? 0 : mp_strlen(path);
  if (*c != 0 || v < 10 || v >= 100000000u || plen == 0 || plen >= sizeof(every_path)) {
    mp_warnf2("invalid value for MIMALLOC_PROF_DUMP_EVERY (milliseconds, at least 10, with MIMALLOC_PROF_DUMP_EVERY_PATH): ", ms,
              "; no periodic profiles");
    return;
  }
  every_ms = v;
  memcpy(every_path, path, plen + 1);
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved); /* the thread starts with every signal blocked */
  pthread_attr_t attr;
  pthread_t t;
  bool made = pthread_attr_init(&attr) == 0 && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
              pthread_create(&t, &attr, every_main, NULL) == 0;
  pthread_attr_destroy(&attr);
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  if (!made) mp_write_stderr("MIMALLOC_PROF_DUMP_EVERY: the thread could not be made; no periodic profiles");
}
