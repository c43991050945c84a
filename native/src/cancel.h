/* Thread cancellation (pthread_cancel) and the library.
 *
 * The rule: a cancel is never acted on inside the malloc family, C++ new/delete or any
 * mi_prof_* / mi_memory_* call, so no cancel can leave a profiler lock held, a reentrancy
 * guard set, or a program's lock held across a malloc (POSIX does not make malloc a
 * cancellation point, so programs call it holding mutexes with no cleanup handler).
 *
 * How it holds:
 *  - every public entry point that calls anything (takes a lock, writes a file, runs a
 *    user's callback) runs between mp_cancel_off() and mp_cancel_restore(): a cancel that
 *    arrives meanwhile stays pending and is acted on at the program's next cancellation point
 *    (or, under asynchronous cancellation, at the restore, once every lock is released), as
 *    POSIX intends. Entry points that only read an atomic or this thread's TLS call nothing
 *    and need no bracket;
 *  - mi_prof_start* and the dumps are cancellation points at their entry, mi_prof_stop at its
 *    return (api.c): outside the bracket, where nothing is held, so that a thread that only
 *    starts and stops the profiler can be cancelled, always with the profiler stopped;
 *  - code reachable from the allocation paths (and the lock-holding pauses) uses no
 *    cancellable libc wrapper: it writes and sleeps through syscall(), which glibc does not
 *    make a cancellation point (mp_write_nocancel, mp_pause_nocancel). The sample path's own
 *    files (stack.c, unwind.c) follow the same rule;
 *  - neither helper is used on a malloc fast path: pthread_setcancelstate is an atomic
 *    read-modify-write on the thread's descriptor (a plain load when the state is already the
 *    one asked for), cheap next to a lifecycle call, but not free.
 *
 * Nesting: mp_cancel_restore puts back the state mp_cancel_off found, so a bracketed call made
 * inside another (mi_memory_tracking_set_enabled -> mi_prof_memory_events_enable, a dump at
 * exit) leaves it disabled until the outer bracket ends. */
#ifndef MP_CANCEL_H
#define MP_CANCEL_H

#include <stddef.h>
#include <sys/types.h>

#pragma GCC visibility push(hidden)

/* Disables cancellation for the calling thread; returns what to hand mp_cancel_restore. */
int mp_cancel_off(void);
/* Puts back the state mp_cancel_off found. */
void mp_cancel_restore(int saved);

/* write(2) that is never a cancellation point (raw system call); retries EINTR; returns the
 * bytes written by the last attempt, or -1 with errno set. */
ssize_t mp_write_nocancel(int fd, const void* buf, size_t len);
/* Sleeps about ns nanoseconds (< 1 s) without being a cancellation point. */
void mp_pause_nocancel(long ns);
/* open(2) relative to the working directory, read(2) (retrying EINTR) and close(2), none of
 * them a cancellation point (raw system calls): for code reachable from the allocation paths
 * and the fork handlers, where libc's wrappers are cancellation points. -1 with errno set on
 * failure. */
int mp_open_nocancel(const char* path, int flags, int mode);
ssize_t mp_read_nocancel(int fd, void* buf, size_t len);
void mp_close_nocancel(int fd);

#pragma GCC visibility pop

#endif
