/* proto.c owns the pprof writer: an uncompressed perftools.profiles.Profile (proto3 wire
 * format, hand-encoded) of one snapshot, streamed through mp_out_bytes.
 *
 * Rules:
 *  - no malloc, ever: scratch memory comes from mp_os_alloc_transient (a dump's buffers are
 *    exempt from the budget, so a profile stays writable once the budget is full) and is
 *    released before return;
 *    on failure out->err = ENOMEM and nothing more is written;
 *  - reentrant: threads may dump at once, so all scratch is per call (no static buffers);
 *  - called with no profiler lock held: dl_iterate_phdr takes the loader lock, and its
 *    callback neither allocates nor calls back into the profiler; it runs under
 *    mp_loader_lock alone, so that no fork happens while this dump holds the loader lock;
 *  - the profile is unsymbolised: a Location is address + mapping; names come later;
 *  - every length-delimited field's size is known before its bytes are written, so the
 *    output is a single forward stream; Profile fields go out in field-number order.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Fixed string-table indexes; mapping strings follow MP_STR_FIXED (+1 with events). */
enum {
  MP_STR_EMPTY = 0, MP_STR_ALLOC_OBJECTS, MP_STR_COUNT, MP_STR_ALLOC_SPACE, MP_STR_BYTES,
  MP_STR_INUSE_OBJECTS, MP_STR_INUSE_SPACE, MP_STR_SPACE, MP_STR_THREAD, MP_STR_TID, MP_STR_JIT_MAP, MP_STR_COMMENT, MP_STR_FIXED
};
static const char* const mp_fixed_strings[MP_STR_COMMENT] = {
  "", "alloc_objects", "count", "alloc_space", "bytes", "inuse_objects", "inuse_space", "space", "thread", "tid",
  "jit_map_bytes"
};

#define MP_THREAD_NAMES_MAX 256 /* distinct thread names labelled; more share the last */

/* Index of `name` in names[0..*n), appended if new (while room). */
static uint32_t mp_thread_name_index(char (*names)[16], uint32_t* n, const char* name) {
  for (uint32_t i = 0; i < *n; i++)
    if (memcmp(names[i], name, 16) == 0) return i;
  if (*n == MP_THREAD_NAMES_MAX) return *n - 1;
  memcpy(names[*n], name, 16);
  return (*n)++;
}

#define MP_BUILD_ID_MAX 64 /* bytes of build id kept; longer ids are truncated */

/* ---- wire encoding ---- */

static size_t pb_vlen(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) { v >>= 7; n++; }
  return n;
}

static size_t pb_put_varint(uint8_t* p, uint64_t v) {
  size_t n = 0;
  while (v >= 0x80) { p[n++] = (uint8_t)(v | 0x80); v >>= 7; }
  p[n++] = (uint8_t)v;
  return n;
}

/* A small message under construction; the caller sizes `p` for the worst case. */
typedef struct pb_buf_s {
  uint8_t* p;
  size_t len;
} pb_buf_t;

static void pb_varint(pb_buf_t* b, uint64_t v) { b->len += pb_put_varint(b->p + b->len, v); }

/* proto3 scalar: zero is the default and is omitted */
static void pb_uint(pb_buf_t* b, unsigned field, uint64_t v) {
  if (v == 0) return;
  pb_varint(b, (uint64_t)field << 3);
  pb_varint(b, v);
}

/* Writes tag + length of a length-delimited field, then `n` bytes of `data`. */
static void pb_out_ld(mp_out_t* out, unsigned field, const void* data, size_t n) {
  uint8_t hdr[16];
  size_t h = pb_put_varint(hdr, ((uint64_t)field << 3) | 2);
  h += pb_put_varint(hdr + h, n);
  mp_out_bytes(out, hdr, h);
  if (n > 0) mp_out_bytes(out, data, n);
}

static void pb_out_uint(mp_out_t* out, unsigned field, uint64_t v) {
  uint8_t tmp[24];
  pb_buf_t b = { tmp, 0 };
  pb_uint(&b, field, v);
  if (b.len > 0) mp_out_bytes(out, tmp, b.len);
}

