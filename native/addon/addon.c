/* The Node-API bridge to the preload library's C API, for code running inside a process
 * that was started with the preload (the `run` command's exit hook, the in-process API).
 *
 * It never links the library: the mi_prof_* entry points are looked up in the process
 * (dlsym RTLD_DEFAULT) when the module loads. Without the preload every call throws one
 * documented error and nothing else happens. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <node_api.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "mimalloc-pprof/memory-events.h"
#include "mimalloc-pprof/profile.h"

typedef struct api_s {
  bool (*start_ex)(const mi_prof_config_t*);
  void (*stop)(void);
  void (*reset)(void);
  bool (*is_enabled)(void);
  bool (*dump)(const char*);
  bool (*dump_proto)(const char*);
  bool (*stats_get)(mi_prof_stats_t*);
  void (*events_enable)(bool);
  bool (*events_enabled)(void);
  bool (*memory_snapshot)(mi_memory_snapshot_t* out);
  int (*mi_version)(void);
  bool (*pool_probe_begin)(void*, size_t);
  bool (*pool_probe_end)(void);
  bool (*pool_watched)(void);
  uint64_t (*pool_refused)(void);
  bool (*resident_get)(mi_prof_resident_t*);
  size_t (*mapping_owners)(mi_prof_mapping_owner_t*, size_t);
  bool (*thread_exclude)(bool);
  bool (*dump_peak)(const char*);
  bool (*dump_peak_proto)(const char*);
  bool (*peak)(double*, uint64_t*, uint64_t*);
  int (*js_anchor_arm)(void);
  void (*jit_map_track)(void);
  size_t (*js_anchors)(uint64_t*, size_t);
  void (*js_anchor_counts)(uint64_t[3]);
  bool (*window_open)(void);
  bool (*window_read)(mi_prof_window_t*);
  bool (*window_close)(mi_prof_window_t*);
} api_t;

static api_t api;
static bool api_ok;

#define LOOKUP(field, name) (api.field = (__typeof__(api.field))dlsym(RTLD_DEFAULT, name)) != NULL

static void resolve(void) {
  api_ok = LOOKUP(start_ex, "mi_prof_start_ex") && LOOKUP(stop, "mi_prof_stop") && LOOKUP(reset, "mi_prof_reset") &&
           LOOKUP(is_enabled, "mi_prof_is_enabled") && LOOKUP(dump, "mi_prof_dump") &&
           LOOKUP(dump_proto, "mi_prof_dump_proto") && LOOKUP(stats_get, "mi_prof_stats_get") &&
           LOOKUP(events_enable, "mi_prof_memory_events_enable") &&
           LOOKUP(events_enabled, "mi_prof_memory_events_enabled") && LOOKUP(memory_snapshot, "mi_memory_snapshot") &&
           LOOKUP(mi_version, "mi_version");
  if (api_ok) { /* a library older than the pool's watch still serves the rest */
    api.pool_probe_begin = (__typeof__(api.pool_probe_begin))dlsym(RTLD_DEFAULT, "mi_prof_pool_probe_begin");
    api.pool_probe_end = (__typeof__(api.pool_probe_end))dlsym(RTLD_DEFAULT, "mi_prof_pool_probe_end");
    api.pool_watched = (__typeof__(api.pool_watched))dlsym(RTLD_DEFAULT, "mi_prof_pool_watched");
    api.pool_refused = (__typeof__(api.pool_refused))dlsym(RTLD_DEFAULT, "mi_prof_pool_refused");
    api.resident_get = (__typeof__(api.resident_get))dlsym(RTLD_DEFAULT, "mi_prof_resident_get");
    api.mapping_owners = (__typeof__(api.mapping_owners))dlsym(RTLD_DEFAULT, "mi_prof_mapping_owners");
    api.thread_exclude = (__typeof__(api.thread_exclude))dlsym(RTLD_DEFAULT, "mi_prof_thread_exclude");
    api.dump_peak = (__typeof__(api.dump_peak))dlsym(RTLD_DEFAULT, "mi_prof_dump_peak");
    api.dump_peak_proto = (__typeof__(api.dump_peak_proto))dlsym(RTLD_DEFAULT, "mi_prof_dump_peak_proto");
    api.peak = (__typeof__(api.peak))dlsym(RTLD_DEFAULT, "mi_prof_peak");
    api.js_anchor_arm = (__typeof__(api.js_anchor_arm))dlsym(RTLD_DEFAULT, "mi_prof_js_anchor_arm");
    api.jit_map_track = (__typeof__(api.jit_map_track))dlsym(RTLD_DEFAULT, "mi_prof_jit_map_track");
    api.js_anchors = (__typeof__(api.js_anchors))dlsym(RTLD_DEFAULT, "mi_prof_js_anchors");
    api.js_anchor_counts = (__typeof__(api.js_anchor_counts))dlsym(RTLD_DEFAULT, "mi_prof_js_anchor_counts");
    api.window_open = (__typeof__(api.window_open))dlsym(RTLD_DEFAULT, "mi_prof_window_open");
    api.window_read = (__typeof__(api.window_read))dlsym(RTLD_DEFAULT, "mi_prof_window_read");
    api.window_close = (__typeof__(api.window_close))dlsym(RTLD_DEFAULT, "mi_prof_window_close");
  }
}

