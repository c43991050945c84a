/* Reference for bench/callgrind.mjs: the cheapest possible interposer. Every entry point is
 * a tail jump to the system mimalloc (`jmp *mi_x@GOTPCREL(%rip)` with -fno-plt), so its cost
 * over plain LD_PRELOAD=libmimalloc.so is one instruction per call: the floor for any
 * LD_PRELOAD library in front of mimalloc, the profiler's fast path included.
 * Build: cc -O2 -fPIC -shared -fvisibility=hidden -fno-plt -o libforward.so forward.c <libmimalloc.so> */
#include <stddef.h>

/* Declared here so that the build needs no mimalloc headers. */
void* mi_malloc(size_t n);
void* mi_calloc(size_t count, size_t size);
void* mi_realloc(void* p, size_t n);
void* mi_reallocarray(void* p, size_t count, size_t size);
void mi_free(void* p);
int mi_posix_memalign(void** out, size_t align, size_t n);
void* mi_aligned_alloc(size_t align, size_t n);
void* mi_memalign(size_t align, size_t n);
void* mi_valloc(size_t n);
void* mi_pvalloc(size_t n);
size_t mi_malloc_usable_size(const void* p);

#define EXPORT __attribute__((visibility("default")))

EXPORT void* malloc(size_t n) { return mi_malloc(n); }
EXPORT void free(void* p) { mi_free(p); }
EXPORT void cfree(void* p) { mi_free(p); }
EXPORT void* calloc(size_t count, size_t size) { return mi_calloc(count, size); }
EXPORT void* realloc(void* p, size_t n) { return mi_realloc(p, n); }
EXPORT void* reallocarray(void* p, size_t count, size_t size) { return mi_reallocarray(p, count, size); }
EXPORT int posix_memalign(void** out, size_t align, size_t n) { return mi_posix_memalign(out, align, n); }
EXPORT void* aligned_alloc(size_t align, size_t n) { return mi_aligned_alloc(align, n); }
EXPORT void* memalign(size_t align, size_t n) { return mi_memalign(align, n); }
EXPORT void* valloc(size_t n) { return mi_valloc(n); }
EXPORT void* pvalloc(size_t n) { return mi_pvalloc(n); }
EXPORT size_t malloc_usable_size(void* p) { return mi_malloc_usable_size(p); }
