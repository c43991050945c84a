/* Benchmark workload for bench/callgrind.mjs: malloc/free pairs of small blocks.
 *
 *   pairs N            N iterations over a ring of 256 slots; each frees the slot's block
 *                      and mallocs a new one of 16-64 bytes (one malloc + one free each)
 *   pairs N --no-alloc the same loop and PRNG without calling the allocator (the loop's own
 *                      cost, to tell the harness's instructions from the allocator's)
 *   pairs --mi-version prints mi_version() of the mimalloc in the process (needs it preloaded
 *                      or linked in), or 0 when there is none
 *
 * Sizes come from a fixed-seed xorshift32, so every run makes the same requests. The ring is
 * filled before the loop and emptied after it; those costs, like start-up, cancel when the
 * caller subtracts two runs with different N. Build: cc -O2 -o pairs pairs.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING 256 /* power of two */

static void* ring[RING];
static uint32_t rng = 0x9E3779B9u; /* fixed seed */

static inline size_t next_size(void) {
  uint32_t x = rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  rng = x;
  return 16 + (size_t)((x >> 8) % 49); /* 16..64 */
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "--mi-version") == 0) {
    int (*version)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "mi_version");
    printf("%d\n", version != NULL ? version() : 0);
    return 0;
  }
  if (argc < 2) {
    fprintf(stderr, "usage: pairs N [--no-alloc] | pairs --mi-version\n");
    return 2;
  }
  char* end;
  unsigned long long n = strtoull(argv[1], &end, 10);
  if (*end != 0) {
    fprintf(stderr, "pairs: bad iteration count %s\n", argv[1]);
    return 2;
  }
  int no_alloc = argc >= 3 && strcmp(argv[2], "--no-alloc") == 0;

  for (size_t i = 0; i < RING; i++) {
    ring[i] = malloc(next_size());
    if (ring[i] == NULL) return 1;
  }

  if (no_alloc) {
    for (unsigned long long i = 0; i < n; i++) {
      size_t slot = i & (RING - 1);
      size_t size = next_size();
      /* keep the loop's shape: a load of the slot, a store of a value derived from it */
      void* old = ring[slot];
      __asm__ volatile("" : "+r"(old) : "r"(size));
      ring[slot] = old;
    }
  } else {
    for (unsigned long long i = 0; i < n; i++) {
      size_t slot = i & (RING - 1);
      size_t size = next_size();
      free(ring[slot]);
      char* p = malloc(size);
      if (p == NULL) return 1;
      p[0] = (char)i; /* touch the block, as a program would */
      ring[slot] = p;
    }
  }

  for (size_t i = 0; i < RING; i++) free(ring[i]);
  return 0;
}
