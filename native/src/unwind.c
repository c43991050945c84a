/* Unwind rules from the loaded objects' DWARF call-frame information (.eh_frame), one per
 * code address, cached.
 *
 * A rule says how to find a frame's caller from the frame's own stack pointer and frame
 * pointer, at one code address: the canonical frame address (CFA) is rsp or rbp plus an
 * offset, the return address is stored at CFA - 8, and rbp was either left alone or saved at
 * CFA + fp_off. That covers what compilers emit for x86-64 code, with or without frame
 * pointers. Anything else (DWARF expressions, a CFA in another register, the return address
 * elsewhere) is reported as MP_RULE_FP, and so is code that no object describes (V8's JIT
 * code and its embedded builtins, which keep frame pointers): the caller takes those steps
 * by the frame-pointer chain. MP_RULE_END is the outermost frame (the return address is
 * undefined: _start, the thread start in clone), where a stack is complete. Two more forms
 * have rules of their own: MP_RULE_SIGNAL, the kernel's signal frame (an FDE of a CIE with
 * the 'S' augmentation: glibc's __restore_rt), whose ucontext holds the interrupted
 * registers; and MP_RULE_DRAP, a frame that realigns its stack (CFA = *(rbp + off), rbp saved
 * at rbp + k), which GCC writes as DWARF expressions.
 *
 * Rules come from _dl_find_object (glibc >= 2.35: lock-free, allocation-free, safe in
 * malloc), the object's .eh_frame_hdr search table and a small CFA interpreter; each result
 * is kept in a direct-mapped cache that readers consult without a lock, so a warm step costs
 * a hash and three loads. Only a miss parses.
 *
 * Invariants:
 *  - nothing here allocates, takes a profiler lock or enters the loader's locks;
 *  - the data parsed is the objects' own mapped .eh_frame; every read stays inside the FDE
 *    or CIE whose length it has read, and a malformed entry yields MP_RULE_FP;
 *  - a cache slot is written only by the thread that holds `writer` (others skip caching),
 *    and readers validate a slot by its sequence count, read before and after the slot;
 *  - a cached rule is never invalidated: code unloaded with dlclose and replaced by other
 *    code at the same addresses keeps the old rules (a wrong step at worst, every read
 *    still checked against the stack's bounds). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

#if MP_UNWIND_CFI

/* x86-64 DWARF register numbers */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16

/* ---- reading encoded values ------------------------------------------------------------------ */
typedef struct cursor_s {
  const uint8_t* p;
  const uint8_t* end;
  bool bad;
} cursor_t;

static uint8_t rd_u8(cursor_t* c) {
  if (c->p + 1 > c->end) {
    c->bad = true;
    return 0;
  }
  return *c->p++;
}

static uint64_t rd_fixed(cursor_t* c, unsigned bytes) {
  if ((size_t)(c->end - c->p) < bytes) {
    c->bad = true;
    c->p = c->end;
    return 0;
  }
  uint64_t v = 0;
  memcpy(&v, c->p, bytes); /* little-endian */
  c->p += bytes;
  return v;
}