/* libuv's thread pool is learned from two requests queued here (see mi_prof_pool_probe_begin),
 * once per process, on the main thread's loop: a worker_threads thread may end while a request
 * of its loop is still queued, which Node treats as a fatal error. The library learns what it
 * needs while the request is being queued, so each is cancelled at once: its completion then
 * runs on the next turn of the loop instead of waiting behind the pool's work. */
static uv_work_t pool_probe;
static uv_getaddrinfo_t slow_probe;
static void pool_probe_work(uv_work_t* req) { (void)req; }
static void pool_probe_after(uv_work_t* req, int status) {
  (void)req;
  (void)status;
}
static void slow_probe_after(uv_getaddrinfo_t* req, int status, struct addrinfo* res) {
  (void)req;
  (void)status;
  if (res != NULL) uv_freeaddrinfo(res);
}

static void probe_pool(napi_env env) {
  uv_loop_t* loop = NULL;
  if (!api_ok || api.pool_probe_begin == NULL) return;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || loop == NULL || loop != uv_default_loop()) return;
  if (!api.pool_probe_begin(&pool_probe.work_req.wq, offsetof(struct uv__work, wq))) return;
  int rc = uv_queue_work(loop, &pool_probe, pool_probe_work, pool_probe_after);
  if (rc == 0) uv_cancel((uv_req_t*)&pool_probe);
  if (!api.pool_probe_end() || rc != 0) return;
  if (!api.pool_probe_begin(&slow_probe.work_req.wq, offsetof(struct uv__work, wq))) return;
  struct addrinfo hints;
  memset(&hints, 0, sizeof(hints));
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_family = AF_INET;
  if (uv_getaddrinfo(loop, &slow_probe, slow_probe_after, "127.0.0.1", NULL, &hints) == 0) uv_cancel((uv_req_t*)&slow_probe);
  api.pool_probe_end();
}

#define CHECK(call)                                          \
  do {                                                       \
    if ((call) != napi_ok) {                                 \
      napi_throw_error(env, NULL, "node-api call failed");   \
      return NULL;                                           \
    }                                                        \
  } while (0)

static napi_value throw_code(napi_env env, const char* code, const char* msg) {
  napi_throw_error(env, code, msg);
  return NULL;
}

static napi_value not_preloaded(napi_env env) {
  return throw_code(env, "MPP_ERR_NOT_PRELOADED",
                    "this process does not run under the mimalloc-pprof preload library (LD_PRELOAD)");
}

static napi_value make_bool(napi_env env, bool v) {
  napi_value r;
  CHECK(napi_get_boolean(env, v, &r));
  return r;
}

static void set_num(napi_env env, napi_value obj, const char* key, double v) {
  napi_value n;
  if (napi_create_double(env, v, &n) == napi_ok) napi_set_named_property(env, obj, key, n);
}

static void set_str(napi_env env, napi_value obj, const char* key, const char* v) {
  napi_value s;
  if (napi_create_string_utf8(env, v, NAPI_AUTO_LENGTH, &s) == napi_ok) napi_set_named_property(env, obj, key, s);
}

