/* Direct binding: while profiling, the program's PLT slots for the hot allocation names point
 * straight at the watching entry points, which saves the dispatch jump of the exported names
 * (interpose.c) on every call. Stopped, the slots are given back their exported targets, so an
 * armed-but-stopped library stays one indirect jump.
 *
 * Invariants:
 *  - a slot is rewritten only from a value that already means this library: the exported
 *    function (the dynamic linker bound it so), or, for the executable alone, its own lazy PLT
 *    stub when the global lookup of the name gives this library's function (the binding the
 *    stub would make). Any other value (another allocator, a DEEPBIND or dlmopen'd object's
 *    own malloc, an earlier preload) is left alone. Unbinding rewrites only the watching
 *    values back. So a slot only ever holds one of two equivalent functions, and a caller that
 *    read it before a rewrite calls either: the watching versions are correct while stopped
 *    (their slow paths find the profiler off) and the exported ones while profiling;
 *  - only JUMP_SLOT relocations are touched. A GLOB_DAT slot is also the value of `&malloc` in
 *    its object, whose identity must not change;
 *  - the objects are walked anew under dl_iterate_phdr's lock on every switch, never from a
 *    list kept across calls: an object unloaded by dlclose is never written to;
 *  - a slot in a RELRO page is written between two mprotect calls (read-write, then read-only
 *    again, as the dynamic linker left it); if mprotect fails the slot keeps its value;
 *  - callers hold mp_api_lock, or run in the load constructor: switches never overlap. Never
 *    from a signal handler (dl_iterate_phdr takes the loader's lock).
 * mp_bind_object rewrites one name's slot in one object by the same rules: the anchors of V8's
 * sampler (jsanchor.c) put a third equivalent entry point into the slots of operator new and
 * sized delete of the object that holds SampleObject, which the switches then leave alone.
 * Objects loaded or lazily bound after a switch keep the exported targets until the next one:
 * slower by the dispatch jump, never wrong. MIMALLOC_PROF_DIRECT=0 turns the whole of it off. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

#if defined(__x86_64__)
#define MP_JUMP_SLOT R_X86_64_JUMP_SLOT
#elif defined(__aarch64__)
#define MP_JUMP_SLOT R_AARCH64_JUMP_SLOT
#endif

#if defined(MP_JUMP_SLOT) && defined(__GLIBC__) && !defined(MP_SANITIZE) && UINTPTR_MAX > 0xffffffffu

_Static_assert(MP_DIRECT_MAX <= 32, "a name is a bit of a 32-bit mask");

typedef struct bind_walk_s {
  const mp_direct_t* names;
  size_t count;
  /* The names whose first three bytes hash to each bucket: most of an object's PLT names
   * (node's thousands) meet no name here, without a strcmp. */
  uint32_t by_prefix[256];
  const void* const* global; /* dlsym(RTLD_DEFAULT, name) of each name, looked up beforehand */
  bool watching;
  uintptr_t self; /* this library's load address: its own slots are left alone */
  size_t rewritten;
} bind_walk_t;

static unsigned prefix_bucket(const char* name) {
  unsigned h = (unsigned char)name[0];
  if (name[0] != 0 && name[1] != 0) h = h * 31u + (unsigned char)name[1] * 7u + (unsigned char)name[2];
  return h & 255u;
}

static ptrdiff_t find_name(const bind_walk_t* w, const char* name) {
  for (uint32_t m = w->by_prefix[prefix_bucket(name)]; m != 0; m &= m - 1) {
    unsigned i = (unsigned)__builtin_ctz(m);
    if (strcmp(w->names[i].name, name) == 0) return (ptrdiff_t)i;
  }
  return -1;
}

/* A dynamic entry's address: glibc relocates most of them in place, other loaders do not. */
static uintptr_t dyn_ptr(ElfW(Addr) value, uintptr_t base) {
  return value < base ? (uintptr_t)value + base : (uintptr_t)value;
}

static bool in_segments(const struct dl_phdr_info* info, uintptr_t a) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (a >= lo && a - lo < ph->p_memsz) return true;
  }
  return false;
}