static uint64_t rd_uleb(cursor_t* c) {
  uint64_t v = 0;
  for (unsigned shift = 0; shift < 64; shift += 7) {
    uint8_t b = rd_u8(c);
    v |= (uint64_t)(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return v;
  }
  c->bad = true;
  return 0;
}

static int64_t rd_sleb(cursor_t* c) {
  uint64_t v = 0;
  unsigned shift = 0;
  uint8_t b;
  do {
    b = rd_u8(c);
    v |= (uint64_t)(b & 0x7f) << shift;
    shift += 7;
  } while ((b & 0x80) != 0 && shift < 64 && !c->bad);
  if (shift < 64 && (b & 0x40) != 0) v |= ~(uint64_t)0 << shift;
  return (int64_t)v;
}

/* DW_EH_PE_* pointer encodings */
#define PE_OMIT 0xff
#define PE_FORMAT(e) ((e)&0x0f)
#define PE_APPLY(e) ((e)&0x70)
#define PE_INDIRECT 0x80

/* Reads a pointer in encoding `enc`; `datarel` is the base for DW_EH_PE_datarel. */
static uintptr_t rd_encoded(cursor_t* c, uint8_t enc, uintptr_t datarel) {
  if (enc == PE_OMIT) return 0;
  uintptr_t here = (uintptr_t)c->p;
  uint64_t v;
  switch (PE_FORMAT(enc)) {
    case 0x00: v = rd_fixed(c, 8); break;
    case 0x01: v = rd_uleb(c); break;
    case 0x02: v = rd_fixed(c, 2); break;
    case 0x03: v = rd_fixed(c, 4); break;
    case 0x04: v = rd_fixed(c, 8); break;
    case 0x09: v = (uint64_t)rd_sleb(c); break;
    case 0x0a: v = (uint64_t)(int64_t)(int16_t)rd_fixed(c, 2); break;
    case 0x0b: v = (uint64_t)(int64_t)(int32_t)rd_fixed(c, 4); break;
    case 0x0c: v = rd_fixed(c, 8); break;
    default: c->bad = true; return 0;
  }
  switch (PE_APPLY(enc)) {
    case 0x00: break;
    case 0x10: v += here; break;    /* pcrel */
    case 0x30: v += datarel; break; /* datarel */
    default: c->bad = true; return 0; /* textrel, funcrel, aligned: not used on x86-64 */
  }
  if (enc & PE_INDIRECT) c->bad = true; /* only for personality pointers, which we skip */
  return (uintptr_t)v;
}

/* ---- the CFA interpreter ------------------------------------------------------------------- */
/* RULE_AT_RBP: saved at rbp + off (the DW_CFA_expression `DW_OP_breg6 off` of a frame that
 * realigns its stack through a dynamic realignment pointer, GCC's DRAP). */
enum { RULE_SAME = 0, RULE_OFFSET, RULE_UNDEFINED, RULE_AT_RBP, RULE_OTHER };

typedef struct cfa_state_s {
  uint64_t cfa_reg;
  int64_t cfa_off;
  bool cfa_other; /* an expression */
  bool cfa_deref; /* CFA = *(cfa_reg + cfa_off): DRAP's `DW_OP_breg6 off; DW_OP_deref` */
  uint8_t fp_rule, ra_rule;
  int64_t fp_off, ra_off;
} cfa_state_t;

typedef struct cie_s {
  uint64_t code_align;
  int64_t data_align;
  uint64_t ra_reg;
  uint8_t fde_enc;
  bool fde_aug_len; /* augmentation "z...": every FDE carries an augmentation length */
  bool signal_frame;
  const uint8_t* insns;
  const uint8_t* insns_end;
} cie_t;

static void set_reg(cfa_state_t* s, uint64_t reg, uint8_t rule, int64_t off, uint64_t ra_reg) {
  if (reg == REG_RBP) {
    s->fp_rule = rule;
    s->fp_off = off;
  } else if (reg == ra_reg) {
    s->ra_rule = rule;
    s->ra_off = off;
  }
}

#define REMEMBER_MAX 8
#define INSNS_MAX 4096 /* a bound on the work of one interpretation */

/* Runs the instructions in [p, end) from location `loc` up to and including `target`.
 * `initial` is the CIE's state (for DW_CFA_restore), NULL while running the CIE. */
static bool run_cfa(cfa_state_t* s, const cie_t* cie, const cfa_state_t* initial, const uint8_t* p,
                    const uint8_t* end, uintptr_t loc, uintptr_t target) {
  cursor_t c = {p, end, false};
  cfa_state_t saved[REMEMBER_MAX];
  unsigned depth = 0;
  for (unsigned steps = 0; c.p < c.end && !c.bad; steps++) {
    if (steps > INSNS_MAX) return false;
    uint8_t op = rd_u8(&c);
    uint8_t low = op & 0x3f;
    uint64_t reg, delta = 0;
    switch (op >> 6) {
      case 1: /* DW_CFA_advance_loc */
        delta = low;
        goto advance;
      case 2: /* DW_CFA_offset */
        set_reg(s, low, RULE_OFFSET, (int64_t)rd_uleb(&c) * cie->data_align, cie->ra_reg);
        continue;
      case 3: /* DW_CFA_restore */
        if (initial != NULL) set_reg(s, low, low == REG_RBP ? initial->fp_rule : initial->ra_rule,
                                     low == REG_RBP ? initial->fp_off : initial->ra_off, cie->ra_reg);
        continue;
      default:
        break;
    }
    switch (op) {
      case 0x00: continue; /* nop */
      case 0x01: return false; /* set_loc: not emitted for x86-64 */
      case 0x02: delta = rd_fixed(&c, 1); goto advance;
      case 0x03: delta = rd_fixed(&c, 2); goto advance;
      case 0x04: delta = rd_fixed(&c, 4); goto advance;
      case 0x05: /* offset_extended */
        reg = rd_uleb(&c);
        set_reg(s, reg, RULE_OFFSET, (int64_t)rd_uleb(&c) * cie->data_align, cie->ra_reg);
        continue;
      case 0x06: /* restore_extended */
        reg = rd_uleb(&c);
        if (initial != NULL) set_reg(s, reg, reg == REG_RBP ? initial->fp_rule : initial->ra_rule,
                                     reg == REG_RBP ? initial->fp_off : initial->ra_off, cie->ra_reg);
        continue;
      case 0x07: set_reg(s, rd_uleb(&c), RULE_UNDEFINED, 0, cie->ra_reg); continue; /* undefined */
      case 0x08: set_reg(s, rd_uleb(&c), RULE_SAME, 0, cie->ra_reg); continue;      /* same_value */
      case 0x09: /* register: reg saved in another register */
        reg = rd_uleb(&c);
        (void)rd_uleb(&c);
        set_reg(s, reg, RULE_OTHER, 0, cie->ra_reg);
        continue;
      case 0x0a: /* remember_state */
        if (depth == REMEMBER_MAX) return false;
        saved[depth++] = *s;
        continue;
      case 0x0b: /* restore_state */
        if (depth == 0) return false;
        *s = saved[--depth];
        continue;
      case 0x0c: /* def_cfa */
        s->cfa_reg = rd_uleb(&c);
        s->cfa_off = (int64_t)rd_uleb(&c);
        s->cfa_other = s->cfa_deref = false;
        continue;
      case 0x0d: s->cfa_reg = rd_uleb(&c); s->cfa_other = s->cfa_deref = false; continue; /* def_cfa_register */
      case 0x0e: s->cfa_off = (int64_t)rd_uleb(&c); continue;               /* def_cfa_offset */
      case 0x0f: { /* def_cfa_expression */
        uint64_t len = rd_uleb(&c);
        if (len > (uint64_t)(c.end - c.p)) return false;
        cursor_t e = {c.p, c.p + len, false};
        c.p += len;
        int64_t off = 0;
        s->cfa_deref = rd_u8(&e) == 0x76 /* DW_OP_breg6 */ && (off = rd_sleb(&e), rd_u8(&e) == 0x06) /* DW_OP_deref */ &&
                       !e.bad && e.p == e.end;
        s->cfa_other = !s->cfa_deref;
        if (s->cfa_deref) {
          s->cfa_reg = REG_RBP;
          s->cfa_off = off;
        }
        continue;
      }
      case 0x10: { /* expression */
        reg = rd_uleb(&c);
        uint64_t len = rd_uleb(&c);
        if (len > (uint64_t)(c.end - c.p)) return false;
        cursor_t e = {c.p, c.p + len, false};
        c.p += len;
        int64_t off = 0;
        bool at_rbp = rd_u8(&e) == 0x76 && (off = rd_sleb(&e), !e.bad) && e.p == e.end;
        set_reg(s, reg, at_rbp ? RULE_AT_RBP : RULE_OTHER, off, cie->ra_reg);
        continue;
      }
      case 0x16: { /* val_expression */
        reg = rd_uleb(&c);
        uint64_t len = rd_uleb(&c);
        if (len > (uint64_t)(c.end - c.p)) return false;
        c.p += len;
        set_reg(s, reg, RULE_OTHER, 0, cie->ra_reg);
        continue;
      }
      case 0x11: /* offset_extended_sf */
        reg = rd_uleb(&c);
        set_reg(s, reg, RULE_OFFSET, rd_sleb(&c) * cie->data_align, cie->ra_reg);
        continue;
      case 0x12: /* def_cfa_sf */
        s->cfa_reg = rd_uleb(&c);
        s->cfa_off = rd_sleb(&c) * cie->data_align;
        s->cfa_other = s->cfa_deref = false;
        continue;
      case 0x13: s->cfa_off = rd_sleb(&c) * cie->data_align; continue; /* def_cfa_offset_sf */
      case 0x14:                                                         /* val_offset */
        reg = rd_uleb(&c);
        (void)rd_uleb(&c);
        set_reg(s, reg, RULE_OTHER, 0, cie->ra_reg);
        continue;
      case 0x15: /* val_offset_sf */
        reg = rd_uleb(&c);
        (void)rd_sleb(&c);
        set_reg(s, reg, RULE_OTHER, 0, cie->ra_reg);
        continue;
      case 0x2e: (void)rd_uleb(&c); continue; /* GNU_args_size */
      case 0x2f: /* GNU_negative_offset_extended */
        reg = rd_uleb(&c);
        set_reg(s, reg, RULE_OFFSET, -(int64_t)rd_uleb(&c) * cie->data_align, cie->ra_reg);
        continue;
      default: return false;
    }
  advance:
    loc += delta * cie->code_align;
    if (loc > target) return !c.bad;
  }
  return !c.bad;
}

/* ---- CIE and FDE ------------------------------------------------------------------------------ */
/* Reads an entry's length; false for the 64-bit form, a terminator or an implausible size. */
static bool entry_bounds(const uint8_t* at, const uint8_t** body, const uint8_t** end) {
  uint32_t len;
  memcpy(&len, at, 4);
  if (len == 0 || len == 0xffffffffu || len > (1u << 24)) return false;
  *body = at + 4;
  *end = at + 4 + len;
  return true;
}

static bool parse_cie(const uint8_t* at, cie_t* cie) {
  const uint8_t *body, *end;
  if (!entry_bounds(at, &body, &end)) return false;
  cursor_t c = {body, end, false};
  if (rd_fixed(&c, 4) != 0) return false; /* CIE id */
  uint8_t version = rd_u8(&c);
  if (version != 1 && version != 3) return false;
  const char* aug = (const char*)c.p;
  size_t aug_len = strnlen(aug, (size_t)(c.end - c.p));
  if (aug_len == (size_t)(c.end - c.p)) return false;
  c.p += aug_len + 1;
  cie->code_align = rd_uleb(&c);
  cie->data_align = rd_sleb(&c);
  cie->ra_reg = version == 1 ? rd_u8(&c) : rd_uleb(&c);
  cie->fde_enc = 0;
  cie->signal_frame = false;
  cie->fde_aug_len = aug[0] == 'z';
  if (aug[0] == 'z') {
    uint64_t len = rd_uleb(&c);
    if (c.bad || len > (uint64_t)(c.end - c.p)) return false;
    cursor_t a = {c.p, c.p + len, false};
    for (size_t i = 1; i < aug_len; i++) {
      switch (aug[i]) {
        case 'R': cie->fde_enc = rd_u8(&a); break;
        case 'L': (void)rd_u8(&a); break;
        case 'P': {
          uint8_t enc = rd_u8(&a);
          (void)rd_encoded(&a, enc & 0x7f, 0); /* personality: skipped */
          a.bad = false;
          break;
        }
        case 'S': cie->signal_frame = true; break;
        default: i = aug_len; break; /* unknown: the length lets us skip the rest */
      }
    }
    c.p += len;
  } else if (aug[0] != '\0') {
    return false;
  }
  if (c.bad || cie->code_align == 0) return false;
  cie->insns = c.p;
  cie->insns_end = end;
  return true;
}

/* The rule at `pc` from the FDE at `fde`, or false if it does not cover pc or is unusable. */
static bool rule_from_fde(const uint8_t* fde, uintptr_t pc, uintptr_t datarel, mp_unwind_rule_t* out) {
  const uint8_t *body, *end;
  if (!entry_bounds(fde, &body, &end)) return false;
  cursor_t c = {body, end, false};
  uint32_t cie_ptr = (uint32_t)rd_fixed(&c, 4);
  if (cie_ptr == 0) return false; /* a CIE, not an FDE */
  cie_t cie;
  if (!parse_cie(body - cie_ptr, &cie)) return false;
  uintptr_t begin = rd_encoded(&c, cie.fde_enc, datarel);
  uintptr_t range = rd_encoded(&c, cie.fde_enc & 0x0f, datarel);
  if (c.bad || pc < begin || pc - begin >= range) return false;
  if (cie.signal_frame) { /* the kernel's signal frame: the interrupted registers are in it */
    out->kind = MP_RULE_SIGNAL;
    return true;
  }
  if (cie.fde_aug_len) { /* the LSDA pointer, if any: skipped */
    uint64_t len = rd_uleb(&c);
    if (c.bad || len > (uint64_t)(c.end - c.p)) return false;
    c.p += len;
  }
  cfa_state_t init = {.cfa_reg = REG_RSP, .cfa_off = 8, .fp_rule = RULE_SAME, .ra_rule = RULE_SAME};
  if (!run_cfa(&init, &cie, NULL, cie.insns, cie.insns_end, 0, 0)) return false;
  cfa_state_t s = init;
  if (!run_cfa(&s, &cie, &init, c.p, c.end, begin, pc)) return false;

  if (s.ra_rule == RULE_UNDEFINED) {
    out->kind = MP_RULE_END;
    return true;
  }
  if (s.cfa_deref) { /* DRAP: CFA = *(rbp + off), rbp restored from rbp + k */
    if (s.ra_rule != RULE_OFFSET || s.ra_off != -8 || s.fp_rule != RULE_AT_RBP) return false;
    if (s.cfa_off < INT32_MIN || s.cfa_off > INT32_MAX || s.fp_off < INT16_MIN || s.fp_off > INT16_MAX) return false;
    if ((s.cfa_off & 7) != 0 || (s.fp_off & 7) != 0) return false;
    out->kind = MP_RULE_DRAP;
    out->cfa_rbp = true;
    out->cfa_off = (int32_t)s.cfa_off;
    out->fp_off = (int16_t)s.fp_off;
    return true;
  }
  if (s.cfa_other || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) || s.ra_rule != RULE_OFFSET || s.ra_off != -8)
    return false;
  if (s.cfa_off <= 0 || s.cfa_off > INT32_MAX) return false;
  if (s.fp_rule == RULE_OFFSET) {
    if (s.fp_off >= 0 || s.fp_off < INT16_MIN || (s.fp_off & 7) != 0) return false;
    out->fp_off = (int16_t)s.fp_off;
  } else if (s.fp_rule == RULE_SAME || s.fp_rule == RULE_UNDEFINED) {
    out->fp_off = 0;
  } else {
    return false;
  }
  out->kind = MP_RULE_CFI;
  out->cfa_rbp = s.cfa_reg == REG_RBP;
  out->cfa_off = (int32_t)s.cfa_off;
  return true;
}

