/* mimalloc-pprof: sampled heap profiling for programs running on the system mimalloc.
 *
 * This is the whole public C API of the preload library `libmimalloc-pprof.so`. The names
 * and meanings are those of the original C system (`mi_prof_*`), so code written against it
 * builds unchanged.
 *
 * Units: every "interval" is in bytes of requested allocation; "sampled" figures are raw
 * counts of recorded samples; "estimated" figures are already unsampled (Horvitz-Thompson:
 * each sample of s bytes stands for 1/p objects and s/p bytes with p = 1 - exp(-s/R)).
 */
#ifndef MIMALLOC_PPROF_PROFILE_H
#define MIMALLOC_PPROF_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define mi_prof_nodiscard __attribute__((warn_unused_result))
#define mi_prof_export __attribute__((visibility("default")))
#else
#define mi_prof_nodiscard
#define mi_prof_export
#endif

#define MI_PROF_DEFAULT_INTERVAL 524288u
#define MI_PROF_DEFAULT_BT_MAX 32u
#define MI_PROF_MAX_BT 128u

/* Starts sampling with mean interval `interval` bytes (0: MIMALLOC_PROF_SAMPLE_INTERVAL,
 * then MIMALLOC_PROF_SAMPLE_RATE, then 524288). False if already running. */
mi_prof_export mi_prof_nodiscard bool mi_prof_start(size_t interval);

/* As mi_prof_start, with each thread's interval stream derived from `seed` and the thread's
 * creation ordinal (main thread 0), so a single-threaded run is exactly reproducible. */
mi_prof_export mi_prof_nodiscard bool mi_prof_start_seeded(size_t interval, uint64_t seed);

typedef enum mi_prof_config_mode_e {
  MI_PROF_CONFIG_FALLBACK = 0, /* a variable set in the environment wins over the struct */
  MI_PROF_CONFIG_OVERRIDE = 1  /* non-zero struct fields win over the environment */
} mi_prof_config_mode_t;

typedef enum mi_prof_dump_format_e {
  MI_PROF_DUMP_TEXT = 0,  /* gperftools heap_v2 text */
  MI_PROF_DUMP_PROTO = 1  /* uncompressed profile.proto */
} mi_prof_dump_format_t;

#define MI_PROF_CONFIG_VERSION 1u
#define MI_PROF_DUMP_PATH_MAX 1024u

typedef struct mi_prof_config_s {
  uint32_t size;                /* sizeof(mi_prof_config_t) */
  uint32_t version;             /* MI_PROF_CONFIG_VERSION */
  mi_prof_config_mode_t mode;
  size_t sample_interval;       /* 0: keep the default / environment */
  size_t max_profiler_bytes;    /* 0: unlimited */
  uint64_t seed;                /* 0 with has_seed false: unseeded */
  bool has_seed;
  bool accum;                   /* also keep allocated (cumulative) figures */
  uint32_t max_stack_depth;     /* 0: 32; at most 128 */
  char dump_at_exit[MI_PROF_DUMP_PATH_MAX]; /* "" : none; "%p" expands to the pid */
  mi_prof_dump_format_t dump_format;
} mi_prof_config_t;

/* Starts with a size/version-tagged configuration. False if running, or if `config` is
 * NULL or of an unknown size or version. */
mi_prof_export mi_prof_nodiscard bool mi_prof_start_ex(const mi_prof_config_t* config);

/* Stops sampling and discards every sample. */
mi_prof_export void mi_prof_stop(void);

/* Clears the cumulative (allocated) figures; live samples are kept. */
mi_prof_export void mi_prof_reset(void);

mi_prof_export bool mi_prof_is_enabled(void);

/* Leaves the calling thread's allocations out of profiles (true) or puts them back (false),
 * from now on: a profiler's own worker, or any thread whose memory is not the program's
 * question. Its allocations are neither sampled nor counted in the estimates; blocks sampled
 * before are kept, and frees on the thread are seen as always. Returns the previous setting. */
mi_prof_export bool mi_prof_thread_exclude(bool exclude);

/* Writes the profile atomically (temporary file + rename, mode 0600). "%p" in `path`
 * expands to the pid. False with errno set on failure; no partial file is ever left. */