static void pb_out_value_type(mp_out_t* out, unsigned field, uint64_t type, uint64_t unit) {
  uint8_t tmp[24];
  pb_buf_t b = { tmp, 0 };
  pb_uint(&b, 1, type);
  pb_uint(&b, 2, unit);
  pb_out_ld(out, field, tmp, b.len);
}

static int64_t mp_round_i64(double x) {
  if (!(x > 0)) return 0; /* also NaN */
  if (x >= 9.2e18) return INT64_MAX;
  int64_t i = (int64_t)x; /* x < 2^53 is split exactly; a larger double is a whole number */
  return x - (double)i >= 0.5 ? i + 1 : i;
}

static size_t mp_fmt_i64(char* buf, int64_t v) {
  if (v >= 0) return mp_fmt_u64(buf, (uint64_t)v);
  buf[0] = '-';
  return 1 + mp_fmt_u64(buf + 1, (uint64_t)0 - (uint64_t)v);
}

/* Appends "key" + decimal; `buf` has room for the longest line built below. */
static size_t mp_kv(char* buf, size_t len, const char* key, int64_t v, bool is_signed) {
  size_t k = mp_strlen(key);
  memcpy(buf + len, key, k);
  len += k;
  return len + (is_signed ? mp_fmt_i64(buf + len, v) : mp_fmt_u64(buf + len, (uint64_t)v));
}

/* ---- mappings from the loader ---- */

typedef struct mp_seg_s {
  uint64_t start, limit, offset;
  uint32_t obj;
} mp_seg_t;

typedef struct mp_obj_s {
  size_t name_off, name_len, bid_off, bid_len; /* into the pool */
  uint64_t name_idx, bid_idx;                  /* string-table indexes; bid 0 when none */
} mp_obj_t;

typedef struct mp_maps_s {
  bool counting;        /* first pass: only sizes */
  unsigned seen;        /* objects visited; the first one with an empty name is main */
  uintptr_t vdso_phdr;  /* program headers of the vDSO image, 0 if unknown */
  const char* exe;      /* main program path, in the pool */
  size_t exe_len;
  mp_seg_t* segs; size_t nsegs, segcap;
  mp_obj_t* objs; size_t nobjs, objcap;
  char* pool; size_t pool_len, pool_cap;
} mp_maps_t;

static size_t mp_build_id(const struct dl_phdr_info* info, const ElfW(Phdr)* ph, char* hex) {
  const uint8_t* id = NULL;
  size_t len = mp_note_build_id((const void*)(info->dlpi_addr + ph->p_vaddr), ph->p_filesz, ph->p_align, &id);
  return mp_fmt_hex_bytes(hex, id, len < MP_BUILD_ID_MAX ? len : MP_BUILD_ID_MAX);
}

/* Loader callback: runs under the loader lock, so it only writes into preallocated room
 * and skips what does not fit (an object loaded between the two passes). */
static int mp_phdr_cb(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  mp_maps_t* m = (mp_maps_t*)arg;
  bool first = (m->seen++ == 0);
  size_t nexec = 0;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
    if (info->dlpi_phdr[i].p_type == PT_LOAD && (info->dlpi_phdr[i].p_flags & PF_X)) nexec++;
  }
  if (nexec == 0) return 0;
  const char* name = info->dlpi_name != NULL ? info->dlpi_name : "";
  size_t name_len = mp_strlen(name);
  if (m->vdso_phdr != 0 && (uintptr_t)info->dlpi_phdr == m->vdso_phdr) {
    name = "[vdso]";
    name_len = 6;
  } else if (name_len == 0) {
    if (!first) return 0; /* nameless and not the main program: nothing to point at */
    name = m->exe;
    name_len = m->exe_len;
  }
  if (m->counting) {
    m->nobjs++;
    m->nsegs += nexec;
    m->pool_len += name_len + 2 * MP_BUILD_ID_MAX;
    return 0;
  }
  if (m->nobjs >= m->objcap || m->nsegs + nexec > m->segcap ||
      m->pool_len + name_len + 2 * MP_BUILD_ID_MAX > m->pool_cap) {
    return 0;
  }
  mp_obj_t* o = &m->objs[m->nobjs];
  o->name_len = name_len;
  if (name == m->exe) {
    o->name_off = 0; /* readlink wrote it at the start of the pool */
  } else {
    o->name_off = m->pool_len;
    memcpy(m->pool + m->pool_len, name, name_len);
    m->pool_len += name_len;
  }
  o->bid_off = m->pool_len;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum && o->bid_len == 0; i++) {
    if (info->dlpi_phdr[i].p_type == PT_NOTE) {
      o->bid_len = mp_build_id(info, &info->dlpi_phdr[i], m->pool + m->pool_len);
    }
  }
  m->pool_len += o->bid_len;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    mp_seg_t* s = &m->segs[m->nsegs++];
    s->start = (uint64_t)info->dlpi_addr + ph->p_vaddr;
    s->limit = s->start + ph->p_memsz;
    s->offset = ph->p_offset;
    s->obj = (uint32_t)m->nobjs;
  }
  m->nobjs++;
  return 0;
}

