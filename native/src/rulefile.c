/* The unwind rules kept between runs (MIMALLOC_PROF_UNWIND_CACHE=<folder>; `run` sets it).
 *
 * A Node process's first samples are dear: each return address met for the first time (about
 * 1,300 in a short HTTP service, nearly all at its start and on V8's own threads) is a miss that
 * reads node's search table and FDE through its mapping, and those pages go back to the kernel
 * with a madvise whose TLB flush interrupts every CPU the process runs on (unwind.c,
 * bench/README.md). A restarted process meets the same addresses again. So at exit the rules
 * of the unwind cache are written per object, keyed by the object's build id, as offsets from
 * its load address; at the next start each loaded object's file fills the cache, and its
 * addresses are hits from the first sample.
 *
 * Invariants:
 *  - a file is used only when it names both the object's build id and this library's own (a
 *    rule's packing is this build's), its size is exactly its entries', its checksum holds,
 *    and every entry is a rule this build can make at an offset inside the object's loaded
 *    span; else it is ignored whole and the object's rules come from its tables as before;
 *  - reading happens where profiling starts (the load constructor or mi_prof_start: never
 *    inside an allocation), writing at exit (atexit); both through raw system calls (no
 *    cancellation point), with no descriptor kept, into memory mapped for the purpose and
 *    unmapped after. A process ended by a signal keeps nothing: the objects are listed with
 *    dl_iterate_phdr, which takes the loader's lock, not to be waited for in a handler;
 *  - a file is written beside its name (O_EXCL, 0600, a name of its own: pid and clock) and
 *    renamed over it: a reader sees a whole file or the one before; processes that exit
 *    together each write a whole one, the last to rename wins;
 *  - objects without a build id, JIT code, the vDSO and this library are never kept (a rule
 *    of an address in this library would be this build's, already known). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stddef.h>
#include <sys/stat.h>
#include <string.h>
#include <sys/syscall.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

#if MP_UNWIND_CFI

#define ID_MAX 32u
#define OBJECTS_KEPT 32u
#define RULES_VERSION 1u

typedef struct identity_s {
  uint8_t id[ID_MAX];
  uint8_t id_len;
  uintptr_t bias;      /* its load address: a code address is bias + offset */
  uintptr_t lo, hi;    /* its loaded segments' span, as offsets */
} identity_t;

typedef struct file_header_s {
  char magic[8];       /* "mpprules" */
  uint32_t version;    /* RULES_VERSION */
  uint32_t count;      /* entries that follow */
  uint64_t checksum;   /* of the entries (checksum below) */
  uint8_t library[ID_MAX], object[ID_MAX];
  uint8_t library_len, object_len, pad[6];
} file_header_t;
_Static_assert(sizeof(file_header_t) == 96, "the header's layout is the file's");

typedef struct entry_s {
  uint64_t offset;     /* from the object's load address */
  uint64_t rule;       /* a packed mp_unwind_rule_t */
} entry_t;

static identity_t self; /* this library's own; id_len 0: nothing is kept */
static uint64_t parsed_at_load; /* the misses parsed when the files were read: none since, nothing new to write */
/* The loader's count of objects unloaded (dlpi_subs), when the files were read. The cache keeps
 * the rules of code unloaded since (unwind.c: never invalidated); at exit they would be taken
 * for those of whatever object holds their addresses now, and kept for good. So a process that
 * unloaded anything keeps nothing. */
static unsigned long long subs_at_load;
static bool forgotten; /* mp_rules_forget: this process keeps nothing */

/* FNV-1a over the entries' bytes, seeded with their count. */
static uint64_t checksum(const entry_t* e, uint32_t count) {
  uint64_t h = 0xcbf29ce484222325ull ^ count;
  const uint8_t* p = (const uint8_t*)e;
  for (size_t i = 0; i < (size_t)count * sizeof(*e); i++) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

/* The build id and loaded span from an object's program headers. */
static bool identity_from(const ElfW(Phdr)* ph, size_t phnum, uintptr_t bias, identity_t* out) {
  out->id_len = 0;
  out->bias = bias;
  out->lo = UINTPTR_MAX;
  out->hi = 0;
  for (size_t i = 0; i < phnum; i++) {
    if (ph[i].p_type == PT_LOAD) {
      if (ph[i].p_vaddr < out->lo) out->lo = ph[i].p_vaddr;
      if (ph[i].p_vaddr + ph[i].p_memsz > out->hi) out->hi = ph[i].p_vaddr + ph[i].p_memsz;
    }
    if (ph[i].p_type != PT_NOTE || out->id_len != 0) continue;
    const uint8_t* id = NULL;
    size_t len = mp_note_build_id((const void*)(bias + ph[i].p_vaddr), ph[i].p_filesz, ph[i].p_align, &id);
    if (len >= 8 && len <= ID_MAX) {
      memcpy(out->id, id, len);
      out->id_len = (uint8_t)len;
    }
  }
  return out->id_len != 0 && out->lo < out->hi;
}

/* The loaded objects' identities (dl_iterate_phdr: where profiling starts and at exit, never
 * inside an allocation or a signal handler), this library's own apart. */
typedef struct objects_s {
  identity_t object[OBJECTS_KEPT];
  unsigned n;
  unsigned long long subs; /* the loader's count of objects unloaded (dlpi_subs) */
} objects_t;

static int collect(struct dl_phdr_info* info, size_t size, void* arg) {
  objects_t* all = arg;
  if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) all->subs = info->dlpi_subs;
  identity_t o;
  if (info->dlpi_name != NULL && strncmp(info->dlpi_name, "linux-vdso", 10) == 0) return 0;
  if (!identity_from(info->dlpi_phdr, info->dlpi_phnum, info->dlpi_addr, &o)) return 0;
  uintptr_t here = (uintptr_t)&mp_rules_load;
  if (here >= o.bias + o.lo && here < o.bias + o.hi) self = o;
  else if (all->n < OBJECTS_KEPT) all->object[all->n++] = o;
  return 0;
}