mi_prof_export mi_prof_nodiscard bool mi_prof_dump(const char* path);       /* heap_v2 text */
mi_prof_export mi_prof_nodiscard bool mi_prof_dump_proto(const char* path); /* profile.proto */

/* The profile as it stood at the high-water mark of the estimate of bytes in use since start:
 * in-use figures of that moment (within 1/32 of it, or 1 MiB), allocated figures of now.
 * MIMALLOC_PROF_DUMP_PEAK_AT_EXIT=path writes it at exit too. The proto carries a comment
 * "peak: estimated_in_use_bytes=N at_unix_ms=T". */
mi_prof_export mi_prof_nodiscard bool mi_prof_dump_peak(const char* path);       /* heap_v2 text */
mi_prof_export mi_prof_nodiscard bool mi_prof_dump_peak_proto(const char* path); /* profile.proto */
/* The peak's estimate of bytes in use, when it was reached (CLOCK_REALTIME ns) and how many
 * peak snapshots were taken since start; false (and zeros) before the first. Any may be NULL. */
mi_prof_export bool mi_prof_peak(double* bytes, uint64_t* unix_ns, uint64_t* snapshots);

/* Exact counters as seen by the interposer, in usable bytes. Only counted while memory
 * events are enabled (MIMALLOC_MEMORY_EVENTS=1 or mi_prof_memory_events_enable). */
mi_prof_export void mi_prof_memory_events_enable(bool enable);
mi_prof_export bool mi_prof_memory_events_enabled(void);

/* Version 2 added estimated_live_bytes_variance; a version-1 struct (without it) is still filled. */
#define MI_PROF_STATS_VERSION 2u

typedef struct mi_prof_stats_s {
  uint32_t size;                 /* set by the caller: sizeof(mi_prof_stats_t) */
  uint32_t version;              /* set by the caller: MI_PROF_STATS_VERSION */
  bool running;
  uint64_t sample_interval;
  uint64_t live_samples;         /* sampled */
  uint64_t live_sampled_bytes;   /* sampled: sum of the sizes of live samples */
  double estimated_live_bytes;   /* unsampled */
  double estimated_live_objects; /* unsampled */
  uint64_t accum_samples;        /* sampled, since start or reset */
  double estimated_accum_bytes;  /* unsampled */
  double estimated_accum_objects;
  uint64_t unique_stacks;
  uint64_t dropped_samples;      /* profiler memory budget, thread exit, allocation failure */
  uint64_t profiler_bytes;       /* OS memory held by the profiler */
  /* exact counters (memory events) */
  bool memory_events;
  int64_t exact_live_bytes;
  int64_t exact_live_objects;
  uint64_t exact_accum_bytes;
  uint64_t exact_accum_objects;
  /* mimalloc's process info */
  uint64_t rss_bytes, peak_rss_bytes, commit_bytes, peak_commit_bytes, page_faults;
  /* version 2: the sampling variance of estimated_live_bytes (unbiased, from the live
   * samples: sum of size^2 (1 - p) / p^2); its square root is the estimate's standard error */
  double estimated_live_bytes_variance;
} mi_prof_stats_t;

/* Fills `stats` (whose size and version the caller sets). False on unknown size/version.
 * Relaxed reads: a consistent snapshot of each figure, not a consistent cut across them. */
mi_prof_export mi_prof_nodiscard bool mi_prof_stats_get(mi_prof_stats_t* stats);

/* ---- who mapped the memory, and how much of it is resident ----
 * Every mapping made through libc's mmap (which the library interposes) is recorded with its
 * owner, the object whose code asked for it; munmap takes it out. Resident bytes are asked
 * of the kernel (mincore) on each call, which costs one system call per 256 MiB of recorded
 * address space. With glibc < 2.35 or off x86-64 owners are unknown (object 0) and mimalloc's
 * part cannot be told apart (allocator_known false). */
typedef struct mi_prof_mapping_owner_s {
  uintptr_t object;   /* the owner's load address (its first mapping's start); 0 unknown */
  uint64_t mapped;    /* bytes of address space it mapped and still holds */
  uint64_t resident;  /* of which resident now */
  uint64_t regions;   /* recorded ranges */
} mi_prof_mapping_owner_t;

/* Describes up to `cap` owners in `owners`; returns how many it described, or cap + 1 when
 * there were more (left out). */