/* The FDE covering pc through the object's .eh_frame_hdr binary-search table. */
static const uint8_t* find_fde(const uint8_t* hdr, uintptr_t pc) {
  if (hdr == NULL || hdr[0] != 1) return NULL;
  uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
  if (table_enc != 0x3b) return NULL; /* datarel | sdata4: what every linker writes */
  cursor_t c = {hdr + 4, hdr + 4 + 32, false};
  (void)rd_encoded(&c, ptr_enc, (uintptr_t)hdr);
  uint64_t count = rd_encoded(&c, count_enc, (uintptr_t)hdr);
  if (c.bad || count == 0 || count > (1u << 28)) return NULL;
  const int32_t* table = (const int32_t*)(const void*)c.p;
  intptr_t rel = (intptr_t)(pc - (uintptr_t)hdr);
  size_t lo = 0, hi = count;
  if (rel < table[0]) return NULL;
  while (hi - lo > 1) { /* the last entry whose start <= pc */
    size_t mid = lo + (hi - lo) / 2;
    if (table[2 * mid] <= rel) lo = mid;
    else hi = mid;
  }
  return hdr + table[2 * lo + 1];
}

static void lookup_uncached(uintptr_t pc, mp_unwind_rule_t* out) {
  struct dl_find_object info;
  out->kind = MP_RULE_FP;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->fp_off = 0;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_FP_ONLY")) return; /* the unwind test's control: frame pointers only */
#endif
  if (_dl_find_object((void*)pc, &info) != 0) return; /* JIT code or no object */
  const uint8_t* hdr = info.dlfo_eh_frame;
  const uint8_t* fde = find_fde(hdr, pc);
  mp_unwind_rule_t r;
  if (fde != NULL && rule_from_fde(fde, pc, (uintptr_t)hdr, &r)) *out = r;
}