/* The objects loaded where the files were read: the only ones whose rules are kept. Their
 * addresses were theirs for the whole life of the cache (none was unloaded: subs_at_load), so
 * every cached rule in their spans came from their tables; an object loaded later may sit
 * where JIT code was, whose frame-pointer rules the cache still holds. (Such an object is
 * loaded later in the next run too, and its file would never be read.) */
static objects_t at_start;

/* <folder>/<build id in hex>.rules, and the temporary name beside it when `tmp` is set. */
static bool file_name(const identity_t* o, char* out, size_t cap, bool tmp) {
  size_t n = mp_strlen(mp_env.unwind_cache);
  if (n + 1 + 2 * ID_MAX + 64 > cap) return false; /* ".rules.tmp.<pid>.<ns>" at most 43 */
  memcpy(out, mp_env.unwind_cache, n);
  out[n++] = '/';
  n += mp_fmt_hex_bytes(out + n, o->id, o->id_len);
  memcpy(out + n, ".rules", 6);
  n += 6;
  if (tmp) { /* unique across pid namespaces sharing the folder too: the clock's nanoseconds */
    memcpy(out + n, ".tmp.", 5);
    n += 5;
    n += mp_fmt_u64(out + n, (uint64_t)syscall(SYS_getpid));
    out[n++] = '.';
    n += mp_fmt_u64(out + n, (uint64_t)mp_monotonic_ns());
  }
  out[n] = 0;
  return true;
}

static bool same_id(const uint8_t* a, uint8_t a_len, const identity_t* b) { return a_len == b->id_len && memcmp(a, b->id, a_len) == 0; }

/* ---- reading, where profiling starts --------------------------------------------------------- */
typedef struct load_s {
  objects_t objects;
  char path[MI_PROF_DUMP_PATH_MAX + 128];
  file_header_t header;
  entry_t entry[MP_UNWIND_SLOTS];
} load_t;

_Static_assert(offsetof(load_t, entry) == offsetof(load_t, header) + sizeof(file_header_t), "a file is read whole into header and entries");

static void load_object(load_t* l, const identity_t* o) {
  if (!file_name(o, l->path, sizeof(l->path), false)) return;
  /* never waits (a FIFO in its place), and reads only a regular file of the user's */
  int fd = mp_open_nocancel(l->path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    mp_close_nocancel(fd);
    return;
  }
  size_t want = sizeof(l->header) + sizeof(l->entry), got = 0;
  uint8_t* at = (uint8_t*)&l->header;
  for (ssize_t n; got < want && (n = mp_read_nocancel(fd, at + got, want - got)) > 0;) got += (size_t)n;
  char more;
  bool longer = got == want && mp_read_nocancel(fd, &more, 1) > 0;
  mp_close_nocancel(fd);
  const file_header_t* h = &l->header;
  if (longer || got < sizeof(*h) || memcmp(h->magic, "mpprules", 8) != 0 || h->version != RULES_VERSION || h->count > MP_UNWIND_SLOTS ||
      got != sizeof(*h) + (size_t)h->count * sizeof(entry_t) || !same_id(h->library, h->library_len, &self) ||
      !same_id(h->object, h->object_len, o) || checksum(l->entry, h->count) != h->checksum)
    return;
  for (uint32_t i = 0; i < h->count; i++) /* all or nothing: one entry out of place and the file is not this object's */
    if (l->entry[i].offset < o->lo || l->entry[i].offset >= o->hi || !mp_unwind_rule_valid(l->entry[i].rule)) return;
  for (uint32_t i = 0; i < h->count; i++) mp_unwind_remember(o->bias + l->entry[i].offset, l->entry[i].rule);
}

void mp_rules_load(void) {
  if (mp_env.unwind_cache[0] == 0) return;
  int saved = errno;
  load_t* l = mp_os_alloc_transient(sizeof(*l));
  if (l != NULL) {
    dl_iterate_phdr(collect, &l->objects); /* the caller holds the lifecycle lock: no fork meanwhile (process.c) */
    subs_at_load = l->objects.subs;
    at_start = l->objects;
    if (self.id_len != 0)
      for (unsigned i = 0; i < l->objects.n; i++) load_object(l, &l->objects.object[i]);
    mp_os_free(l, sizeof(*l));
  }
  uint64_t given, calls; /* after the load: a debug build's check of each rule parses it */
  mp_unwind_counts(&parsed_at_load, &given, &calls);
  errno = saved;
}

