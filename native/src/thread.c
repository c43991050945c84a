/* Threads: pthread_create is wrapped so that each thread gets a creation ordinal assigned
 * in its parent (seeded streams repeat when threads are created in the same order), and so
 * that the profiler learns a thread is ending before its TLS destructors run: mimalloc 2.x
 * deletes the thread's heaps during those destructors, and a sample taken after that point
 * must not touch the sampled heap (it is dropped and counted). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <mimalloc.h>
#include <pthread.h>

#include "internal.h"

typedef int (*create_fn)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
static create_fn real_create;

typedef struct start_s {
  void* (*fn)(void*);
  void* arg;
  uint32_t ordinal;
} start_t;

void mp_thread_init(void) {
  if (real_create == NULL) real_create = (create_fn)dlsym(RTLD_NEXT, "pthread_create");
}

static void on_exit_cleanup(void* unused) {
  (void)unused;
  mp_thread_exiting();
}

static void* trampoline(void* raw) {
  start_t start = *(start_t*)raw;
  mi_free(raw);
  mp_thread_set_ordinal(start.ordinal);
  void* result;
  pthread_cleanup_push(on_exit_cleanup, NULL);
  result = start.fn(start.arg);
#ifdef MP_TEST_HOOKS
  pthread_cleanup_pop(!mp_test_hook("MP_TEST_SKIP_THREAD_EXIT")); /* the churn gate's control */
#else
  pthread_cleanup_pop(1);
#endif
  return result;
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
  int rc = real_create(thread, attr, trampoline, start);
  if (rc != 0) mi_free(start);
  return rc;
}