/* ---- the cache ---------------------------------------------------------------------------------- */
#define CACHE_SLOTS 8192u /* 192 KiB of zero pages until used */

/* A slot is valid for a reader when its sequence is even and the same before and after the
 * reader read pc and rule: a writer makes it odd, writes both, then makes it even again, so
 * a reader never pairs one address with another's rule, however the writes interleave. */
typedef struct slot_s {
  atomic_uint seq;
  _Atomic uintptr_t pc; /* 0: empty (no code address is below 4096) */
  _Atomic uint64_t rule;
} slot_t;

static slot_t cache[CACHE_SLOTS];
static atomic_flag writer = ATOMIC_FLAG_INIT;

static inline size_t slot_of(uintptr_t pc) { return (size_t)((pc * 0x9E3779B97F4A7C15ull) >> 51) & (CACHE_SLOTS - 1); }

static inline uint64_t pack(const mp_unwind_rule_t* r) {
  uint64_t v;
  memcpy(&v, r, sizeof(v));
  return v;
}

void mp_unwind_rule(uintptr_t pc, mp_unwind_rule_t* out) {
  slot_t* s = &cache[slot_of(pc)];
  unsigned seq = atomic_load_explicit(&s->seq, memory_order_acquire);
  if ((seq & 1) == 0 && atomic_load_explicit(&s->pc, memory_order_relaxed) == pc) {
    uint64_t v = atomic_load_explicit(&s->rule, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->seq, memory_order_relaxed) == seq) {
      memcpy(out, &v, sizeof(v));
      return;
    }
  }
  lookup_uncached(pc, out);
  if (atomic_flag_test_and_set_explicit(&writer, memory_order_acquire)) return; /* someone else writes */
  unsigned w = atomic_load_explicit(&s->seq, memory_order_relaxed) & ~1u; /* writers take turns (a fork child may inherit an odd one) */
  atomic_store_explicit(&s->seq, w + 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->pc, pc, memory_order_relaxed);
  atomic_store_explicit(&s->rule, pack(out), memory_order_relaxed);
  atomic_store_explicit(&s->seq, w + 2, memory_order_release);
  atomic_flag_clear_explicit(&writer, memory_order_release);
}


