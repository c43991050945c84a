/* Benchmark workload for bench/sample-cost.mjs: the wall-clock cost of sampled allocations.
 *
 *   sample_cost cost  main|worker N SIZE   N malloc+free pairs of SIZE bytes from three
 *                                           nested functions, on the main thread or on one
 *                                           pthread; prints {"ns_per_pair":…,"samples":…}
 *   sample_cost scale THREADS N            THREADS threads, each N malloc+free pairs of
 *                                           16 B..4 KiB (log-uniform, per-thread xorshift);
 *                                           prints {"seconds":…,"pairs":…,"samples":…}
 *
 * Run it preloaded with the profiler on (MIMALLOC_PROF=1 and an interval) or stopped; the
 * driver takes the difference. "samples" is the profiler's count of sampled allocations made
 * during the timed part (accum_samples: the driver sets MIMALLOC_PROF_ACCUM=1), 0 when stopped.
 * Build: cc -O2 [-fno-omit-frame-pointer | -fomit-frame-pointer] -fno-builtin-malloc
 *        -fno-builtin-free -Inative/include -o sample_cost sample_cost.c -lpthread -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mimalloc-pprof/profile.h>

/* The profiler's count of sampled allocations, looked up at run time (the binary does not
 * link the library; it runs preloaded, profiling or stopped). */
static uint64_t samples_now(void) {
  bool (*get)(mi_prof_stats_t*) = (bool (*)(mi_prof_stats_t*))dlsym(RTLD_DEFAULT, "mi_prof_stats_get");
  mi_prof_stats_t s = {.size = sizeof s, .version = MI_PROF_STATS_VERSION};
  return get != NULL && get(&s) ? s.accum_samples : 0;
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Per thread: a shared one would bounce its cache line between the threads of `scale` on every
 * allocation and measure that instead of the allocator. */
static _Thread_local volatile uintptr_t sink;

__attribute__((noinline)) static void* leaf(size_t n) {
  void* p = malloc(n);
  sink += (uintptr_t)p;
  return p;
}
__attribute__((noinline)) static void* middle(size_t n) { return leaf(n); }
__attribute__((noinline)) static void* outer(size_t n) { return middle(n); }

typedef struct cost_s {
  long n;
  size_t size;
  double seconds;
} cost_t;

static void* cost_body(void* arg) {
  cost_t* c = arg;
  for (long i = 0; i < 1000; i++) free(outer(c->size)); /* warm: thread heap, unwind rules */
  double t0 = now();
  for (long i = 0; i < c->n; i++) free(outer(c->size));
  c->seconds = now() - t0;
  return NULL;
}

typedef struct scale_s {
  long n;
  uint32_t rng;
} scale_t;

static void* scale_body(void* arg) {
  scale_t* s = arg;
  uint32_t x = s->rng;
  for (long i = 0; i < s->n; i++) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    size_t size = (size_t)16 << (x % 9); /* 16 B .. 4 KiB */
    size += x >> 24;
    free(outer(size));
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "cost") == 0) {
    cost_t c = {.n = atol(argv[3]), .size = (size_t)atol(argv[4])};
    uint64_t before = samples_now();
    if (strcmp(argv[2], "worker") == 0) {
      pthread_t t;
      pthread_create(&t, NULL, cost_body, &c);
      pthread_join(t, NULL);
    } else {
      cost_body(&c);
    }
    uint64_t after = samples_now();
    printf("{\"ns_per_pair\":%.1f,\"samples\":%llu}\n", c.seconds * 1e9 / (double)c.n,
           (unsigned long long)(after - before));
    return 0;
  }
  if (argc == 4 && strcmp(argv[1], "scale") == 0) {
    int threads = atoi(argv[2]);
    if (threads < 1 || threads > 64) return 2;
    scale_t s[64];
    pthread_t t[64];
    uint64_t before = samples_now();
    double t0 = now();
    for (int i = 0; i < threads; i++) {
      s[i] = (scale_t){.n = atol(argv[3]), .rng = 0x9E3779B9u * (uint32_t)(i + 1)};
      pthread_create(&t[i], NULL, scale_body, &s[i]);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double seconds = now() - t0;
    printf("{\"seconds\":%.6f,\"pairs\":%ld,\"samples\":%llu}\n", seconds, (long)threads * atol(argv[3]),
           (unsigned long long)(samples_now() - before));
    return 0;
  }
  fprintf(stderr, "usage: sample_cost cost main|worker N SIZE | sample_cost scale THREADS N\n");
  return 2;
}
