/* Allocator workloads for `bench/compare.mjs`: seeded, so that every allocator replays the
 * same sequence of requests.
 *
 *   workloads MODE THREADS OPS [SEED]
 *
 * Each of THREADS threads runs OPS operations from its own xorshift64* stream (SEED + thread):
 *   tiny-hot       ring of 256 slots; free the slot's block, malloc 16-64 B, write its first byte
 *   general-mix    ring of 1024 slots; sizes log-uniform over 8 B-4 KiB; 1 op in 8 is a realloc
 *                  of the slot's block to a new size, the others free + malloc; first and last
 *                  bytes written
 *   large-buffers  ring of 8 slots; sizes log-uniform over 64 KiB-4 MiB; one byte written per
 *                  4 KiB page (the memory is really used)
 *   cross-thread   THREADS producer/consumer pairs: the producer mallocs 16-512 B, writes it and
 *                  hands it over a single-producer/single-consumer ring of 1024 to its consumer
 *                  thread, which reads and frees it (every free is remote)
 * At the end every live block is freed; a checksum goes to stdout (so nothing is optimised away).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  uint64_t s;
} rng_t;

static uint64_t next(rng_t* r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1DULL;
}

/* log-uniform over [lo, hi] */
static size_t log_uniform(rng_t* r, size_t lo, size_t hi) {
  double u = (double)(next(r) >> 11) / 9007199254740992.0;
  double x = (double)lo * __builtin_exp(u * __builtin_log((double)hi / (double)lo));
  size_t s = (size_t)x;
  return s < lo ? lo : s > hi ? hi : s;
}

static long ops;
static uint64_t seed;

typedef struct {
  int index;
  uint64_t checksum;
} job_t;

static void* tiny_hot(void* arg) {
  job_t* j = arg;
  rng_t r = {seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(j->index + 1)};
  enum { SLOTS = 256 };
  unsigned char* slot[SLOTS] = {0};
  uint64_t sum = 0;
  for (long i = 0; i < ops; i++) {
    unsigned k = (unsigned)(i & (SLOTS - 1));
    free(slot[k]);
    size_t n = 16 + next(&r) % 49;
    slot[k] = malloc(n);
    slot[k][0] = (unsigned char)i;
    sum += (uintptr_t)slot[k] & 0xff;
  }
  for (unsigned k = 0; k < SLOTS; k++) free(slot[k]);
  j->checksum = sum;
  return NULL;
}

static void* general_mix(void* arg) {
  job_t* j = arg;
  rng_t r = {seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(j->index + 1)};
  enum { SLOTS = 1024 };
  unsigned char* slot[SLOTS] = {0};
  size_t size[SLOTS] = {0};
  uint64_t sum = 0;
  for (long i = 0; i < ops; i++) {
    unsigned k = (unsigned)(next(&r) % SLOTS);
    size_t n = log_uniform(&r, 8, 4096);
    if (slot[k] != NULL && next(&r) % 8 == 0) {
      slot[k] = realloc(slot[k], n);
    } else {
      free(slot[k]);
      slot[k] = malloc(n);
    }
    size[k] = n;
    slot[k][0] = (unsigned char)i;
    slot[k][n - 1] = (unsigned char)k;
    sum += slot[k][0];
  }
  for (unsigned k = 0; k < SLOTS; k++) free(slot[k]);
  j->checksum = sum + size[0];
  return NULL;
}

static void* large_buffers(void* arg) {
  job_t* j = arg;
  rng_t r = {seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(j->index + 1)};
  enum { SLOTS = 8 };
  unsigned char* slot[SLOTS] = {0};
  uint64_t sum = 0;
  for (long i = 0; i < ops; i++) {
    unsigned k = (unsigned)(next(&r) % SLOTS);
    free(slot[k]);
    size_t n = log_uniform(&r, 64 << 10, 4 << 20);
    slot[k] = malloc(n);
    for (size_t p = 0; p < n; p += 4096) slot[k][p] = (unsigned char)p;
    sum += slot[k][n / 2];
  }
  for (unsigned k = 0; k < SLOTS; k++) free(slot[k]);
  j->checksum = sum;
  return NULL;
}

/* cross-thread: one SPSC ring per pair */
enum { RING = 1024 };
typedef struct {
  _Atomic(unsigned char*) cell[RING];
  _Atomic long head; /* written by the producer */
  _Atomic long tail; /* written by the consumer */
  int index;
  uint64_t checksum;
} pair_t;

static void* producer(void* arg) {
  pair_t* p = arg;
  rng_t r = {seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(p->index + 1)};
  for (long i = 0; i < ops; i++) {
    size_t n = 16 + next(&r) % 497;
    unsigned char* b = malloc(n);
    b[0] = (unsigned char)i;
    b[n - 1] = (unsigned char)n;
    while (i - atomic_load_explicit(&p->tail, memory_order_acquire) >= RING) sched_yield();
    atomic_store_explicit(&p->cell[i % RING], b, memory_order_relaxed);
    atomic_store_explicit(&p->head, i + 1, memory_order_release);
  }
  return NULL;
}

static void* consumer(void* arg) {
  pair_t* p = arg;
  uint64_t sum = 0;
  for (long i = 0; i < ops; i++) {
    while (atomic_load_explicit(&p->head, memory_order_acquire) <= i) sched_yield();
    unsigned char* b = atomic_load_explicit(&p->cell[i % RING], memory_order_relaxed);
    sum += b[0];
    free(b);
    atomic_store_explicit(&p->tail, i + 1, memory_order_release);
  }
  p->checksum = sum;
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: workloads tiny-hot|general-mix|large-buffers|cross-thread THREADS OPS [SEED]\n");
    return 2;
  }
  const char* mode = argv[1];
  int threads = atoi(argv[2]);
  ops = atol(argv[3]);
  seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
  if (threads < 1 || threads > 64 || ops < 1) {
    fprintf(stderr, "workloads: THREADS must be 1-64 and OPS positive\n");
    return 2;
  }
  uint64_t sum = 0;
  if (strcmp(mode, "cross-thread") == 0) {
    pair_t* pairs = calloc((size_t)threads, sizeof(pair_t));
    pthread_t* t = calloc((size_t)threads * 2, sizeof(pthread_t));
    for (int i = 0; i < threads; i++) {
      pairs[i].index = i;
      pthread_create(&t[2 * i], NULL, consumer, &pairs[i]);
      pthread_create(&t[2 * i + 1], NULL, producer, &pairs[i]);
    }
    for (int i = 0; i < 2 * threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++) sum += pairs[i].checksum;
    free(pairs);
    free(t);
  } else {
    void* (*fn)(void*) = strcmp(mode, "tiny-hot") == 0 ? tiny_hot
                         : strcmp(mode, "general-mix") == 0 ? general_mix
                         : strcmp(mode, "large-buffers") == 0 ? large_buffers
                         : NULL;
    if (fn == NULL) {
      fprintf(stderr, "workloads: unknown mode %s\n", mode);
      return 2;
    }
    job_t* jobs = calloc((size_t)threads, sizeof(job_t));
    pthread_t* t = calloc((size_t)threads, sizeof(pthread_t));
    for (int i = 0; i < threads; i++) {
      jobs[i].index = i;
      if (threads == 1) fn(&jobs[i]);
      else pthread_create(&t[i], NULL, fn, &jobs[i]);
    }
    if (threads > 1)
      for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < threads; i++) sum += jobs[i].checksum;
    free(jobs);
    free(t);
  }
  printf("%s %d %ld %llu\n", mode, threads, ops, (unsigned long long)sum);
  return 0;
}