void mp_unwind_child_reinit(void) { atomic_flag_clear(&writer); }

/* The cache's pages are made writable before the first lookup: a lookup reads its slot
 * before a miss writes it, and a read of a never-touched page maps the shared zero page,
 * whose replacement at the write flushes the TLB of every CPU that runs the process (see
 * mp_os_alloc). 192 KiB, which the distinct return addresses of one Node process touch
 * nearly all of anyway. */
void mp_unwind_init(void) {
  uintptr_t lo = ((uintptr_t)&cache[0] + 4095) & ~(uintptr_t)4095, hi = (uintptr_t)&cache[CACHE_SLOTS] & ~(uintptr_t)4095;
  if (hi <= lo) return;
#ifdef MADV_POPULATE_WRITE
  if (madvise((void*)lo, hi - lo, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (uintptr_t a = lo; a < hi; a += 4096) { /* before Linux 5.14: a write per page */
    slot_t* s = (slot_t*)(a + (sizeof(slot_t) - a % sizeof(slot_t)) % sizeof(slot_t));
    atomic_fetch_add_explicit(&s->seq, 0, memory_order_relaxed); /* a write that changes nothing */
  }
}

/* A slot may straddle two cache lines: both are asked for. */
void mp_unwind_prefetch(uintptr_t pc) {
  const char* s = (const char*)&cache[slot_of(pc)];
  __builtin_prefetch(s);
  __builtin_prefetch(s + sizeof(slot_t) - 1);
}

#else /* !MP_UNWIND_CFI */

void mp_unwind_rule(uintptr_t pc, mp_unwind_rule_t* out) {
  (void)pc;
  out->kind = MP_RULE_FP;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->fp_off = 0;
}
void mp_unwind_child_reinit(void) {}
void mp_unwind_init(void) {}
void mp_unwind_prefetch(uintptr_t pc) { (void)pc; }

#endif
