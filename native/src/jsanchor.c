/* Where V8's sampling heap profiler took each of its samples: the JavaScript heap's samples
 * with the same stacks as the native ones.
 *
 * V8's sampler (src/profiler/sampling-heap-profiler.cc) records, for a sampled JavaScript
 * object, the functions of the physical frames on the stack: a function TurboFan or Maglev
 * inlined into its caller is not among them, and its objects are charged to the caller. The
 * native stacks name inlined functions (from the return addresses, V8's code log). So the
 * JavaScript heap's samples take the native stack too: V8's SamplingHeapProfiler::SampleObject
 * allocates one `Sample` (operator new of MP_ANCHOR_SIZE bytes, its first allocation there),
 * and deletes it (sized operator delete) when the object dies or sampling stops. Armed, the
 * program's PLT slots for `_Znwm` and `_ZdlPvm` in the object that holds SampleObject point at
 * two entry points (interpose.c) that, for a request of that size from SampleObject on the
 * arming thread, record the stack as a sample would (an "anchor"), keyed by the Sample's
 * address, and forget it at its delete. Every other call goes on through the dispatch table.
 *
 * An anchor holds its creation number (1, 2, ... from arming): V8 numbers its samples 1, 2,
 * ... from each start of its sampler (`sample_id`, the DevTools protocol's `ordinal`), so when
 * the arming comes right before the start on the same thread, an anchor's number is its
 * sample's ordinal. Each export also reads the Sample's `sample_id` (the word at
 * MP_ANCHOR_ID_OFFSET, through a pipe: never a fault; read_word) so that the reader can check
 * both agree before it uses any anchor (a V8 with another layout then uses none).
 *
 * Invariants:
 *  - anchors are made, forgotten and exported only on the arming thread (mp_tls.anchoring):
 *    no lock. V8 makes and deletes the samples of an isolate on that isolate's thread;
 *  - an anchor's block is live while it is in the index: its delete forgets it first;
 *  - the anchors' memory is the profiler's (mp_os_alloc), bounded by ANCHORS_MAX. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cancel.h"
#include "internal.h"

#define SAMPLE_OBJECT "_ZN2v88internal20SamplingHeapProfiler12SampleObjectEmm"
/* at most this many live anchors (1 KiB each with their 128 frames: 32 MiB): as many live
 * samples as a JavaScript heap of 16 GiB has at the default interval */
#define ANCHORS_MAX (1u << 15)
#define CHUNK_ANCHORS 64u

mp_anchor_site_t mp_anchor_site; /* len 0: not armed */

typedef struct anchor_s {
  uintptr_t addr;          /* the Sample's address; 0: on the free list */
  uint64_t seq;            /* 1, 2, ... in creation order since arming */
  uint64_t jit_map_bytes;  /* V8's perf map's size then (its entries name the JIT frames) */
  uint32_t depth;
  struct anchor_s* next;   /* the free list */
  uintptr_t frames[];      /* bt frames */
} anchor_t;

static anchor_t** index_slots; /* open addressing, linear probing, backward-shift deletion */
static size_t index_cap, live;
static anchor_t* free_list;
static uint64_t made, dropped;
static unsigned frames_max;

