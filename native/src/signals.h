/* What signals.c shares with the sampler's sections (sampler.c enter_sample, leave_sample):
 * where the outermost section on this thread runs, so that a section a signal handler left
 * with siglongjmp (an interpreter's timer, a probe-and-recover handler) is recognised as left
 * instead of blocking samples and fatal signals on its thread for good.
 *
 * The rule (the stack grows down; every file but interpose.c keeps frame pointers): while a
 * section runs in function F, all code on this thread's stack runs in F or below it (its
 * callees, or a handler that interrupted one of them), so
 *  - a frame address (__builtin_frame_address) of code that runs now is below F's, and
 *  - an interrupted stack pointer is at most F's frame address.
 * A frame address at or above F's, or an interrupted stack pointer above it, or the stack
 * pointer of an allocation's caller (caller_t.sp) at or above it, means F is no longer on the
 * stack: the section was left without leave_sample. (A frame address is compared only when
 * the caller's is not known: it finds a section left by a jump only from as deep a call.) Only addresses on the
 * thread's own stack (its known bounds) are compared: a handler on an alternate stack or code
 * on a coroutine's stack may sit anywhere, and then nothing is concluded. */
#ifndef MP_SIGNALS_H
#define MP_SIGNALS_H

#include "internal.h"

#pragma GCC visibility push(hidden)

/* The frame address of the function that runs this thread's outermost sampler section; 0
 * outside one. Stored before in_sample is set and cleared before in_sample is put back. */
extern __thread uintptr_t mp_sample_frame __attribute__((tls_model("initial-exec")));

/* At a section's entry, with in_sample found set and `frame` the entering function's frame
 * address: whether in_sample is a leftover of a section left by a jump (no section of this
 * thread runs above `frame`), rather than a section this entry nests in (a handler's
 * allocation in the instant between in_sample and in_profiler). */
static inline bool mp_sample_stale(const mp_thread_t* t, uintptr_t frame) {
  uintptr_t f = mp_sample_frame;
  if (f == 0) return true; /* leave_sample cleared it: in_sample is being put back, or was left so */
  return t->stack_lo < t->stack_hi && t->stack_lo <= f && f < t->stack_hi && t->stack_lo <= frame && frame < t->stack_hi &&
         frame >= f;
}

/* Called where in_profiler is found set at an allocation's or free's entry, with `frame` the
 * caller's stack pointer (caller_t.sp: the program's, for a call from the program), or else
 * the entering function's frame address: when the thread's sampler section was left by a jump
 * (and it is known to hold no profiler lock), clears the section's flags, acts on a signal
 * deferred to its end, and returns true: the caller then samples as usual. Else false: a
 * profiler section really runs below, the caller takes the plain path. */
bool mp_sample_recover(mp_thread_t* t, uintptr_t frame);

#pragma GCC visibility pop

#endif