/* ---- writing, at exit ------------------------------------------------------------------------ */
typedef struct save_s {
  char path[MI_PROF_DUMP_PATH_MAX + 128], tmp[MI_PROF_DUMP_PATH_MAX + 128];
  objects_t objects;
  struct {
    uintptr_t pc;
    uint64_t rule;
    unsigned object;
  } rule[MP_UNWIND_SLOTS];
  unsigned rules;
  file_header_t header;
  entry_t entry[MP_UNWIND_SLOTS];
} save_t;

static unsigned object_index(const objects_t* all, uintptr_t pc) {
  for (unsigned i = 0; i < all->n; i++) {
    const identity_t* o = &all->object[i];
    if (pc >= o->bias + o->lo && pc < o->bias + o->hi) return i;
  }
  return OBJECTS_KEPT;
}

static void write_object(save_t* s, unsigned k) {
  const identity_t* o = &s->objects.object[k];
  uint32_t n = 0;
  for (unsigned i = 0; i < s->rules; i++)
    if (s->rule[i].object == k) s->entry[n++] = (entry_t){s->rule[i].pc - o->bias, s->rule[i].rule};
  if (n == 0 || !file_name(o, s->path, sizeof(s->path), false) || !file_name(o, s->tmp, sizeof(s->tmp), true)) return;
  file_header_t* h = &s->header;
  memset(h, 0, sizeof(*h));
  memcpy(h->magic, "mpprules", 8);
  h->version = RULES_VERSION;
  h->count = n;
  h->checksum = checksum(s->entry, n);
  memcpy(h->library, self.id, self.id_len);
  h->library_len = self.id_len;
  memcpy(h->object, o->id, o->id_len);
  h->object_len = o->id_len;
  int fd = mp_open_nocancel(s->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  size_t len = (size_t)n * sizeof(entry_t);
  bool ok = mp_write_nocancel(fd, h, sizeof(*h)) == (ssize_t)sizeof(*h) && mp_write_nocancel(fd, s->entry, len) == (ssize_t)len;
  mp_close_nocancel(fd);
  if (!ok || syscall(SYS_renameat, AT_FDCWD, s->tmp, AT_FDCWD, s->path) != 0) (void)syscall(SYS_unlinkat, AT_FDCWD, s->tmp, 0);
}

void mp_rules_save(void) {
  if (mp_env.unwind_cache[0] == 0 || self.id_len == 0 || forgotten) return;
  uint64_t parsed, given, calls;
  mp_unwind_counts(&parsed, &given, &calls);
  if (parsed == parsed_at_load) return; /* every rule came from the files (or none was needed): a short process's exit writes nothing */
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_FP_ONLY")) return; /* the unwind test's control: its rules are not the tables' */
#endif
  int cancel = mp_cancel_off();
  int saved = errno;
  save_t* s = mp_os_alloc_transient(sizeof(*s));
  if (s != NULL) {
    mp_lock(&mp_loader_lock); /* no fork while dl_iterate_phdr holds the loader's lock (proto.c) */
    dl_iterate_phdr(collect, &s->objects); /* for the loader's count of unloads */
    mp_unlock(&mp_loader_lock);
    bool unloaded = s->objects.subs != subs_at_load;
    s->objects = at_start;
    if (!unloaded) {
      for (unsigned i = 0; i < MP_UNWIND_SLOTS; i++) {
        uintptr_t pc;
        uint64_t rule;
        if (!mp_unwind_slot(i, &pc, &rule)) continue;
        unsigned k = object_index(&s->objects, pc);
        if (k == OBJECTS_KEPT) continue;
        s->rule[s->rules].pc = pc;
        s->rule[s->rules].rule = rule;
        s->rule[s->rules].object = k;
        s->rules++;
      }
      sigset_t before; /* a file larger than RLIMIT_FSIZE allows fails with EFBIG, not SIGXFSZ's death */
      mp_sigxfsz_block(&before);
      (void)syscall(SYS_mkdirat, AT_FDCWD, mp_env.unwind_cache, 0700); /* one level; EEXIST is fine */
      for (unsigned k = 0; k < s->objects.n; k++) write_object(s, k);
      mp_sigxfsz_restore(&before);
    }
    mp_os_free(s, sizeof(*s));
  }
  errno = saved;
  mp_cancel_restore(cancel);
}

void mp_rules_forget(void) { forgotten = true; }

/* A fork child starts with its parent's count of rules parsed: only what it parses itself is
 * new (a pre-forking server's workers, a script's forks, write nothing unless they learned). */
void mp_rules_child_reinit(void) {
  uint64_t given, calls;
  mp_unwind_counts(&parsed_at_load, &given, &calls);
}

#else /* !MP_UNWIND_CFI: no rules to keep */
void mp_rules_load(void) {}
void mp_rules_save(void) {}
void mp_rules_forget(void) {}
void mp_rules_child_reinit(void) {}
#endif