static void set_bool(napi_env env, napi_value obj, const char* key, bool v) {
  napi_value b;
  if (napi_get_boolean(env, v, &b) == napi_ok) napi_set_named_property(env, obj, key, b);
}

static bool get_num(napi_env env, napi_value obj, const char* key, double* out) {
  bool has = false;
  napi_value v;
  napi_valuetype t;
  if (napi_has_named_property(env, obj, key, &has) != napi_ok || !has) return false;
  if (napi_get_named_property(env, obj, key, &v) != napi_ok || napi_typeof(env, v, &t) != napi_ok) return false;
  if (t == napi_number) return napi_get_value_double(env, v, out) == napi_ok;
  if (t == napi_boolean) {
    bool b;
    if (napi_get_value_bool(env, v, &b) != napi_ok) return false;
    *out = b ? 1 : 0;
    return true;
  }
  if (t == napi_bigint) {
    uint64_t u;
    bool lossless;
    if (napi_get_value_bigint_uint64(env, v, &u, &lossless) != napi_ok) return false;
    *out = (double)u;
    return true;
  }
  return false;
}

/* available() -> { available, reason?, mimallocVersion? } */
static napi_value js_available(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value r;
  CHECK(napi_create_object(env, &r));
  set_bool(env, r, "available", api_ok);
  if (!api_ok) set_str(env, r, "reason", "not preloaded: start the process with LD_PRELOAD=$(npx mimalloc-pprof lib)");
  else set_num(env, r, "mimallocVersion", api.mi_version());
  return r;
}

/* start({ interval, seed, accum, btMax, maxBytes }) -> boolean (false: already running) */
static napi_value js_start(napi_env env, napi_callback_info info) {
  if (!api_ok) return not_preloaded(env);
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  mi_prof_config_t c;
  memset(&c, 0, sizeof(c));
  c.size = sizeof(c);
  c.version = MI_PROF_CONFIG_VERSION;
  c.mode = MI_PROF_CONFIG_OVERRIDE;
  double v;
  if (argc >= 1) {
    if (get_num(env, argv[0], "interval", &v)) c.sample_interval = (size_t)v;
    if (get_num(env, argv[0], "maxBytes", &v)) c.max_profiler_bytes = (size_t)v;
    if (get_num(env, argv[0], "seed", &v)) {
      c.has_seed = true;
      c.seed = (uint64_t)v;
    }
    if (get_num(env, argv[0], "accum", &v)) c.accum = v != 0;
    if (get_num(env, argv[0], "btMax", &v)) c.max_stack_depth = (uint32_t)v;
  }
  errno = 0;
  bool ok = api.start_ex(&c);
  if (!ok && errno != EBUSY) return throw_code(env, "MPP_ERR_START", strerror(errno));
  return make_bool(env, ok);
}

static napi_value js_stop(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  api.stop();
  return NULL;
}

static napi_value js_reset(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  api.reset();
  return NULL;
}

static napi_value js_is_running(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  return make_bool(env, api.is_enabled());
}

/* dump(path, 'proto' | 'text', peak?): writes atomically (peak: the profile at the high-water
 * mark, mi_prof_dump_peak*); throws with the errno text on failure. */
static napi_value js_dump(napi_env env, napi_callback_info info) {
  if (!api_ok) return not_preloaded(env);
  size_t argc = 3;
  napi_value argv[3];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  char path[MI_PROF_DUMP_PATH_MAX], format[8] = "proto";
  bool peak = false;
  if (argc >= 3) (void)napi_get_value_bool(env, argv[2], &peak);
  if (peak && (api.dump_peak == NULL || api.dump_peak_proto == NULL))
    return throw_code(env, "MPP_ERR_VERSION", "dump: this preload library has no peak profile (mi_prof_dump_peak)");
  size_t len = 0;
  if (argc < 1 || napi_get_value_string_utf8(env, argv[0], path, sizeof(path), &len) != napi_ok)
    return throw_code(env, "MPP_ERR_ARGUMENT", "dump(path, format): path must be a string");
  if (len >= sizeof(path) - 1) return throw_code(env, "MPP_ERR_ARGUMENT", "dump: path too long");
  if (argc >= 2 && napi_get_value_string_utf8(env, argv[1], format, sizeof(format), &len) != napi_ok)
    return throw_code(env, "MPP_ERR_ARGUMENT", "dump(path, format): format must be 'proto' or 'text'");
  bool proto = strcmp(format, "proto") == 0;
  if (!proto && strcmp(format, "text") != 0)
    return throw_code(env, "MPP_ERR_ARGUMENT", "dump(path, format): format must be 'proto' or 'text'");
  bool ok = peak ? (proto ? api.dump_peak_proto(path) : api.dump_peak(path)) : (proto ? api.dump_proto(path) : api.dump(path));
  if (!ok) {
    char msg[MI_PROF_DUMP_PATH_MAX + 128];
    snprintf(msg, sizeof(msg), "cannot write the profile to %s: %s", path, strerror(errno));
    return throw_code(env, "MPP_ERR_DUMP", msg);
  }
  return NULL;
}

