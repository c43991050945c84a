/* mpp-rusage: runs one command and reports what wait4() says it used, as one JSON line.
 *
 *   mpp-rusage [--report-fd N] [--preload LIB] [--timeout SECONDS] -- CMD [ARGS...]
 *   mpp-rusage --identify
 *
 * Used by `mimalloc-pprof compare`, which cannot get a child's rusage from Node. The helper
 * itself never runs on the allocator under test: LD_PRELOAD=LIB is set in the child only,
 * between fork and exec. The child gets its own process group, so that a timeout (SIGKILL)
 * or a forwarded SIGINT/SIGTERM/SIGHUP reaches the whole command. Wall time is CLOCK_MONOTONIC
 * from just before fork to wait4's return; CPU time, peak RSS, page faults and context switches
 * are wait4's rusage: the command's own process plus the descendants it waited for.
 *
 * The report (fd N, default 3 when open, else stdout), integers only:
 *   {"wall_ns":…,"utime_us":…,"stime_us":…,"maxrss_kib":…,"minflt":…,"majflt":…,"nvcsw":…,
 *    "nivcsw":…,"exited":0|1,"exit_code":…,"signal":…,"timed_out":0|1,"exec_errno":…,"pid":…}
 * exec_errno is 0 unless exec failed (then the command "exited" 127). The helper's own exit
 * status is 0 when it produced a report, 2 on bad usage, 1 when fork/wait failed.
 *
 * --identify prints which allocator serves malloc in this process, by symbols that only
 * that allocator exports: {"allocator":"mimalloc|jemalloc|tcmalloc|glibc","mi_version":…,
 * "mimalloc_pprof":0|1}. Run under LD_PRELOAD, it proves that a preload took effect.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t child_pid = 0;
static volatile sig_atomic_t timed_out = 0;

static void on_signal(int sig) {
  if (sig == SIGALRM) {
    timed_out = 1;
    if (child_pid > 0) kill(-child_pid, SIGKILL);
    return;
  }
  if (child_pid > 0) kill(-child_pid, sig);
}

static int usage(const char* why) {
  fprintf(stderr, "mpp-rusage: %s\nusage: mpp-rusage [--report-fd N] [--preload LIB] [--timeout SECONDS] -- CMD [ARGS...]\n"
                  "       mpp-rusage --identify\n", why);
  return 2;
}

static int identify(void) {
  const char* allocator = "glibc";
  int mi = 0;
  int (*mi_version)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mi_version");
  if (mi_version != NULL) {
    allocator = "mimalloc";
    mi = mi_version();
  } else if (dlsym(RTLD_DEFAULT, "mallctl") != NULL) {
    allocator = "jemalloc";
  } else if (dlsym(RTLD_DEFAULT, "tc_version") != NULL || dlsym(RTLD_DEFAULT, "MallocExtension_GetStats") != NULL) {
    allocator = "tcmalloc";
  }
  int pprof = dlsym(RTLD_DEFAULT, "mi_prof_start") != NULL;
  printf("{\"allocator\":\"%s\",\"mi_version\":%d,\"mimalloc_pprof\":%d}\n", allocator, mi, pprof);
  return 0;
}

static int64_t tv_us(struct timeval tv) { return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec; }

int main(int argc, char** argv) {
  int report_fd = -1;
  const char* preload = NULL;
  double timeout = 0;
  int i = 1;
  for (; i < argc; i++) {
    const char* a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (strcmp(a, "--identify") == 0) return identify();
    if (i + 1 >= argc) return usage("an option needs a value");
    if (strcmp(a, "--report-fd") == 0) {
      char* end;
      long v = strtol(argv[++i], &end, 10);
      if (*end != 0 || v < 0 || v > 1024) return usage("--report-fd needs a file descriptor number");
      report_fd = (int)v;
    } else if (strcmp(a, "--preload") == 0) {
      preload = argv[++i];
    } else if (strcmp(a, "--timeout") == 0) {
      char* end;
      timeout = strtod(argv[++i], &end);
      if (*end != 0 || !(timeout >= 0) || timeout > 1e6) return usage("--timeout needs seconds");
    } else {
      return usage("unknown option");
    }
  }
  if (i >= argc) return usage("no command given");
  char** cmd = argv + i;

  if (report_fd < 0) report_fd = fcntl(3, F_GETFD) >= 0 ? 3 : 1;
  /* the report channel is not the command's business */
  if (report_fd > 2) fcntl(report_fd, F_SETFD, FD_CLOEXEC);

  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) {
    perror("mpp-rusage: pipe");
    return 1;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  sigaction(SIGALRM, &sa, NULL);

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) {
    perror("mpp-rusage: fork");
    return 1;
  }
  if (pid == 0) {
    setpgid(0, 0);
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGINT, &dfl, NULL);
    sigaction(SIGTERM, &dfl, NULL);
    sigaction(SIGHUP, &dfl, NULL);
    sigaction(SIGALRM, &dfl, NULL);
    if (preload != NULL && preload[0] != 0) setenv("LD_PRELOAD", preload, 1);
    execvp(cmd[0], cmd);
    int e = errno;
    ssize_t w = write(errpipe[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  setpgid(pid, pid); /* both sides, so that a signal right after fork finds the group */
  child_pid = pid;
  close(errpipe[1]);
  if (timeout > 0) {
    struct itimerval it;
    memset(&it, 0, sizeof it);
    it.it_value.tv_sec = (time_t)timeout;
    it.it_value.tv_usec = (suseconds_t)((timeout - (double)(time_t)timeout) * 1e6);
    if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0) it.it_value.tv_usec = 1;
    setitimer(ITIMER_REAL, &it, NULL);
  }
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0) {
    if (errno != EINTR) {
      perror("mpp-rusage: wait4");
      return 1;
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  struct itimerval off;
  memset(&off, 0, sizeof off);
  setitimer(ITIMER_REAL, &off, NULL);
  child_pid = 0;

  int exec_errno = 0;
  if (read(errpipe[0], &exec_errno, sizeof exec_errno) != (ssize_t)sizeof exec_errno) exec_errno = 0;
  close(errpipe[0]);

  int64_t wall_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
  char line[1024];
  int n = snprintf(line, sizeof line,
                   "{\"wall_ns\":%" PRId64 ",\"utime_us\":%" PRId64 ",\"stime_us\":%" PRId64 ",\"maxrss_kib\":%ld,"
                   "\"minflt\":%ld,\"majflt\":%ld,\"nvcsw\":%ld,\"nivcsw\":%ld,\"exited\":%d,\"exit_code\":%d,"
                   "\"signal\":%d,\"timed_out\":%d,\"exec_errno\":%d,\"pid\":%d}\n",
                   wall_ns, tv_us(ru.ru_utime), tv_us(ru.ru_stime), ru.ru_maxrss, ru.ru_minflt, ru.ru_majflt, ru.ru_nvcsw,
                   ru.ru_nivcsw, WIFEXITED(status) ? 1 : 0, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                   WIFSIGNALED(status) ? WTERMSIG(status) : 0, timed_out ? 1 : 0, exec_errno, (int)pid);
  for (int off2 = 0; off2 < n;) {
    ssize_t w = write(report_fd, line + off2, (size_t)(n - off2));
    if (w < 0) {
      if (errno == EINTR) continue;
      perror("mpp-rusage: writing the report");
      return 1;
    }
    off2 += (int)w;
  }
  return 0;
}
