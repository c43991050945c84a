/* The gperftools heap_v2 text writer.
 *
 * Layout (what google/pprof's legacy heap parser requires): the header on line 1, one row
 * per bucket with raw sampled counts and bytes and raw return addresses in lowercase hex,
 * a comment block, then MAPPED_LIBRARIES: and a copy of /proc/self/maps.
 * pprof unsamples each row with its average size; rows are size-homogeneous (table.c), so
 * that correction equals the per-sample weight. Without cumulative mode the bracket pair
 * is 0 and pprof offers the in-use sample types only. */
#include <fcntl.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

static void out_pair(mp_out_t* out, uint64_t count, uint64_t bytes) {
  mp_out_u64(out, count);
  mp_out_str(out, ": ");
  mp_out_u64(out, bytes);
}

static void out_stat(mp_out_t* out, const char* name, uint64_t v) {
  mp_out_str(out, "# ");
  mp_out_str(out, name);
  mp_out_str(out, ": ");
  mp_out_u64(out, v);
  mp_out_str(out, "\n");
}

static void out_stat_i(mp_out_t* out, const char* name, int64_t v) {
  mp_out_str(out, "# ");
  mp_out_str(out, name);
  mp_out_str(out, ": ");
  mp_out_i64(out, v);
  mp_out_str(out, "\n");
}

/* In small pieces: a fatal signal's dump runs on whatever stack the signalled thread has left. */
static void copy_maps(mp_out_t* out) {
  int fd = mp_open_nocancel("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return;
  char buf[512];
  for (;;) {
    ssize_t n = mp_read_nocancel(fd, buf, sizeof(buf));
    if (n <= 0) break;
    mp_out_bytes(out, buf, (size_t)n);
  }
  mp_close_nocancel(fd);
}

void mp_write_text(mp_out_t* out, const mp_snapshot_t* snap) {
  uint64_t live = 0, live_bytes = 0, allocs = 0, alloc_bytes = 0;
  for (size_t i = 0; i < snap->nrows; i++) {
    const mp_row_t* r = &snap->rows[i];
    live += r->live;
    live_bytes += r->live * r->size;
    allocs += r->allocs;
    alloc_bytes += r->allocs * r->size;
  }
  if (!snap->accum) allocs = alloc_bytes = 0;
  mp_out_str(out, "heap profile: ");
  out_pair(out, live, live_bytes);
  mp_out_str(out, " [");
  out_pair(out, allocs, alloc_bytes);
  mp_out_str(out, "] @ heap_v2/");
  mp_out_u64(out, (uint64_t)snap->interval);
  mp_out_str(out, "\n");
  for (size_t i = 0; i < snap->nrows; i++) {
    const mp_row_t* r = &snap->rows[i];
    mp_out_str(out, " ");
    out_pair(out, r->live, r->live * r->size);
    mp_out_str(out, " [");
    if (snap->accum) out_pair(out, r->allocs, r->allocs * r->size);
    else out_pair(out, 0, 0);
    mp_out_str(out, "] @");
    for (uint32_t k = 0; k < r->depth; k++) {
      mp_out_str(out, " ");
      mp_out_hex(out, snap->frames[r->first + k]);
    }
    mp_out_str(out, "\n");
  }
  const mi_prof_stats_t* s = &snap->stats;
  mp_out_str(out, "\n# mimalloc heap stats\n");
  out_stat(out, "sample_interval", s->sample_interval);
  out_stat(out, "pid", (uint64_t)getpid()); /* its perf map, for naming later */
  out_stat(out, "peak_rss", mp_peak_rss());
  out_stat(out, "start_time", mp_process_start_ms);
  out_stat(out, "live_samples", s->live_samples);
  out_stat(out, "estimated_live_bytes", (uint64_t)(s->estimated_live_bytes + 0.5));
  out_stat(out, "estimated_live_objects", (uint64_t)(s->estimated_live_objects + 0.5));
  out_stat(out, "accum_samples", s->accum_samples);
  out_stat(out, "estimated_accum_bytes", (uint64_t)(s->estimated_accum_bytes + 0.5));
  out_stat(out, "dropped_samples", s->dropped_samples);
  out_stat(out, "profiler_bytes", s->profiler_bytes);
  /* what profiling costs the process's memory: its own (now), and its rounding of sampled
   * blocks in the program's heap (now, or at the peak in a peak profile) */
  out_stat(out, "profiler_resident", snap->profiler_resident);
  out_stat(out, "sampled_rounding_bytes", snap->rounding);
  if (s->memory_events) {
    out_stat_i(out, "exact_live_bytes", s->exact_live_bytes);
    out_stat_i(out, "exact_live_objects", s->exact_live_objects);
    out_stat(out, "exact_accum_bytes", s->exact_accum_bytes);
    out_stat(out, "exact_accum_objects", s->exact_accum_objects);
  }
  out_stat(out, "rss_bytes", s->rss_bytes);
  out_stat(out, "peak_rss_bytes", s->peak_rss_bytes);
  out_stat(out, "commit_bytes", s->commit_bytes);
  out_stat(out, "page_faults", s->page_faults);
  mp_out_str(out, "\nMAPPED_LIBRARIES:\n");
  copy_maps(out);
}