mi_prof_export size_t mi_prof_mapping_owners(mi_prof_mapping_owner_t* owners, size_t cap);

#define MI_PROF_RESIDENT_VERSION 2u

typedef struct mi_prof_resident_s {
  uint32_t size;                 /* set by the caller: sizeof(mi_prof_resident_t) */
  uint32_t version;              /* set by the caller: MI_PROF_RESIDENT_VERSION */
  bool allocator_known;          /* false: the allocator_* figures are not available */
  uint64_t allocator_mapped;     /* address space mimalloc holds from the OS (sampled blocks too) */
  uint64_t allocator_resident;   /* of which resident now */
  uint64_t untracked;            /* bytes mapped that the record could not take (full, or
                                    mapped inside a signal handler that interrupted a recording) */
  uint64_t arena_resident;       /* 0: sampled blocks live in mimalloc's heap (kept for the layout) */
  uint64_t profiler_bytes;       /* the profiler's own tables (OS memory held) */
  /* version 2: the library's own anonymous memory resident now: what it mapped (tables,
   * buckets, the record of mappings) and its static tables (.bss). Its code and initialised
   * data are mappings of its file, which /proc/self/smaps names by the library's path. */
  uint64_t profiler_resident;
} mi_prof_resident_t;

/* Fills `resident` (whose size and version the caller sets). False on unknown size/version
 * (errno EINVAL). */
mi_prof_export mi_prof_nodiscard bool mi_prof_resident_get(mi_prof_resident_t* resident);

/* ---- libuv's thread pool (Node): work charged to the stack that queued it ----
 * For an addon running inside the process, on its loop's thread. Between _begin and _end the
 * caller queues one item: first with uv_queue_work, then (a second pair of calls) with
 * uv_getaddrinfo for the slow I/O queue. `queue_node` is the request's `work_req.wq` and
 * `queue_offset` is offsetof(struct uv__work, wq) in the caller's libuv headers. _begin is
 * false when there is nothing to learn, the layout differs or MIMALLOC_PPROF_POOL=0 (then
 * queue nothing); _end tells whether the pool is known now. Afterwards every sample taken on
 * a pool thread while it runs work, or inside that work's completion, carries the stack that
 * queued the work above a "[queued by]" frame. */
mi_prof_export bool mi_prof_pool_probe_begin(void* queue_node, size_t queue_offset);
mi_prof_export bool mi_prof_pool_probe_end(void);
/* Whether the pool is watched (learned); work items left uncharged because the table of work
 * in flight was full. */
mi_prof_export bool mi_prof_pool_watched(void);
mi_prof_export uint64_t mi_prof_pool_refused(void);

/* ---- V8's sampling heap profiler (Node): its samples' native stacks ----
 * For the addon, on the thread whose isolate is about to start V8's sampling heap profiler,
 * right before that start: every sample V8 then takes on this thread keeps the stack where it
 * was taken (with the functions V8 inlined), until V8 drops the sample. 1: armed; 0: not
 * available (no SampleObject found, direct binding off or unsupported); -1 with errno set. */
mi_prof_export int mi_prof_js_anchor_arm(void);
/* The live samples' stacks, each as [number, V8's sample_id read from the sample (UINT64_MAX:
 * unreadable), the size of V8's perf map then (0: none), depth, depth frames]: the number is 1, 2, ... in the order V8 took them since
 * arming, which is V8's sample_id (the protocol's `ordinal`) when the start followed the
 * arming. Fills `out` up to `cap` words with whole entries and returns the words all need.
 * Only on the arming thread (else 0, errno EPERM). */
mi_prof_export size_t mi_prof_js_anchors(uint64_t* out, size_t cap);
/* [made, live, dropped (out of memory or over 2^15 live)] */
mi_prof_export void mi_prof_js_anchor_counts(uint64_t counts[3]);

/* For the addon of a Node process with --perf-basic-prof: from now on each new bucket keeps the
 * size of V8's perf map when its stack was taken, as MIMALLOC_PROF_PERF_MAP=1 asks at load, so
 * that its JavaScript frames are named by the code that was at their addresses then. */
mi_prof_export void mi_prof_jit_map_track(void);

#ifdef __cplusplus
}
#endif
#endif