static bool write_slot(uintptr_t* slot, uintptr_t value, uintptr_t relro_lo, uintptr_t relro_hi) {
  bool protect = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void* at = (void*)((uintptr_t)slot & ~(uintptr_t)(page - 1));
  if (protect && mprotect(at, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, value, __ATOMIC_RELAXED);
  if (protect) mprotect(at, page, PROT_READ);
  return true;
}

/* An object's PLT relocations, as its dynamic section gives them, and its RELRO pages. */
typedef struct plt_s {
  uintptr_t base;
  const ElfW(Rela)* rel;
  size_t count;
  const ElfW(Sym)* syms;
  const char* strtab;
  uintptr_t relro_lo, relro_hi;
  bool executable;
} plt_t;

static bool plt_of(const struct dl_phdr_info* info, plt_t* p) {
  uintptr_t base = info->dlpi_addr;
  const ElfW(Dyn)* dyn = NULL;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  *p = (plt_t){.base = base};
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn)*)(base + ph->p_vaddr);
    if (ph->p_type == PT_GNU_RELRO) { /* the loader protects whole pages only */
      p->relro_lo = (base + ph->p_vaddr) & ~(uintptr_t)(page - 1);
      p->relro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)(page - 1);
    }
  }
  if (dyn == NULL) return false;
  /* The first object dl_iterate_phdr reports is the executable (empty name). */
  p->executable = info->dlpi_name == NULL || info->dlpi_name[0] == 0;
  if (!p->executable && strstr(info->dlpi_name, "linux-vdso") != NULL) return false;
  uintptr_t jmprel = 0, strtab = 0, symtab = 0;
  size_t pltrelsz = 0;
  ElfW(Sxword) pltrel = 0;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; d++) {
    switch (d->d_tag) {
      case DT_JMPREL: jmprel = dyn_ptr(d->d_un.d_ptr, base); break;
      case DT_PLTRELSZ: pltrelsz = d->d_un.d_val; break;
      case DT_PLTREL: pltrel = (ElfW(Sxword))d->d_un.d_val; break;
      case DT_STRTAB: strtab = dyn_ptr(d->d_un.d_ptr, base); break;
      case DT_SYMTAB: symtab = dyn_ptr(d->d_un.d_ptr, base); break;
      default: break;
    }
  }
  if (jmprel == 0 || strtab == 0 || symtab == 0 || pltrel != DT_RELA) return false;
  p->rel = (const ElfW(Rela)*)jmprel;
  p->count = pltrelsz / sizeof(*p->rel);
  p->syms = (const ElfW(Sym)*)symtab;
  p->strtab = (const char*)strtab;
  return true;
}

/* The name of PLT relocation i, or NULL when it is not a JUMP_SLOT. */
static const char* slot_name(const plt_t* p, size_t i) {
  if (ELF64_R_TYPE(p->rel[i].r_info) != MP_JUMP_SLOT) return NULL;
  return p->strtab + p->syms[ELF64_R_SYM(p->rel[i].r_info)].st_name;
}

static int bind_object(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  bind_walk_t* w = arg;
  plt_t p;
  if (in_segments(info, w->self) || !plt_of(info, &p)) return 0;
  bool executable = p.executable;
  uintptr_t relro_lo = p.relro_lo, relro_hi = p.relro_hi;
  for (size_t i = 0; i < p.count; i++) {
    const char* name = slot_name(&p, i);
    ptrdiff_t k = name == NULL ? -1 : find_name(w, name);
    if (k < 0) continue;
    const mp_direct_t* n = &w->names[k];
    uintptr_t* slot = (uintptr_t*)(p.base + p.rel[i].r_offset);
    uintptr_t now = __atomic_load_n(slot, __ATOMIC_RELAXED);
    uintptr_t from = (uintptr_t)(w->watching ? n->exported : n->watching);
    uintptr_t to = (uintptr_t)(w->watching ? n->watching : n->exported);
    bool ours = now == from;
    if (!ours && w->watching && executable && in_segments(info, now)) /* a lazy stub */
      ours = w->global[k] == n->exported;
    if (ours && write_slot(slot, to, relro_lo, relro_hi)) {
      mp_assert(__atomic_load_n(slot, __ATOMIC_RELAXED) == to);
      w->rewritten++;
    }
  }
  return 0;
}