static napi_value js_stats(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  mi_prof_stats_t s;
  memset(&s, 0, sizeof(s));
  s.size = sizeof(s);
  s.version = MI_PROF_STATS_VERSION;
  if (!api.stats_get(&s)) { /* a library from before version 2: the same without the variance */
    s.size = (uint32_t)offsetof(mi_prof_stats_t, estimated_live_bytes_variance);
    s.version = 1;
    if (!api.stats_get(&s)) return throw_code(env, "MPP_ERR_VERSION", "the preload library's stats version differs");
    s.estimated_live_bytes_variance = -1;
  }
  napi_value r;
  CHECK(napi_create_object(env, &r));
  set_bool(env, r, "running", s.running);
  set_num(env, r, "sampleInterval", (double)s.sample_interval);
  set_num(env, r, "liveSamples", (double)s.live_samples);
  set_num(env, r, "liveSampledBytes", (double)s.live_sampled_bytes);
  set_num(env, r, "estimatedLiveBytes", s.estimated_live_bytes);
  set_num(env, r, "estimatedLiveObjects", s.estimated_live_objects);
  if (s.estimated_live_bytes_variance >= 0) set_num(env, r, "estimatedLiveBytesStdError", sqrt(s.estimated_live_bytes_variance));
  set_num(env, r, "accumSamples", (double)s.accum_samples);
  set_num(env, r, "estimatedAccumBytes", s.estimated_accum_bytes);
  set_num(env, r, "estimatedAccumObjects", s.estimated_accum_objects);
  set_num(env, r, "uniqueStacks", (double)s.unique_stacks);
  set_num(env, r, "droppedSamples", (double)s.dropped_samples);
  set_num(env, r, "profilerBytes", (double)s.profiler_bytes);
  set_bool(env, r, "memoryEvents", s.memory_events);
  set_num(env, r, "exactLiveBytes", (double)s.exact_live_bytes);
  set_num(env, r, "exactLiveObjects", (double)s.exact_live_objects);
  set_num(env, r, "exactAccumBytes", (double)s.exact_accum_bytes);
  set_num(env, r, "exactAccumObjects", (double)s.exact_accum_objects);
  set_num(env, r, "rssBytes", (double)s.rss_bytes);
  set_num(env, r, "peakRssBytes", (double)s.peak_rss_bytes);
  set_num(env, r, "commitBytes", (double)s.commit_bytes);
  set_num(env, r, "peakCommitBytes", (double)s.peak_commit_bytes);
  set_num(env, r, "pageFaults", (double)s.page_faults);
  set_bool(env, r, "poolWatched", api.pool_watched != NULL && api.pool_watched());
  set_num(env, r, "poolUncharged", api.pool_refused != NULL ? (double)api.pool_refused() : 0);
  return r;
}