static uintptr_t mp_vdso_phdr(void) {
  uintptr_t ehdr = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  if (ehdr == 0) return 0;
  return ehdr + ((const ElfW(Ehdr)*)ehdr)->e_phoff;
}

/* Mapping id (1-based) containing `addr`, or 0. `order` sorts segments by start. */
static uint64_t mp_find_mapping(const mp_maps_t* m, const uint32_t* order, uint64_t addr) {
  size_t lo = 0, hi = m->nsegs;
  while (lo < hi) { /* first segment whose start > addr */
    size_t mid = lo + (hi - lo) / 2;
    if (m->segs[order[mid]].start <= addr) lo = mid + 1; else hi = mid;
  }
  if (lo == 0) return 0;
  const mp_seg_t* s = &m->segs[order[lo - 1]];
  return addr < s->limit ? (uint64_t)order[lo - 1] + 1 : 0;
}

/* ---- locations ---- */

typedef struct mp_loc_slot_s {
  uintptr_t ra;
  uint64_t id; /* 0: empty */
} mp_loc_slot_t;

static bool mp_row_kept(const mp_snapshot_t* snap, const mp_row_t* row) {
  if (row->live == 0 && (!snap->accum || row->allocs == 0)) return false;
  return (size_t)row->first + row->depth <= snap->nframes;
}

