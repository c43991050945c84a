/* The environment, read once at load from `environ` (no getenv, no allocation), into one
 * table. An invalid value warns once on stderr and the default stays. Names and meanings
 * are those of the original C system. */
#include <string.h>

#include "internal.h"

extern char** environ;

mp_options_t mp_env;

typedef enum kind_e { K_BOOL, K_SIZE, K_U64, K_BTMAX, K_PATH, K_FORMAT } kind_t;

typedef struct option_s {
  const char* name;  /* without the "MIMALLOC_" prefix */
  kind_t kind;
  void* value;
  bool* set;
} option_t;

static const char* find_env(const char* name) {
  static const char prefix[] = "MIMALLOC_";
  size_t plen = sizeof(prefix) - 1, nlen = mp_strlen(name);
  if (environ == NULL) return NULL;
  for (char** e = environ; *e != NULL; e++) {
    const char* s = *e;
    if (strncmp(s, prefix, plen) == 0 && strncmp(s + plen, name, nlen) == 0 &&
        s[plen + nlen] == '=')
      return s + plen + nlen + 1;
  }
  return NULL;
}

#ifdef MP_TEST_HOOKS
static bool hook_lookup(const char* name) {
  size_t n = mp_strlen(name);
  for (char** e = environ; e != NULL && *e != NULL; e++)
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return (*e)[n + 1] != 0 && strcmp(*e + n + 1, "0") != 0;
  return false;
}

/* Read once per name (by the literal's address): some hooks sit on the sampling and capture
 * paths, where scanning the environment each time would make the test-hooks build's timings
 * (bench/node-features.mjs) say nothing about the production build's. Races only repeat the
 * same lookup. */
#define HOOK_CACHE 32
static struct {
  _Atomic(const char*) name;
  atomic_int value; /* 0 unknown, 1 false, 2 true */
} hook_cache[HOOK_CACHE];

bool mp_test_hook(const char* name) {
  for (unsigned i = 0; i < HOOK_CACHE; i++) {
    const char* at = atomic_load_explicit(&hook_cache[i].name, memory_order_acquire);
    if (at == name) {
      int v = atomic_load_explicit(&hook_cache[i].value, memory_order_relaxed);
      if (v != 0) return v == 2;
      break;
    }
    if (at == NULL) {
      const char* expected = NULL;
      if (!atomic_compare_exchange_strong(&hook_cache[i].name, &expected, name) && expected != name) continue;
      bool on = hook_lookup(name);
      atomic_store_explicit(&hook_cache[i].value, on ? 2 : 1, memory_order_relaxed);
      return on;
    }
  }
  return hook_lookup(name);
}
#endif

/* Decimal or 0x-hex, with an optional k/m/g suffix (powers of 1024). */
static bool parse_u64(const char* s, uint64_t* out, bool allow_suffix) {
  uint64_t v = 0;
  size_t i = 0;
  unsigned base = 10;
  if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    i = 2;
  }
  size_t digits = 0;
  for (;; i++, digits++) {
    char c = s[i];
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F') d = (unsigned)(c - 'A' + 10);
    else break;
    if (v > (UINT64_MAX - d) / base) return false;
    v = v * base + d;
  }
  if (digits == 0) return false;
  if (allow_suffix && s[i] != 0) {
    unsigned shift = 0;
    switch (s[i]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return false;
    }
    i++;
    if (s[i] == 'i' || s[i] == 'I') i++;
    if (s[i] == 'b' || s[i] == 'B') i++;
    if (v > (UINT64_MAX >> shift)) return false;
    v <<= shift;
  }
  if (s[i] != 0) return false;
  *out = v;
  return true;
}

static bool parse_bool(const char* s, bool* out) {
  static const char* yes[] = {"1", "true", "on", "yes"};
  static const char* no[] = {"0", "false", "off", "no", ""};
  for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++)
    if (strcasecmp(s, yes[i]) == 0) return *out = true;
  for (size_t i = 0; i < sizeof(no) / sizeof(*no); i++)
    if (strcasecmp(s, no[i]) == 0) return !(*out = false);
  return false;
}