/* resident() -> mimalloc's mappings and their resident bytes, or null (an older library) */
static napi_value js_resident(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  napi_value r;
  mi_prof_resident_t m;
  memset(&m, 0, sizeof(m));
  m.size = sizeof(m);
  m.version = MI_PROF_RESIDENT_VERSION;
  bool with_self = api.resident_get != NULL && api.resident_get(&m);
  if (!with_self && api.resident_get != NULL) { /* a library from before version 2 */
    m.size = (uint32_t)offsetof(mi_prof_resident_t, profiler_resident);
    m.version = 1;
  }
  if (!with_self && (api.resident_get == NULL || !api.resident_get(&m))) {
    CHECK(napi_get_null(env, &r));
    return r;
  }
  CHECK(napi_create_object(env, &r));
  set_bool(env, r, "allocatorKnown", m.allocator_known);
  set_num(env, r, "allocatorMapped", (double)m.allocator_mapped);
  set_num(env, r, "allocatorResident", (double)m.allocator_resident);
  set_num(env, r, "untracked", (double)m.untracked);
  set_num(env, r, "arenaResident", (double)m.arena_resident);
  set_num(env, r, "profilerBytes", (double)m.profiler_bytes);
  if (with_self) set_num(env, r, "profilerResident", (double)m.profiler_resident);
  /* owners: [{ object, mapped, resident, regions }], object as a hex string (an address) */
  napi_value list;
  CHECK(napi_create_array(env, &list));
  if (api.mapping_owners != NULL) {
    mi_prof_mapping_owner_t owners[256];
    size_t n = api.mapping_owners(owners, 256);
    for (size_t i = 0; i < n && i < 256; i++) {
      napi_value o, hex;
      char buf[32];
      snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)owners[i].object);
      CHECK(napi_create_object(env, &o));
      CHECK(napi_create_string_utf8(env, buf, NAPI_AUTO_LENGTH, &hex));
      CHECK(napi_set_named_property(env, o, "object", hex));
      set_num(env, o, "mapped", (double)owners[i].mapped);
      set_num(env, o, "resident", (double)owners[i].resident);
      set_num(env, o, "regions", (double)owners[i].regions);
      CHECK(napi_set_element(env, list, (uint32_t)i, o));
    }
  }
  CHECK(napi_set_named_property(env, r, "owners", list));
  return r;
}

/* memoryEvents(enable?) -> whether exact counters are on */
static napi_value js_memory_events(napi_env env, napi_callback_info info) {
  if (!api_ok) return not_preloaded(env);
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool enable;
  if (argc >= 1 && napi_get_value_bool(env, argv[0], &enable) == napi_ok) api.events_enable(enable);
  return make_bool(env, api.events_enabled());
}

/* memorySnapshot() -> mi_memory_snapshot's figures, under the C struct's names in camelCase */
static napi_value js_memory_snapshot(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  mi_memory_snapshot_t_decl(s);
  if (!api.memory_snapshot(&s)) {
    napi_throw_error(env, NULL, "mi_memory_snapshot refused its struct");
    return NULL;
  }
  napi_value r;
  CHECK(napi_create_object(env, &r));
  set_num(env, r, "liveBytes", (double)s.live_bytes);
  set_num(env, r, "accumBytes", (double)s.accum_bytes);
  set_num(env, r, "liveCount", (double)s.live_count);
  set_num(env, r, "accumCount", (double)s.accum_count);
  return r;
}

/* excludeThread(exclude) -> whether the calling thread was excluded before; false (and
 * nothing done) with a preload library that predates mi_prof_thread_exclude */
static napi_value js_exclude_thread(napi_env env, napi_callback_info info) {
  if (!api_ok) return not_preloaded(env);
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool exclude = true;
  if (argc >= 1) (void)napi_get_value_bool(env, argv[0], &exclude);
  return make_bool(env, api.thread_exclude != NULL && api.thread_exclude(exclude));
}

/* peak() -> { bytes, unixMs, snapshots } (zeros before the first), or null from a library
 * without mi_prof_peak */
static napi_value js_peak(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  napi_value r;
  if (api.peak == NULL) {
    CHECK(napi_get_null(env, &r));
    return r;
  }
  double bytes = 0;
  uint64_t ns = 0, snapshots = 0;
  (void)api.peak(&bytes, &ns, &snapshots);
  CHECK(napi_create_object(env, &r));
  set_num(env, r, "bytes", bytes);
  set_num(env, r, "unixMs", (double)(ns / 1000000u));
  set_num(env, r, "snapshots", (double)snapshots);
  return r;
}

/* jitMapTrack() -> true: new buckets keep the perf map's size (mi_prof_jit_map_track); false
 * from a library without it */
static napi_value jit_map_track(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  if (api.jit_map_track != NULL) api.jit_map_track();
  napi_value r;
  CHECK(napi_get_boolean(env, api.jit_map_track != NULL, &r));
  return r;
}