/* Location id of `ra`, assigned in first-seen order; `ras[id-1]` records it. */
static uint64_t mp_loc_id(mp_loc_slot_t* slots, size_t mask, uintptr_t* ras, uint64_t* nlocs,
                          uintptr_t ra) {
  size_t i = (size_t)(((uint64_t)ra * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  while (slots[i].id != 0) {
    if (slots[i].ra == ra) return slots[i].id;
    i = (i + 1) & mask;
  }
  slots[i].ra = ra;
  slots[i].id = ++*nlocs;
  ras[*nlocs - 1] = ra;
  return *nlocs;
}

void mp_write_proto(mp_out_t* out, const mp_snapshot_t* snap) {
  /* mappings: count, then fill the preallocated room */
  mp_maps_t m;
  memset(&m, 0, sizeof(m));
  m.counting = true;
  m.vdso_phdr = mp_vdso_phdr();
  m.exe_len = PATH_MAX; /* room for readlink below */
  mp_lock(&mp_loader_lock);
  dl_iterate_phdr(mp_phdr_cb, &m);
  mp_unlock(&mp_loader_lock);
  m.objcap = m.nobjs + 16;
  m.segcap = m.nsegs + 32;
  m.pool_cap = m.pool_len + PATH_MAX + 16 * (PATH_MAX + 2 * MP_BUILD_ID_MAX);
  size_t maps_bytes = m.objcap * sizeof(mp_obj_t) + m.segcap * (sizeof(mp_seg_t) + 4) + m.pool_cap;
  char* maps_mem = (char*)mp_os_alloc_transient(maps_bytes);
  if (maps_mem == NULL) { out->err = ENOMEM; return; }
  m.objs = (mp_obj_t*)(void*)maps_mem;
  m.segs = (mp_seg_t*)(void*)(maps_mem + m.objcap * sizeof(mp_obj_t));
  uint32_t* order = (uint32_t*)(void*)((char*)m.segs + m.segcap * sizeof(mp_seg_t));
  m.pool = (char*)(order + m.segcap);
  ssize_t n = readlink("/proc/self/exe", m.pool, PATH_MAX);
  m.exe = m.pool;
  m.exe_len = n > 0 ? (size_t)n : 0;
  m.pool_len = m.exe_len;
  m.counting = false;
  m.seen = 0;
  m.nobjs = m.nsegs = 0;
  mp_lock(&mp_loader_lock);
  dl_iterate_phdr(mp_phdr_cb, &m);
  mp_unlock(&mp_loader_lock);
  for (size_t i = 0; i < m.nsegs; i++) { /* insertion sort: few segments */
    size_t j = i;
    while (j > 0 && m.segs[order[j - 1]].start > m.segs[i].start) { order[j] = order[j - 1]; j--; }
    order[j] = (uint32_t)i;
  }

  /* locations: one per distinct return address of the kept rows */
  size_t nused = 0, maxdepth = 0;
  for (size_t r = 0; r < snap->nrows; r++) {
    const mp_row_t* row = &snap->rows[r];
    if (!mp_row_kept(snap, row)) continue;
    nused += row->depth;
    if (row->depth > maxdepth) maxdepth = row->depth;
  }
  size_t cap = 16;
  while (cap < 2 * nused) cap *= 2;
  /* the thread names are this dump's own: dumps may run at once on several threads */
  size_t names_bytes = (size_t)MP_THREAD_NAMES_MAX * 16;
  size_t loc_bytes = names_bytes + cap * sizeof(mp_loc_slot_t) + (nused + 1) * sizeof(uintptr_t) + maxdepth * 10 + 16;
  char* loc_mem = (char*)mp_os_alloc_transient(loc_bytes);
  if (loc_mem == NULL) { mp_os_free(maps_mem, maps_bytes); out->err = ENOMEM; return; }
  char (*thread_names)[16] = (char (*)[16])(void*)loc_mem;
  mp_loc_slot_t* slots = (mp_loc_slot_t*)(void*)(loc_mem + names_bytes);
  uintptr_t* ras = (uintptr_t*)(void*)(loc_mem + names_bytes + cap * sizeof(mp_loc_slot_t));
  uint8_t* ids = (uint8_t*)(ras + nused + 1); /* one sample's packed location ids */
  uint64_t nlocs = 0;
  for (size_t r = 0; r < snap->nrows; r++) {
    const mp_row_t* row = &snap->rows[r];
    if (!mp_row_kept(snap, row)) continue;
    for (uint32_t d = 0; d < row->depth; d++) {
      mp_loc_id(slots, cap - 1, ras, &nlocs, snap->frames[row->first + d]);
    }
  }

  /* string indexes after the fixed strings and comments: mapping names and build ids, then
   * thread names (all known before the samples that refer to them are written) */
  uint64_t next_str = MP_STR_COMMENT + (snap->stats.memory_events ? 2 : 1) + (snap->peak ? 1 : 0) + 1;
  for (size_t i = 0; i < m.nobjs; i++) {
    m.objs[i].name_idx = next_str++;
    m.objs[i].bid_idx = m.objs[i].bid_len ? next_str++ : 0;
  }
  uint32_t nthreads = 0;
  uint64_t first_thread_str = next_str;

  /* sample_type, in Go's heap order */
  pb_out_value_type(out, 1, MP_STR_ALLOC_OBJECTS, MP_STR_COUNT);
  pb_out_value_type(out, 1, MP_STR_ALLOC_SPACE, MP_STR_BYTES);
  pb_out_value_type(out, 1, MP_STR_INUSE_OBJECTS, MP_STR_COUNT);
  pb_out_value_type(out, 1, MP_STR_INUSE_SPACE, MP_STR_BYTES);

  /* samples: values are unsampled (Horvitz-Thompson) and already rounded */
  for (size_t r = 0; r < snap->nrows && out->err == 0; r++) {
    const mp_row_t* row = &snap->rows[r];
    if (!mp_row_kept(snap, row)) continue;
    pb_buf_t idb = { ids, 0 };
    for (uint32_t d = 0; d < row->depth; d++) {
      pb_varint(&idb, mp_loc_id(slots, cap - 1, ras, &nlocs, snap->frames[row->first + d]));
    }
    double w = mp_weight((double)row->size, snap->interval);
    double bytes = (double)row->size * w;
    int64_t vals[4] = {
      snap->accum ? mp_round_i64((double)row->allocs * w) : 0,
      snap->accum ? mp_round_i64((double)row->allocs * bytes) : 0,
      mp_round_i64((double)row->live * w),
      mp_round_i64((double)row->live * bytes),
    };
    uint8_t vtmp[48];
    pb_buf_t vb = { vtmp, 0 };
    for (int i = 0; i < 4; i++) pb_varint(&vb, (uint64_t)vals[i]); /* negatives: 10 bytes */
    /* labels: bytes = the sample size; thread = the thread's name; tid = its kernel id;
     * jit_map_bytes = V8's perf map size when the stack was taken (jitmap.c), when known */
    uint8_t ltmp[40], ttmp[40], itmp[40], jtmp[40];
    pb_buf_t lb = { ltmp, 0 }, tb = { ttmp, 0 }, ib = { itmp, 0 }, jb = { jtmp, 0 };
    if (row->jit_map_bytes != 0) {
      pb_uint(&jb, 1, MP_STR_JIT_MAP);
      pb_uint(&jb, 3, row->jit_map_bytes);
    }
    pb_uint(&lb, 1, MP_STR_BYTES);
    pb_uint(&lb, 3, row->size);
    pb_uint(&lb, 4, MP_STR_BYTES);
    pb_uint(&tb, 1, MP_STR_THREAD);
    pb_uint(&tb, 2, first_thread_str + mp_thread_name_index(thread_names, &nthreads, row->thread));
    pb_uint(&ib, 1, MP_STR_TID);
    pb_uint(&ib, 3, (uint64_t)row->tid);
    size_t body = (idb.len ? 1 + pb_vlen(idb.len) + idb.len : 0) + 1 + pb_vlen(vb.len) + vb.len +
                  1 + pb_vlen(lb.len) + lb.len + 1 + pb_vlen(tb.len) + tb.len + 1 + pb_vlen(ib.len) + ib.len +
                  (jb.len ? 1 + pb_vlen(jb.len) + jb.len : 0);
    uint8_t hdr[16];
    size_t h = pb_put_varint(hdr, (2 << 3) | 2);
    h += pb_put_varint(hdr + h, body);
    mp_out_bytes(out, hdr, h);
    if (idb.len) pb_out_ld(out, 1, ids, idb.len);
    pb_out_ld(out, 2, vtmp, vb.len);
    pb_out_ld(out, 3, ltmp, lb.len);
    pb_out_ld(out, 3, ttmp, tb.len);
    pb_out_ld(out, 3, itmp, ib.len);
    if (jb.len) pb_out_ld(out, 3, jtmp, jb.len);
  }

  /* mappings: ids are 1-based segment positions; the main program comes first */
  for (size_t i = 0; i < m.nsegs; i++) {
    const mp_seg_t* s = &m.segs[i];
    uint8_t tmp[80];
    pb_buf_t b = { tmp, 0 };
    pb_uint(&b, 1, i + 1);
    pb_uint(&b, 2, s->start);
    pb_uint(&b, 3, s->limit);
    pb_uint(&b, 4, s->offset);
    pb_uint(&b, 5, m.objs[s->obj].name_idx);
    pb_uint(&b, 6, m.objs[s->obj].bid_idx);
    pb_out_ld(out, 3, tmp, b.len);
  }

  /* locations: address points into the call instruction (pprof does not subtract 1) */
  for (uint64_t i = 0; i < nlocs && out->err == 0; i++) {
    uint64_t addr = ras[i] ? (uint64_t)ras[i] - 1 : 0;
    uint8_t tmp[48];
    pb_buf_t b = { tmp, 0 };
    pb_uint(&b, 1, i + 1);
    pb_uint(&b, 2, addr ? mp_find_mapping(&m, order, addr) : 0);
    pb_uint(&b, 3, addr);
    pb_out_ld(out, 4, tmp, b.len);
  }

  /* string_table, in index order */
  for (int i = 0; i < MP_STR_COMMENT; i++) {
    pb_out_ld(out, 6, mp_fixed_strings[i], mp_strlen(mp_fixed_strings[i]));
  }
  char line[256];
  size_t len = 0;
  len = mp_kv(line, len, "mimalloc-pprof interval=", mp_round_i64(snap->interval), false);
  len = mp_kv(line, len, " dropped_samples=", (int64_t)snap->stats.dropped_samples, false);
  len = mp_kv(line, len, " live_samples=", (int64_t)snap->stats.live_samples, false);
  len = mp_kv(line, len, " pid=", (int64_t)getpid(), false); /* its perf map, for naming later */
  len = mp_kv(line, len, " peak_rss=", (int64_t)mp_peak_rss(), false);
  len = mp_kv(line, len, " start_time=", (int64_t)mp_process_start_ms, false); /* with the pid: the process */
  pb_out_ld(out, 6, line, len);
  if (snap->stats.memory_events) {
    len = mp_kv(line, 0, "exact_live_bytes=", snap->stats.exact_live_bytes, true);
    len = mp_kv(line, len, " exact_live_objects=", snap->stats.exact_live_objects, true);
    len = mp_kv(line, len, " exact_accum_bytes=", (int64_t)snap->stats.exact_accum_bytes, false);
    len = mp_kv(line, len, " exact_accum_objects=", (int64_t)snap->stats.exact_accum_objects, false);
    pb_out_ld(out, 6, line, len);
  }
  if (snap->peak) { /* in-use figures are the peak's: how much, and when */
    len = mp_kv(line, 0, "peak: estimated_in_use_bytes=", mp_round_i64(snap->peak_bytes), false);
    len = mp_kv(line, len, " at_unix_ms=", (int64_t)(snap->peak_ns / 1000000u), false);
    pb_out_ld(out, 6, line, len);
  }
  /* what profiling costs the process's memory (text.c says the same) */
  len = mp_kv(line, 0, "profiler: resident_bytes=", (int64_t)snap->profiler_resident, false);
  len = mp_kv(line, len, " sampled_rounding_bytes=", (int64_t)snap->rounding, false);
  pb_out_ld(out, 6, line, len);
  for (size_t i = 0; i < m.nobjs; i++) {
    pb_out_ld(out, 6, m.pool + m.objs[i].name_off, m.objs[i].name_len);
    if (m.objs[i].bid_len) pb_out_ld(out, 6, m.pool + m.objs[i].bid_off, m.objs[i].bid_len);
  }
  for (uint32_t i = 0; i < nthreads; i++) pb_out_ld(out, 6, thread_names[i], strnlen(thread_names[i], 16));

  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) == 0) {
    pb_out_uint(out, 9, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
  }
  pb_out_value_type(out, 11, MP_STR_SPACE, MP_STR_BYTES);
  int64_t period = mp_round_i64(snap->interval);
  pb_out_uint(out, 12, (uint64_t)(period > 0 ? period : 1));
  pb_out_uint(out, 13, MP_STR_COMMENT);
  if (snap->stats.memory_events) pb_out_uint(out, 13, MP_STR_COMMENT + 1);
  if (snap->peak) pb_out_uint(out, 13, MP_STR_COMMENT + (snap->stats.memory_events ? 2 : 1));
  pb_out_uint(out, 13, MP_STR_COMMENT + (snap->stats.memory_events ? 2 : 1) + (snap->peak ? 1 : 0)); /* the profiler's cost */
  pb_out_uint(out, 14, MP_STR_INUSE_SPACE);

  mp_os_free(loc_mem, loc_bytes);
  mp_os_free(maps_mem, maps_bytes);
}
