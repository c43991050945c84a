/* The original C system's include path for the memory-events API: `#include
 * <mimalloc/memory-events.h>` builds unchanged against mimalloc-pprof. */
#include "../mimalloc-pprof/memory-events.h"