static inline size_t anchor_stride(void) { return (sizeof(anchor_t) + frames_max * sizeof(uintptr_t) + 15) & ~(size_t)15; }
static inline size_t slot_of(uintptr_t addr, size_t cap) { return (size_t)((addr >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1); }

static bool index_grow(void) {
  size_t cap = index_cap == 0 ? 1024 : index_cap * 2;
  anchor_t** slots = mp_os_alloc(cap * sizeof(*slots));
  if (slots == NULL) return false;
  for (size_t i = 0; i < index_cap; i++) {
    anchor_t* a = index_slots[i];
    if (a == NULL) continue;
    size_t j = slot_of(a->addr, cap);
    while (slots[j] != NULL) j = (j + 1) & (cap - 1);
    slots[j] = a;
  }
  if (index_slots != NULL) mp_os_free(index_slots, index_cap * sizeof(*index_slots));
  index_slots = slots;
  index_cap = cap;
  return true;
}

static anchor_t* anchor_take(void) {
  if (free_list == NULL) {
    size_t stride = anchor_stride();
    char* chunk = mp_os_alloc(CHUNK_ANCHORS * stride);
    if (chunk == NULL) return NULL;
    for (size_t i = CHUNK_ANCHORS; i-- > 0;) {
      anchor_t* a = (anchor_t*)(chunk + i * stride);
      a->next = free_list;
      free_list = a;
    }
  }
  anchor_t* a = free_list;
  free_list = a->next;
  return a;
}

static void anchor_give(anchor_t* a) {
  a->addr = 0;
  a->next = free_list;
  free_list = a;
}

/* Removes the anchor of addr, if any; the slots after it shift back into the gap. */
static void index_remove(uintptr_t addr) {
  if (index_cap == 0) return;
  size_t i = slot_of(addr, index_cap);
  while (index_slots[i] != NULL && index_slots[i]->addr != addr) i = (i + 1) & (index_cap - 1);
  anchor_t* gone = index_slots[i];
  if (gone == NULL) return;
  index_slots[i] = NULL;
  for (size_t j = (i + 1) & (index_cap - 1); index_slots[j] != NULL; j = (j + 1) & (index_cap - 1)) {
    size_t home = slot_of(index_slots[j]->addr, index_cap);
    /* j's entry may move into the gap at i unless its home lies cyclically in (i, j] */
    bool stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (stays) continue;
    index_slots[i] = index_slots[j];
    index_slots[j] = NULL;
    i = j;
  }
  live--;
  anchor_give(gone);
}

static bool index_insert(anchor_t* a) {
  if ((live + 1) * 2 > index_cap && !index_grow()) return false;
  size_t i = slot_of(a->addr, index_cap);
  while (index_slots[i] != NULL) {
    mp_assert(index_slots[i]->addr != a->addr); /* a live block has one anchor */
    i = (i + 1) & (index_cap - 1);
  }
  index_slots[i] = a;
  live++;
  return true;
}

mp_noinline void* mp_anchor_new_slow(size_t n, void* ra) {
  mp_thread_t* t = &mp_tls;
  caller_t c = CALLER_OF(__builtin_frame_address(0), ra);
  /* Numbered first, whatever comes of it: V8 numbered this sample before it asked, so an
   * anchor dropped below must not shift the numbers of the ones after it. */
  uint64_t seq = ++made;
  void* p = mp_entry_new(n); /* the program's request, served (and sampled) as any other */
  if (p == NULL) return p;
  int saved = errno; /* the request succeeded: the bookkeeping's system calls are not its */
  /* A block of the size whose anchor was not forgotten (its delete came another way) is no
   * Sample any more: its anchor goes. */
  index_remove((uintptr_t)p);
  anchor_t* a = live < ANCHORS_MAX && !t->in_profiler ? anchor_take() : NULL;
  if (a != NULL) {
    a->addr = (uintptr_t)p;
    a->seq = seq;
    a->depth = mp_sample_capture(a->frames, frames_max, &c, 0);
    a->jit_map_bytes = mp_jit_map_bytes();
    if (!index_insert(a)) {
      anchor_give(a);
      a = NULL;
    }
  }
  if (a == NULL) dropped++;
  errno = saved;
  return p;
}

void mp_anchor_forget(void* p) {
  if (p != NULL) index_remove((uintptr_t)p);
}

/* ---- where SampleObject is ---------------------------------------------------------------- */
typedef struct find_s {
  uintptr_t lo, len;
} find_t;

#if defined(__GLIBC__) /* dladdr1 and _r_debug; the PLT binding is glibc's only too (bind.c) */

/* The executable's own symbol table (not loaded: read from its file), for a V8 that does not
 * export SampleObject (Node 24 and later). */
static bool symtab_lookup(const char* path, uintptr_t base, find_t* out) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool found = false;
  if (fstat(fd, &st) == 0 && (size_t)st.st_size >= sizeof(ElfW(Ehdr))) {
    size_t size = (size_t)st.st_size;
    const unsigned char* file = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (file != MAP_FAILED) {
      const ElfW(Ehdr)* eh = (const ElfW(Ehdr)*)file;
      bool sane = memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_shentsize == sizeof(ElfW(Shdr)) &&
                  eh->e_shoff < size && eh->e_shnum <= (size - eh->e_shoff) / sizeof(ElfW(Shdr));
      const ElfW(Shdr)* sh = sane ? (const ElfW(Shdr)*)(file + eh->e_shoff) : NULL;
      for (unsigned i = 0; sane && i < eh->e_shnum && !found; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const ElfW(Shdr)* strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > size || sh[i].sh_size > size - sh[i].sh_offset) continue;
        if (strs->sh_offset > size || strs->sh_size > size - strs->sh_offset) continue;
        const ElfW(Sym)* syms = (const ElfW(Sym)*)(file + sh[i].sh_offset);
        const char* names = (const char*)(file + strs->sh_offset);
        size_t count = sh[i].sh_size / sizeof(ElfW(Sym)), want = sizeof(SAMPLE_OBJECT);
        for (size_t k = 0; k < count; k++) {
          const ElfW(Sym)* s = &syms[k];
          if (ELF64_ST_TYPE(s->st_info) != STT_FUNC || s->st_size == 0 || s->st_name >= strs->sh_size) continue;
          if (strs->sh_size - s->st_name < want || memcmp(names + s->st_name, SAMPLE_OBJECT, want) != 0) continue;
          out->lo = base + s->st_value;
          out->len = s->st_size;
          found = true;
          break;
        }
      }
      munmap((void*)file, size);
    }
  }
  close(fd);
  return found;
}

