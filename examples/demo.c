/* The bundled demo: a small "service" whose native memory goes to three places: a cache
 * that only grows, per-request buffers that are freed, and a parser's token arrays. Run it
 * with `npm run demo` to see where its in-use memory is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REQUESTS 20000

static char* cache[REQUESTS];

__attribute__((noinline)) static char* cache_response(int id) {
  char* entry = malloc(4096 + (size_t)(id % 8) * 512);
  snprintf(entry, 64, "response %d", id);
  return entry;
}

__attribute__((noinline)) static void handle_request(int id) {
  char* scratch = malloc(64 * 1024);
  memset(scratch, id & 0xff, 64 * 1024);
  if (id % 2 == 0) cache[id] = cache_response(id); /* the leak: nothing evicts */
  free(scratch);
}

__attribute__((noinline)) static void** tokenize(int n) {
  void** tokens = calloc((size_t)n, sizeof(void*));
  for (int i = 0; i < n; i++) tokens[i] = strdup("token");
  return tokens;
}

int main(void) {
  for (int id = 0; id < REQUESTS; id++) handle_request(id);
  void** tokens = tokenize(200000);
  size_t held = 0;
  for (int id = 0; id < REQUESTS; id++) held += cache[id] != NULL;
  printf("demo: %zu cached responses and 200000 tokens still held\n", held);
  (void)tokens;
  return 0;
}
