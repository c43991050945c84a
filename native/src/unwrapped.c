/* mi_unwrapped_*: memory straight from the OS for instrumentation that must not recurse into
 * the allocator (memory-events.h). Each block is its own anonymous mapping; a header just
 * before the returned pointer holds the mapping and a magic number, so that a pointer that
 * did not come from here is refused instead of unmapped. Nothing here reaches malloc, the
 * exact counters or the profiler's memory budget. */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"
#include "mimalloc-pprof/memory-events.h"

#define UNWRAPPED_MAGIC 0x6D697577u /* "miuw" */
#define ALIGN_DEFAULT 16u
#define ALIGN_MAX ((size_t)1 << 20)

typedef struct header_s {
  void* base;    /* the mapping */
  size_t total;  /* its length */
  size_t size;   /* bytes asked for */
  uint64_t magic;
} header_t;

static size_t page_size(void) {
  static size_t cached;
  if (cached == 0) cached = (size_t)sysconf(_SC_PAGESIZE);
  return cached;
}

void* mi_unwrapped_malloc(size_t size, size_t alignment) {
  if (alignment == 0) alignment = ALIGN_DEFAULT;
  if ((alignment & (alignment - 1)) != 0 || alignment > ALIGN_MAX) {
    errno = EINVAL;
    return NULL;
  }
  if (alignment < ALIGN_DEFAULT) alignment = ALIGN_DEFAULT; /* the header's own alignment */
  size_t page = page_size(), total;
  /* the header, the worst-case padding to `alignment`, the block, rounded up to pages */
  if (__builtin_add_overflow(size, sizeof(header_t) + alignment, &total) || total > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  total = (total + page - 1) & ~(page - 1);
  void* base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t user = ((uintptr_t)base + sizeof(header_t) + alignment - 1) & ~(uintptr_t)(alignment - 1);
  header_t* h = (header_t*)(user - sizeof(header_t));
  mp_assert((uintptr_t)h >= (uintptr_t)base && user + size <= (uintptr_t)base + total);
  *h = (header_t){.base = base, .total = total, .size = size, .magic = UNWRAPPED_MAGIC};
  return (void*)user;
}

static header_t* header_of(void* p) {
  header_t* h = (header_t*)((uintptr_t)p - sizeof(header_t));
  if (h->magic != UNWRAPPED_MAGIC) {
    static atomic_bool said;
    if (!atomic_exchange(&said, true)) mp_write_stderr("mi_unwrapped_free/realloc: a pointer that mi_unwrapped_malloc did not return is ignored");
    errno = EINVAL;
    return NULL;
  }
  return h;
}

void mi_unwrapped_free(void* p) {
  if (p == NULL) return;
  header_t* h = header_of(p);
  if (h == NULL) return;
  h->magic = 0;
  munmap(h->base, h->total);
}

void* mi_unwrapped_realloc(void* p, size_t new_size, size_t alignment) {
  if (p == NULL) return mi_unwrapped_malloc(new_size, alignment);
  header_t* h = header_of(p);
  if (h == NULL) return NULL;
  if (new_size == 0) {
    mi_unwrapped_free(p);
    return NULL;
  }
  void* q = mi_unwrapped_malloc(new_size, alignment);
  if (q == NULL) return NULL; /* p is left as it was */
  memcpy(q, p, h->size < new_size ? h->size : new_size);
  mi_unwrapped_free(p);
  return q;
}