static bool find_site(find_t* out) {
  void* at = dlsym(RTLD_DEFAULT, SAMPLE_OBJECT);
  Dl_info info;
  const ElfW(Sym)* sym = NULL;
  if (at != NULL && dladdr1(at, &info, (void**)&sym, RTLD_DL_SYMENT) != 0 && sym != NULL && sym->st_size > 0) {
    out->lo = (uintptr_t)at;
    out->len = sym->st_size;
    return true;
  }
  /* not exported: the executable's symbol table (V8 is linked into node) */
  struct link_map* exe = _r_debug.r_map;
  return exe != NULL && symtab_lookup("/proc/self/exe", (uintptr_t)exe->l_addr, out);
}
#else
static bool find_site(find_t* out) {
  (void)out;
  return false;
}
#endif

/* ---- the API ---------------------------------------------------------------------------------- */
int mi_prof_js_anchor_arm(void) {
  if (mp_tls.anchoring) return 1;
  int cancel = mp_cancel_off();
  bool guard = mp_tls.in_profiler;
  mp_tls.in_profiler = true;
  int armed = 0;
  find_t site = {0, 0};
  mp_lock(&mp_api_lock);
  if (mp_anchor_site.len != 0) {
    errno = EBUSY; /* armed on another thread */
    armed = -1;
  } else if (find_site(&site)) {
    /* the deepest stack the library takes, whatever the profile's depth: V8's own stacks go
     * 128 JavaScript frames deep, and a stack cut short here loses its roots (the reader falls
     * back to V8's for a stack this deep) */
    frames_max = MI_PROF_MAX_BT;
    mp_anchor_site.lo = site.lo;
    __atomic_store_n(&mp_anchor_site.len, site.len, __ATOMIC_RELEASE);
    mp_tls.anchoring = true;
    armed = mp_bind_anchors((const void*)site.lo) ? 1 : 0;
    if (armed == 0) {
      mp_tls.anchoring = false;
      __atomic_store_n(&mp_anchor_site.len, 0, __ATOMIC_RELEASE);
    }
  }
  mp_unlock(&mp_api_lock);
  mp_profiler_leave(&mp_tls, guard);
  mp_cancel_restore(cancel);
  return armed;
}

/* The word at addr, never by a fault: written from there into a pipe, which fails with EFAULT
 * where nothing readable is mapped (a stale anchor's block given back, or guarded), then read
 * back. Plain write and read: no system call a sandbox would deny that the program's own I/O
 * does not make (process_vm_readv is in systemd's @debug set, which hardened services kill). */
static bool read_word(const int pipe_fds[2], uintptr_t addr, uint64_t* out) {
  if (write(pipe_fds[1], (const void*)addr, sizeof(*out)) != (ssize_t)sizeof(*out)) return false;
  return read(pipe_fds[0], out, sizeof(*out)) == (ssize_t)sizeof(*out);
}

/* Each anchor as [seq, the Sample's sample_id (UINT64_MAX: unreadable), perf map bytes, depth,
 * frames...]. */
size_t mi_prof_js_anchors(uint64_t* out, size_t cap) {
  if (!mp_tls.anchoring) {
    errno = EPERM;
    return 0;
  }
  size_t need = 0;
  int saved = errno;
  int fds[2] = {-1, -1};
  /* close-on-exec, closed before this returns: no child ever sees them */
  bool piped = out != NULL && pipe2(fds, O_CLOEXEC) == 0;
  for (size_t i = 0; i < index_cap; i++) {
    const anchor_t* a = index_slots[i];
    if (a == NULL) continue;
    size_t words = 4 + a->depth;
    if (out != NULL && need + words <= cap) {
      uint64_t id = UINT64_MAX;
      if (!piped || !read_word(fds, a->addr + MP_ANCHOR_ID_OFFSET, &id)) id = UINT64_MAX;
      out[need] = a->seq;
      out[need + 1] = id;
      out[need + 2] = a->jit_map_bytes;
      out[need + 3] = a->depth;
      for (uint32_t k = 0; k < a->depth; k++) out[need + 4 + k] = a->frames[k];
    }
    need += words;
  }
  if (piped) {
    close(fds[0]);
    close(fds[1]);
  }
  errno = saved;
  return need;
}

void mi_prof_js_anchor_counts(uint64_t counts[3]) {
  counts[0] = made;
  counts[1] = live;
  counts[2] = dropped;
}
