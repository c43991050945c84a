/* Threads: learning that a thread ends, the registry of sampling threads, and creation
 * ordinals.
 *
 * Thread exit. mimalloc deletes a thread's heaps, the sample heap among them, from its own
 * pthread key destructor. Every sample taken after that point on the thread must not touch
 * the sample heap (it is dropped and counted). The profiler learns of the end from a key
 * destructor of its own that runs first, whatever made the thread (pthread_create, C11
 * thrd_create, glibc's helper threads, a main thread ending with pthread_exit):
 *  - glibc runs key destructors in key index order and gives each new key the lowest free
 *    index, so the key created first is destroyed first;
 *  - pthread_key_create is interposed here, and creates the profiler's key before it creates
 *    anyone else's, mimalloc's included (its constructor runs before ours, but every call
 *    made after relocation reaches this wrapper);
 *  - the key's value is set when a thread registers, so the destructor runs for exactly the
 *    threads that may hold a sample heap.
 *
 * The registry. Every thread that has drawn a countdown is on one list (linked through its
 * mp_thread_t, which lives in static TLS), so that a start, or exact counters turned on,
 * can send every thread to its slow path at once (mp_threads_resync). A thread leaves the
 * list in its key destructor, before its TLS goes away; a fork child keeps only itself.
 *
 * Creation ordinals: pthread_create is wrapped so that each thread gets an ordinal assigned
 * in its parent (seeded streams repeat when threads are created in the same order). The
 * wrapper's start routine is the root frame of such threads; stack.c leaves it out. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>
#include <sched.h>
#include <threads.h>
#include <time.h>

#include "cancel.h"
#include "internal.h"

/* glibc exports the implementation under this name too (libstdc++ uses it); calling it
 * directly needs no dlsym, so the wrapper works inside mimalloc's own constructor. */
#ifdef __GLIBC__
extern int __pthread_key_create(pthread_key_t* key, void (*destructor)(void*));
#else
/* musl exports no such name: its pthread_key_create, found once past this library (musl's
 * dlsym does not allocate, so this works inside mimalloc's constructor too). */
static int mp_next_key_create(pthread_key_t* key, void (*destructor)(void*)) {
  typedef int (*key_create_fn)(pthread_key_t*, void (*)(void*));
  static key_create_fn next;
  key_create_fn f = __atomic_load_n(&next, __ATOMIC_ACQUIRE);
  if (f == NULL) {
    f = (key_create_fn)dlsym(RTLD_NEXT, "pthread_key_create");
    if (f == NULL) return ENOSYS;
    __atomic_store_n(&next, f, __ATOMIC_RELEASE);
  }
  return f(key, destructor);
}
#define __pthread_key_create mp_next_key_create
#endif

static pthread_key_t exit_key;
static atomic_int exit_key_state; /* 0 none, 1 being created, 2 ready, 3 failed */

static mp_lock_t registry_lock = MP_LOCK_INIT(MP_LEVEL_THREADS);
static mp_thread_t* registry; /* doubly linked through next/prev, under registry_lock */

static void on_thread_exit(void* value);

static void exit_key_init(void) {
  int state = atomic_load_explicit(&exit_key_state, memory_order_acquire);
  if (state >= 2) return;
  int expected = 0;
  if (atomic_compare_exchange_strong(&exit_key_state, &expected, 1)) {
    int rc = __pthread_key_create(&exit_key, on_thread_exit);
    atomic_store_explicit(&exit_key_state, rc == 0 ? 2 : 3, memory_order_release);
    return;
  }
  while (atomic_load_explicit(&exit_key_state, memory_order_acquire) == 1) sched_yield();
}

__attribute__((visibility("default"))) int pthread_key_create(pthread_key_t* key, void (*destructor)(void*)) {
  exit_key_init();
  return __pthread_key_create(key, destructor);
}

/* ---- the registry ------------------------------------------------------------------------- */
void mp_thread_register(void) {
  mp_thread_t* t = &mp_tls;
  mp_assert(t->in_profiler);
  if (t->registered || t->exiting) return;
  exit_key_init();
  if (atomic_load_explicit(&exit_key_state, memory_order_acquire) != 2) return;
  if (pthread_setspecific(exit_key, t) != 0) return;
  mp_lock(&registry_lock);
  t->prev = NULL;
  t->next = registry;
  if (registry != NULL) registry->prev = t;
  registry = t;
  t->registered = true;
  mp_unlock(&registry_lock);
}

static void unregister(mp_thread_t* t) {
  mp_lock(&registry_lock);
  if (t->registered) {
    if (t->prev != NULL) t->prev->next = t->next;
    else registry = t->next;
    if (t->next != NULL) t->next->prev = t->prev;
    t->next = t->prev = NULL;
    t->registered = false;
  }
  mp_unlock(&registry_lock);
}

static void on_thread_exit(void* value) {
  mp_thread_t* t = &mp_tls;
  mp_assert(value == (void*)t);
  (void)value;
  bool guard = t->in_profiler;
  t->in_profiler = true;
#ifdef MP_TEST_HOOKS
  if (!mp_test_hook("MP_TEST_SKIP_THREAD_EXIT")) /* the churn gate's control */
#endif
    t->exiting = true; /* a later TLS destructor's allocation would register it again */
  unregister(t);
  mp_stack_release(t);
  mp_profiler_leave(t, guard);
}