size_t mp_bind_direct(const mp_direct_t* names, size_t count, bool watching) {
  if (!mp_env.direct) return 0;
  int saved = errno;
  Dl_info self;
  const void* global[MP_DIRECT_MAX];
  size_t rewritten = 0;
  mp_assert(count <= MP_DIRECT_MAX);
  /* Looked up before the walk: dlsym takes the loader's load lock, and inside
   * dl_iterate_phdr (its write lock held) that is the reverse of dlopen's order. */
  for (size_t i = 0; i < count && watching; i++) global[i] = dlsym(RTLD_DEFAULT, names[i].name);
  if (count <= MP_DIRECT_MAX && dladdr((void*)mp_bind_direct, &self) != 0) {
    bind_walk_t w = {.names = names, .count = count, .global = global, .watching = watching, .self = (uintptr_t)self.dli_fbase};
    for (size_t i = 0; i < count; i++) w.by_prefix[prefix_bucket(names[i].name)] |= 1u << i;
    dl_iterate_phdr(bind_object, &w);
    rewritten = w.rewritten;
  }
  errno = saved;
  return rewritten;
}

/* One name's slot in the one object whose segments hold `in_object`, rewritten to `to` from
 * any of `from` (the same rule as above: only from values that mean this library, and a lazy
 * stub of the executable only when the global lookup gives from[0]). */
typedef struct bind_one_s {
  uintptr_t in_object;
  const char* name;
  const void* const* from;
  size_t nfrom;
  const void* to;
  const void* global;
  uintptr_t self;
  size_t rewritten;
} bind_one_t;

static int bind_one_object(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  bind_one_t* w = arg;
  if (!in_segments(info, w->in_object) || in_segments(info, w->self)) return 0;
  plt_t p;
  if (!plt_of(info, &p)) return 1;
  for (size_t i = 0; i < p.count; i++) {
    const char* name = slot_name(&p, i);
    if (name == NULL || strcmp(name, w->name) != 0) continue;
    uintptr_t* slot = (uintptr_t*)(p.base + p.rel[i].r_offset);
    uintptr_t now = __atomic_load_n(slot, __ATOMIC_RELAXED);
    bool ours = false;
    for (size_t k = 0; k < w->nfrom; k++) ours = ours || now == (uintptr_t)w->from[k];
    if (!ours && p.executable && in_segments(info, now)) ours = w->global == w->from[0]; /* a lazy stub */
    if (ours && write_slot(slot, (uintptr_t)w->to, p.relro_lo, p.relro_hi)) w->rewritten++;
  }
  return 1; /* the one object: the walk ends here */
}

size_t mp_bind_object(const void* in_object, const char* name, const void* const* from, size_t nfrom, const void* to) {
  if (!mp_env.direct || nfrom == 0) return 0;
  int saved = errno;
  Dl_info self;
  size_t rewritten = 0;
  const void* global = dlsym(RTLD_DEFAULT, name); /* before the walk: see mp_bind_direct */
  if (dladdr((void*)mp_bind_object, &self) != 0) {
    bind_one_t w = {(uintptr_t)in_object, name, from, nfrom, to, global, (uintptr_t)self.dli_fbase, 0};
    dl_iterate_phdr(bind_one_object, &w);
    rewritten = w.rewritten;
  }
  errno = saved;
  return rewritten;
}

#else

size_t mp_bind_object(const void* in_object, const char* name, const void* const* from, size_t nfrom, const void* to) {
  (void)in_object;
  (void)name;
  (void)from;
  (void)nfrom;
  (void)to;
  return 0;
}

size_t mp_bind_direct(const mp_direct_t* names, size_t count, bool watching) {
  (void)names;
  (void)count;
  (void)watching;
  return 0;
}

#endif