static bool parse_one(const option_t* opt, const char* s) {
  uint64_t v;
  switch (opt->kind) {
    case K_BOOL:
      return parse_bool(s, opt->value);
    case K_SIZE:
      if (!parse_u64(s, &v, true)) return false;
      *(size_t*)opt->value = (size_t)v;
      return true;
    case K_U64:
      if (!parse_u64(s, &v, false)) return false;
      *(uint64_t*)opt->value = v;
      return true;
    case K_BTMAX:
      if (!parse_u64(s, &v, false) || v == 0 || v > MI_PROF_MAX_BT) return false;
      *(unsigned*)opt->value = (unsigned)v;
      return true;
    case K_PATH:
      if (mp_strlen(s) >= MI_PROF_DUMP_PATH_MAX) return false;
      strcpy(opt->value, s);
      return true;
    case K_FORMAT:
      if (strcasecmp(s, "text") == 0) *(mp_format_t*)opt->value = MP_FORMAT_TEXT;
      else if (strcasecmp(s, "proto") == 0) *(mp_format_t*)opt->value = MP_FORMAT_PROTO;
      else return false;
      return true;
  }
  return false;
}

static void warn_invalid(const char* name, const char* value) {
  char msg[256] = "invalid value for MIMALLOC_";
  size_t n = mp_strlen(msg);
  for (size_t i = 0; name[i] != 0 && n < 200; i++) msg[n++] = name[i];
  msg[n] = 0;
  mp_warnf2(msg, " (ignored, using the default): ", value);
}

void mp_options_init(void) {
  mp_options_t* o = &mp_env;
  memset(o, 0, sizeof(*o));
  o->interval = MI_PROF_DEFAULT_INTERVAL;
  o->bt_max = MI_PROF_DEFAULT_BT_MAX;
  o->arena_bytes = (size_t)8 << 30;
  o->direct = true;
  bool rate_set = false, path_set = false, ignored = false;
  size_t rate = MI_PROF_DEFAULT_INTERVAL;

  const option_t table[] = {
      {"PROF", K_BOOL, &o->prof, &ignored},
      {"PROF_SAMPLE_RATE", K_SIZE, &rate, &rate_set},
      {"PROF_SAMPLE_INTERVAL", K_SIZE, &o->interval, &o->interval_set},
      {"PROF_ACCUM", K_BOOL, &o->accum, &o->accum_set},
      {"PROF_BT_MAX", K_BTMAX, &o->bt_max, &o->bt_max_set},
      {"PROF_MAX_BYTES", K_SIZE, &o->max_bytes, &o->max_bytes_set},
      {"PROF_SEED", K_U64, &o->seed, &o->seed_set},
      {"PROF_DUMP_AT_EXIT", K_PATH, o->dump_at_exit, &path_set},
      {"PROF_DUMP_PEAK_AT_EXIT", K_PATH, o->dump_peak_at_exit, &ignored},
      {"PROF_DUMP_FORMAT", K_FORMAT, &o->dump_format, &o->dump_format_set},
      {"MEMORY_EVENTS", K_BOOL, &o->memory_events, &ignored},
      {"PROF_VERBOSE", K_BOOL, &o->verbose, &ignored},
      {"PROF_ARENA_SIZE", K_SIZE, &o->arena_bytes, &ignored},
      {"PROF_DIRECT", K_BOOL, &o->direct, &ignored},
      {"PROF_PERF_MAP", K_BOOL, &o->perf_map, &ignored},
      {"PROF_UNWIND_CACHE", K_PATH, o->unwind_cache, &ignored},
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(*table); i++) {
    const char* s = find_env(table[i].name);
    if (s == NULL) continue;
    /* Parse into a scratch copy so that a bad value leaves the default untouched. */
    union { bool b; size_t z; uint64_t u; unsigned k; mp_format_t f; } scratch = {.u = 0};
    option_t tmp = table[i];
    char path[MI_PROF_DUMP_PATH_MAX];
    tmp.value = tmp.kind == K_PATH ? (void*)path : (void*)&scratch;
    bool ok = parse_one(&tmp, s);
    if (ok && table[i].kind == K_SIZE && (table[i].value == &o->interval || table[i].value == &rate) &&
        scratch.z == 0)
      ok = false;
    if (ok && table[i].value == &o->arena_bytes && scratch.z < MP_ARENA_MIN) ok = false;
    if (ok && table[i].value == o->unwind_cache && path[0] != 0 && path[0] != '/') ok = false; /* a program's chdir would move it */
    if (!ok) {
      warn_invalid(table[i].name, s);
      continue;
    }
    if (tmp.kind == K_PATH) strcpy(table[i].value, path);
    else memcpy(table[i].value, &scratch,
                tmp.kind == K_BOOL ? sizeof(bool) : tmp.kind == K_BTMAX ? sizeof(unsigned)
                : tmp.kind == K_FORMAT ? sizeof(mp_format_t) : sizeof(uint64_t));
    *table[i].set = true;
  }
  /* INTERVAL wins over its alias RATE. */
  if (!o->interval_set && rate_set) {
    o->interval = rate;
    o->interval_set = true;
  }
}