/* Sends every registered thread to its slow path at its next allocation, where it sees the
 * new epoch (sampler.c) and draws again. The countdown is another thread's TLS, which its
 * owner changes with a plain read-modify-write (interpose.c); a store that lands inside
 * such an instruction is lost. An instruction completes in nanoseconds, so after a pause a
 * lost store shows as a countdown that is neither 0 (ours, untouched) nor above 2^62 (ours,
 * borrowed: the owner is on its way to the slow path) while the thread's epoch is still
 * old; such a thread is stored again. Called with the lifecycle lock held, so the epoch
 * does not move meanwhile. With no other thread registered (a start from the load constructor)
 * there is nothing to wait for. */
void mp_threads_resync(uint32_t epoch) {
  mp_assert(mp_tls.in_profiler);
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_SKIP_RESYNC")) return; /* the restart tests' control */
#endif
  mp_lock(&registry_lock);
  bool others = false; /* the caller's own store cannot land inside its own instruction */
  for (mp_thread_t* t = registry; t != NULL; t = t->next) {
    __atomic_store_n(&t->countdown, 0, __ATOMIC_RELAXED);
    others = others || t != &mp_tls;
  }
  for (int round = 0; round < 8 && others; round++) {
    /* Not nanosleep: a cancellation point, and this pause holds the registry lock and the
     * lifecycle lock (cancel.h). The callers disable cancellation too; this holds without. */
#ifdef MP_TEST_HOOKS
    if (mp_test_hook("MP_TEST_CANCELLABLE_API")) { /* the cancel gate's control: libc's pause */
      struct timespec pause = {0, 20000};
      nanosleep(&pause, NULL);
    } else
#endif
      mp_pause_nocancel(20000);
    bool again = false;
    for (mp_thread_t* t = registry; t != NULL; t = t->next) {
      uint64_t c = __atomic_load_n(&t->countdown, __ATOMIC_RELAXED);
      if (__atomic_load_n(&t->epoch, __ATOMIC_RELAXED) != epoch && c != 0 && c <= MP_COUNTDOWN_MAX) {
        __atomic_store_n(&t->countdown, 0, __ATOMIC_RELAXED);
        again = true;
      }
    }
    if (!again) break;
  }
  mp_unlock(&registry_lock);
}

void mp_threads_lock(void) { mp_lock(&registry_lock); }
void mp_threads_unlock(void) { mp_unlock(&registry_lock); }

/* fork child: this thread is the only one left. */
void mp_threads_child_reinit(void) {
  mp_lock_reset(&registry_lock);
  mp_thread_t* self = &mp_tls;
  registry = NULL;
  if (self->registered) {
    self->next = self->prev = NULL;
    registry = self;
  }
}

/* ---- creation ordinals ---------------------------------------------------------------------- */
typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
static create_fn real_create;

typedef struct start_s {
  void* (*fn)(void*);
  void* arg;
  uint32_t ordinal;
} start_t;

void mp_thread_init(void) {
  exit_key_init();
  if (real_create == NULL) real_create = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
}

void* mp_thread_start(void* raw) {
  start_t start = *(start_t*)raw;
  mi_free(raw);
  mp_thread_set_ordinal(start.ordinal);
  mp_stack_learn_bounds();
  return start.fn(start.arg);
}

__attribute__((visibility("default"))) int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                                                          void* (*fn)(void*), void* arg) {
  if (real_create == NULL) mp_thread_init();
  if (real_create == NULL) return EAGAIN;
  start_t* start = mi_malloc(sizeof(start_t));
  if (start == NULL) return EAGAIN;
  start->fn = fn;
  start->arg = arg;
  start->ordinal = mp_next_ordinal();
  int rc = real_create(thread, attr, mp_thread_start, start);
  if (rc != 0) mi_free(start);
  return rc;
}

/* C11 threads: glibc's thrd_create does not go through pthread_create's exported name, so it
 * has a wrapper of its own, for the same two things (ordinal, stack bounds). */
typedef int (*thrd_create_fn)(thrd_t*, thrd_start_t, void*);
typedef struct c11_start_s {
  thrd_start_t fn;
  void* arg;
  uint32_t ordinal;
} c11_start_t;

static int mp_c11_start(void* raw) {
  c11_start_t start = *(c11_start_t*)raw;
  mi_free(raw);
  mp_thread_set_ordinal(start.ordinal);
  mp_stack_learn_bounds();
  return start.fn(start.arg);
}

__attribute__((visibility("default"))) int thrd_create(thrd_t* thr, thrd_start_t fn, void* arg) {
  static _Atomic(thrd_create_fn) real_thrd_create;
  thrd_create_fn real = atomic_load_explicit(&real_thrd_create, memory_order_acquire);
  if (real == NULL) {
    real = (thrd_create_fn)dlsym(RTLD_NEXT, "thrd_create");
    if (real == NULL) return thrd_error;
    atomic_store_explicit(&real_thrd_create, real, memory_order_release);
  }
  c11_start_t* start = mi_malloc(sizeof(c11_start_t));
  if (start == NULL) return thrd_nomem;
  start->fn = fn;
  start->arg = arg;
  start->ordinal = mp_next_ordinal();
  int rc = real(thr, mp_c11_start, start);
  if (rc != thrd_success) mi_free(start);
  return rc;
}