/* jsAnchorArm() -> 1 armed, 0 not available, -1 failed (mi_prof_js_anchor_arm); 0 from a
 * library without it */
static napi_value js_anchor_arm(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  napi_value r;
  CHECK(napi_create_int32(env, api.js_anchor_arm != NULL ? api.js_anchor_arm() : 0, &r));
  return r;
}

/* jsAnchors() -> BigUint64Array of the entries (mi_prof_js_anchors) followed by [made, live,
 * dropped], or null from a library without them */
static napi_value js_anchors(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  napi_value r;
  if (api.js_anchors == NULL || api.js_anchor_counts == NULL) {
    CHECK(napi_get_null(env, &r));
    return r;
  }
  size_t need = api.js_anchors(NULL, 0), words = 0;
  for (int tries = 0; tries < 3; tries++) {
    napi_value buffer;
    void* data = NULL;
    size_t cap = need + 3;
    CHECK(napi_create_arraybuffer(env, cap * sizeof(uint64_t), &data, &buffer));
    words = api.js_anchors((uint64_t*)data, need);
    if (words <= need) { /* nothing was made meanwhile (the call allocates no Sample) */
      api.js_anchor_counts((uint64_t*)data + words);
      CHECK(napi_create_typedarray(env, napi_biguint64_array, words + 3, buffer, 0, &r));
      return r;
    }
    need = words;
  }
  CHECK(napi_get_null(env, &r));
  return r;
}

/* windowOpen() -> mi_prof_window_open's answer; null from a library without windows */
static napi_value js_window_open(napi_env env, napi_callback_info info) {
  (void)info;
  if (!api_ok) return not_preloaded(env);
  napi_value r;
  if (api.window_open == NULL || api.window_read == NULL || api.window_close == NULL) {
    CHECK(napi_get_null(env, &r));
    return r;
  }
  return make_bool(env, api.window_open());
}

/* windowRead(close) -> { liveBytes, liveCount, overflowed } so far (and the window closed when
 * `close`), or null when no window was open */
static napi_value js_window_read(napi_env env, napi_callback_info info) {
  if (!api_ok) return not_preloaded(env);
  size_t argc = 1;
  napi_value argv[1];
  CHECK(napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  bool close = false;
  if (argc >= 1) (void)napi_get_value_bool(env, argv[0], &close);
  napi_value r;
  mi_prof_window_t w = {0, 0, false};
  if (api.window_read == NULL || api.window_close == NULL || !(close ? api.window_close(&w) : api.window_read(&w))) {
    CHECK(napi_get_null(env, &r));
    return r;
  }
  CHECK(napi_create_object(env, &r));
  set_num(env, r, "liveBytes", (double)w.live_bytes);
  set_num(env, r, "liveCount", (double)w.live_count);
  napi_value overflowed = make_bool(env, w.overflowed);
  if (overflowed == NULL) return NULL;
  CHECK(napi_set_named_property(env, r, "overflowed", overflowed));
  return r;
}

NAPI_MODULE_INIT() {
  resolve();
  probe_pool(env);
  static const struct {
    const char* name;
    napi_callback fn;
  } fns[] = {
      {"available", js_available}, {"start", js_start}, {"stop", js_stop},
      {"reset", js_reset},         {"isRunning", js_is_running}, {"dump", js_dump},
      {"stats", js_stats},         {"memoryEvents", js_memory_events}, {"memorySnapshot", js_memory_snapshot},
      {"resident", js_resident},   {"excludeThread", js_exclude_thread}, {"peak", js_peak},
      {"jsAnchorArm", js_anchor_arm}, {"jsAnchors", js_anchors}, {"jitMapTrack", jit_map_track},
      {"windowOpen", js_window_open}, {"windowRead", js_window_read},
  };
  for (size_t i = 0; i < sizeof(fns) / sizeof(*fns); i++) {
    napi_value f;
    if (napi_create_function(env, fns[i].name, NAPI_AUTO_LENGTH, fns[i].fn, NULL, &f) != napi_ok ||
        napi_set_named_property(env, exports, fns[i].name, f) != napi_ok)
      return NULL;
  }
  return exports;
}
