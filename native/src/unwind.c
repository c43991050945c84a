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
 *  - nothing here allocates, waits for a lock or enters the loader's locks; its writers (the
 *    cache's, a CIE memo's, the pages pending, an object's setup) are profiler locks tried once
 *    (mp_lock_try), so that a program's handler that lands in one waits for its release
 *    (signals.c hold_back) and cannot leave it held by siglongjmp;
 *  - the data parsed is the objects' own .eh_frame, read through their mappings; every read
 *    stays inside the FDE or CIE whose length it has read, and a malformed entry yields
 *    MP_RULE_FP;
 *  - no file is opened and no system call made but the madvise that hands back the pages
 *    walks' misses brought in, only where they hold the file's bytes unchanged, at the end of a
 *    walk (mp_unwind_walk_end, a burst at a time: below), and the monotonic clock's read (the
 *    vDSO's, where there is one); errno is the caller's;
 *  - a cache slot is written only by the thread that holds `writer` (others skip caching),
 *    and readers validate a slot by its sequence count, read before and after the slot;
 *  - a cached rule is never invalidated: code unloaded with dlclose and replaced by other
 *    code at the same addresses keeps the old rules (a wrong step at worst, every read
 *    still checked against the stack's bounds), and a process that unloaded code keeps no
 *    rule for the next run (rulefile.c). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

#if MP_UNWIND_CFI

#undef REG_RBP /* <signal.h>'s ucontext indices (_GNU_SOURCE): the DWARF numbers below instead */
#undef REG_RSP
#if defined(__aarch64__)
/* AArch64 DWARF register numbers: x29 (the frame pointer), sp; the return address is x30 */
#define REG_RBP 29
#define REG_RSP 31
#else
/* x86-64 DWARF register numbers */
#define REG_RBP 6
#define REG_RSP 7
#endif
#define OP_BREG_FP (0x70 + REG_RBP) /* DW_OP_breg<frame pointer> */

/* ---- reading encoded values ------------------------------------------------------------------ */
typedef struct cursor_s {
  const uint8_t* p;
  const uint8_t* end;
  bool bad;
  intptr_t bias; /* p + bias is the byte's address in the object (0, or a copy read from its file) */
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
  uintptr_t here = (uintptr_t)c->p + (uintptr_t)c->bias;
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
  cursor_t c = {p, end, false, 0};
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
        cursor_t e = {c.p, c.p + len, false, 0};
        c.p += len;
        int64_t off = 0;
        s->cfa_deref = rd_u8(&e) == OP_BREG_FP && (off = rd_sleb(&e), rd_u8(&e) == 0x06) /* DW_OP_deref */ &&
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
        cursor_t e = {c.p, c.p + len, false, 0};
        c.p += len;
        int64_t off = 0;
        bool at_rbp = rd_u8(&e) == OP_BREG_FP && (off = rd_sleb(&e), !e.bad) && e.p == e.end;
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
#if defined(__aarch64__)
      case 0x2d: continue; /* AARCH64_negate_ra_state: return addresses are stripped (mp_strip_ra) */
#endif
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
/* Every entry is read through the object's own mapping (where the loader put it): no file is
 * opened, no system call made; the pages a miss brings in are handed back later (below). */
typedef struct cie_memo_s cie_memo_t;

/* A walk's record of the reads to hand back (mp_unwind_walk_t), the object's givable range. */
typedef struct object_s object_t;
static void note_read(mp_unwind_walk_t* walk, const object_t* o, uintptr_t at, size_t len);

/* The entry at address `at`: a cursor over its body (after the length); false for the 64-bit
 * form, a terminator or an implausible size. */
static bool load_entry(uintptr_t at, cursor_t* c) {
  uint32_t len;
  memcpy(&len, (const void*)at, 4);
  if (len == 0 || len == 0xffffffffu || len > (1u << 24)) return false;
  c->p = (const uint8_t*)at + 4;
  c->end = c->p + len;
  c->bias = 0;
  c->bad = false;
  return true;
}

static bool parse_cie(uintptr_t at, cie_t* cie) {
  cursor_t c;
  if (!load_entry(at, &c)) return false;
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
    cursor_t a = {c.p, c.p + len, false, c.bias};
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
  cie->insns_end = c.end;
  return true;
}

/* An object's parsed CIEs, by address, their instructions copied (a CIE sits pages away from
 * most of its FDEs: kept, its page is not read again): written by one thread at a time (a
 * try-lock; a busy one just does not keep), each slot published by its address (release),
 * never changed once published. */
#define CIES_MAX 4
#define CIE_INSNS_MAX 64
struct cie_memo_s {
  mp_lock_t writer; /* its level set with the object (object_setup) */
  struct {
    _Atomic uintptr_t at;
    cie_t cie;
    uint8_t insns[CIE_INSNS_MAX];
  } slot[CIES_MAX];
};

static bool cie_recall(cie_memo_t* m, uintptr_t at, cie_t* out) {
  for (unsigned i = 0; i < CIES_MAX; i++) {
    uintptr_t a = atomic_load_explicit(&m->slot[i].at, memory_order_acquire);
    if (a == 0) return false;
    if (a == at) {
      *out = m->slot[i].cie;
      return true;
    }
  }
  return false;
}

static void cie_keep(cie_memo_t* m, uintptr_t at, const cie_t* cie) {
  size_t len = (size_t)(cie->insns_end - cie->insns);
  if (len > CIE_INSNS_MAX || !mp_lock_try(&m->writer)) return;
  for (unsigned i = 0; i < CIES_MAX; i++) {
    uintptr_t a = atomic_load_explicit(&m->slot[i].at, memory_order_relaxed);
    if (a == at) break;
    if (a != 0) continue;
    memcpy(m->slot[i].insns, cie->insns, len);
    m->slot[i].cie = *cie;
    m->slot[i].cie.insns = m->slot[i].insns;
    m->slot[i].cie.insns_end = m->slot[i].insns + len;
    atomic_store_explicit(&m->slot[i].at, at, memory_order_release);
    break;
  }
  mp_unlock(&m->writer);
}

/* The rule at `pc` from the FDE at address `fde` of object o (NULL: one not kept): true, or
 * false if it does not cover pc or is unusable. */
static bool rule_from_fde(mp_unwind_walk_t* walk, object_t* o, cie_memo_t* cies, uintptr_t fde, uintptr_t pc,
                          uintptr_t datarel, mp_unwind_rule_t* out) {
  cursor_t c;
  if (!load_entry(fde, &c)) return false;
  note_read(walk, o, fde, (size_t)(c.end - (const uint8_t*)fde));
  uintptr_t field = (uintptr_t)c.p; /* the CIE pointer's own address */
  uint32_t cie_ptr = (uint32_t)rd_fixed(&c, 4);
  if (cie_ptr == 0) return false; /* a CIE, not an FDE */
  cie_t cie;
  if (cies == NULL || !cie_recall(cies, field - cie_ptr, &cie)) {
    if (!parse_cie(field - cie_ptr, &cie)) return false;
    note_read(walk, o, field - cie_ptr, (size_t)(cie.insns_end - (const uint8_t*)(field - cie_ptr)));
    if (cies != NULL) cie_keep(cies, field - cie_ptr, &cie);
  }
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
  if (s.cfa_deref) { /* DRAP: CFA = *(rbp + off), rbp restored from rbp + k (GCC on x86-64 only) */
#if defined(__aarch64__)
    return false;
#endif
    if (s.ra_rule != RULE_OFFSET || s.ra_off != -8 || s.fp_rule != RULE_AT_RBP) return false;
    if (s.cfa_off < INT32_MIN || s.cfa_off > INT32_MAX || s.fp_off < INT16_MIN || s.fp_off > INT16_MAX) return false;
    if ((s.cfa_off & 7) != 0 || (s.fp_off & 7) != 0) return false;
    out->kind = MP_RULE_DRAP;
    out->cfa_rbp = true;
    out->cfa_off = (int32_t)s.cfa_off;
    out->fp_off = (int16_t)s.fp_off;
    return true;
  }
#if defined(__aarch64__)
  /* x30 saved below the CFA (the frame record), or not yet saved (a function's first
   * instructions, or a leaf's: the CFA may then be sp itself) */
  if (s.cfa_other || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP)) return false;
  if (s.ra_rule == RULE_OFFSET && s.ra_off < 0 && s.ra_off >= -8 * 127 && (s.ra_off & 7) == 0) out->ra_words = (uint8_t)(-s.ra_off / 8);
  else if (s.ra_rule == RULE_SAME) out->ra_words = 0;
  else return false;
  if (s.cfa_off < 0 || s.cfa_off > INT32_MAX) return false;
#else
  if (s.cfa_other || (s.cfa_reg != REG_RSP && s.cfa_reg != REG_RBP) || s.ra_rule != RULE_OFFSET || s.ra_off != -8)
    return false;
  if (s.cfa_off <= 0 || s.cfa_off > INT32_MAX) return false;
#endif
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

/* The search table's entry count and offset from the .eh_frame_hdr at hdr; false for a form
 * this file does not read. */
static bool parse_hdr(const uint8_t* hdr, uint64_t* count, uint32_t* table_rel) {
  if (hdr[0] != 1 || hdr[3] != 0x3b) return false; /* version 1; table datarel | sdata4: what every linker writes */
  cursor_t c = {hdr + 4, hdr + 32, false, 0};
  (void)rd_encoded(&c, hdr[1], (uintptr_t)hdr); /* eh_frame_ptr */
  *count = rd_encoded(&c, hdr[2], (uintptr_t)hdr);
  *table_rel = (uint32_t)(c.p - hdr);
  return !c.bad && *count != 0 && *count <= (1u << 28);
}

/* Of the n entries `stride` int32s apart at a, sorted by value, the last one <= rel; a[0] <= rel. */
static size_t last_at_or_below(const int32_t* a, size_t stride, size_t n, intptr_t rel) {
  size_t lo = 0, hi = n;
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (a[stride * mid] <= rel) lo = mid;
    else hi = mid;
  }
  return lo;
}

/* ---- the objects: their search tables, and the pages handed back -------------------------------
 * Reading an object's tables through its mapping faults their pages into the process, and the
 * kernel maps up to 15 neighbours with each fault (fault-around): a Node process's stacks would
 * bring in nearly all of node's 3.4 MB of .eh_frame_hdr and .eh_frame, +3 MB of RSS (bench/
 * README.md). So a walk notes the 64 KiB windows its misses read (the fault-around unit), and
 * their pages go back (MADV_DONTNEED) with those of the walks around it, a burst at a time
 * (below): the process's RSS is what it was, the page cache keeps the file's pages, and the
 * next read faults them in again. That is safe only
 * for pages that hold the file's bytes unchanged, so the givable range of an object is the part
 * of its segment holding .eh_frame_hdr, from that header's page on, and only where that segment
 * is neither writable nor executable (no relocation, RELRO or debugger breakpoint ever wrote
 * to it), the object has no text relocations, and it is a file's (not the vDSO). Elsewhere the
 * pages stay, as they would for libgcc's unwinder. The only system call of a miss is that
 * madvise, one mimalloc's own allocation path makes too: no file is opened or read, no
 * descriptor held, nothing is a cancellation point or what a sandbox that denies files kills.
 * The search table is kept sparsely (every SPARSE_STEP-th entry's start) in this file's own
 * memory, built at the object's first miss, so a miss reads one block of the table, the FDE and
 * (the first time) its CIE. */
#define SPARSE_STEP 64u  /* a block of the table read per miss */
#define OBJECTS_MAX 64u
#define SPARSE_POOL 16384u /* starts, 64 KiB of bss touched as written: node takes ~1,200 */
#define WINDOW ((uintptr_t)64 * 1024) /* the kernel's default fault-around (fault_around_bytes) */

struct object_s {
  _Atomic(const uint8_t*) hdr; /* the key, stored last with release: a visible entry is complete */
  uint32_t table_rel;            /* the search table's offset from hdr */
  uint64_t count;                /* its entries; 0: no usable table */
  uintptr_t give_lo, give_hi;    /* the pages that may be handed back (page-aligned), lo == hi: none */
  const uint8_t* eh;             /* hdr, set before the first range is noted (hdr is set last) */
  cie_memo_t cies;
  const int32_t* sparse;         /* NULL: the table is searched whole */
};

static object_t objects[OBJECTS_MAX];
static atomic_uint objects_n;
/* The thread that sets an object up (its mp_tls's address), 0 when none does, and when it
 * began (CLOCK_MONOTONIC ns; 0 outside a setup). */
static _Atomic(uintptr_t) objects_writer;
/* Held by the thread that sets an object up, for as long as it is objects_writer: counted as a
 * profiler lock, so that a program's handler (which may leave by siglongjmp) waits for the
 * setup's end (signals.c hold_back); likewise every writer of this file is an mp_lock_t. Left
 * held, a writer would keep every later rule out of the cache, or objects_writer every later
 * object out of the table. */
static mp_lock_t setup_hold = MP_LOCK_INIT(MP_LEVEL_UNWIND_SETUP);
static _Atomic int64_t objects_setup_ns;
/* How long a miss waits for another thread's setup of the object it is in (a setup reads the
 * search table once: node's 600 KB, ~0.2 ms) rather than search the table whole itself. Past
 * it, or nested in its own thread's setup (a signal handler), it searches whole. The wait is
 * counted from the setup's start, so a setup that never ends makes later misses wait no more. */
#define SETUP_WAIT_NS 5000000ll
static int32_t sparse_pool[SPARSE_POOL];
static unsigned sparse_used;
static atomic_ullong rules_parsed, bytes_given; /* misses parsed, bytes handed back (test builds print them) */

static void note_read(mp_unwind_walk_t* walk, const object_t* o, uintptr_t at, size_t len) {
  if (walk == NULL || o == NULL || o->give_lo == o->give_hi || len == 0) return;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_KEEP_PAGES")) return; /* the footprint gate's control */
#endif
  uintptr_t lo = at & ~(WINDOW - 1), hi = (at + len + WINDOW - 1) & ~(WINDOW - 1);
  if (lo < o->give_lo) lo = o->give_lo;
  if (hi > o->give_hi) hi = o->give_hi;
  if (lo >= hi) return;
  for (unsigned i = 0; i < walk->n; i++) /* merged with a range of o it overlaps or touches */
    if (walk->object[i] == o && lo <= walk->hi[i] && walk->lo[i] <= hi) {
      if (lo < walk->lo[i]) walk->lo[i] = lo;
      if (hi > walk->hi[i]) walk->hi[i] = hi;
      return;
    }
  if (walk->n == MP_UNWIND_WALK_RANGES) mp_unwind_walk_end(walk);
  walk->lo[walk->n] = lo;
  walk->hi[walk->n] = hi;
  walk->object[walk->n] = o;
  walk->n++;
}

/* ---- handing the pages back, a burst at a time ------------------------------------------------
 * Every madvise flushes the TLB of every CPU that runs the process, by an interprocessor
 * interrupt each of them takes: ~20 us a call with one other thread running, in a VM, against ~2
 * us for the fault that brings a window in (bench/README.md). Misses come in bursts (a process
 * starting, a new code path) that read the same few windows (the search table's, nearby FDEs'):
 * handed back after each walk, a window is faulted in and given back again many times, and the
 * interrupts cost the program's threads more than the walks do. So the ranges a walk read stay
 * resident, noted process-wide, and go back together, one madvise per object over the span
 * they cover, at the end of the walk that brings more than PENDING_WINDOWS windows or that
 * comes PENDING_NS after the first was noted. Pages are resident on that account until the
 * end of the first sample taken PENDING_NS after they were noted, at most PENDING_WINDOWS
 * windows beyond those of the walks under way; a process that stops sampling keeps them until
 * its next sample. A walk that finds another thread noting (a try-lock) hands back its own
 * ranges at once. */
#define PENDING_WINDOWS 8u /* 512 KiB; 4: http-workers' CPU 1.037x against stopped, 8: 1.022x, 16: 1.023x (bench/README.md) */
#define PENDING_NS 20000000ll
#define PENDING_RANGES (PENDING_WINDOWS + MP_UNWIND_WALK_RANGES)

static mp_lock_t pending_lock = MP_LOCK_INIT(MP_LEVEL_UNWIND);
static struct { /* under pending_lock */
  uintptr_t lo[PENDING_RANGES], hi[PENDING_RANGES];
  const object_t* object[PENDING_RANGES];
  unsigned n, windows;
} pending;
static _Atomic unsigned pending_ranges;  /* pending.n, for readers without the lock: a hint */
static _Atomic int64_t pending_since;    /* when the oldest pending range was noted */
static atomic_ullong give_calls;

static void givable_range(uintptr_t* give_lo, uintptr_t* give_hi, const uint8_t* hdr, const struct dl_find_object* info);

/* Whether [lo, hi) is still givable pages of o: a range stays pending for PENDING_NS or more,
 * meanwhile the object may have been unloaded (dlclose) and its addresses mapped again, by
 * another object or by anonymous memory that a madvise would zero. So the object that holds lo
 * now is asked again (_dl_find_object: lock-free), and its givable range derived afresh from
 * its program headers. What remains is the moment between this check and the madvise, as for
 * a walk that reads an object while another thread unloads it. */
static bool still_givable(const object_t* o, uintptr_t lo, uintptr_t hi) {
  struct dl_find_object info;
  uintptr_t give_lo, give_hi;
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_NO_RECHECK")) return true; /* the unload gate's control */
#endif
  if (_dl_find_object((void*)lo, &info) != 0 || info.dlfo_eh_frame != o->eh) return false;
  givable_range(&give_lo, &give_hi, o->eh, &info);
  return give_lo <= lo && lo < hi && hi <= give_hi;
}

/* Hands back ranges [lo[i], hi[i]) of object[i], i < n: one madvise per object, over the span
 * of its ranges, which lies in its givable part (note_read clips each range to it) while the
 * object is loaded (still_givable). */
static void give_back(const uintptr_t* lo, const uintptr_t* hi, const object_t* const* object, unsigned n) {
  uint32_t done = 0;
  _Static_assert(PENDING_RANGES <= 32 && MP_UNWIND_WALK_RANGES <= 32, "done is a bit set");
  for (unsigned i = 0; i < n; i++) {
    if (done & (1u << i)) continue;
    const object_t* o = object[i];
    uintptr_t span_lo = lo[i], span_hi = hi[i];
    for (unsigned j = i; j < n; j++)
      if (object[j] == o) {
        done |= 1u << j;
        if (lo[j] < span_lo) span_lo = lo[j];
        if (hi[j] > span_hi) span_hi = hi[j];
      }
    mp_assert(o->give_lo <= span_lo && span_lo < span_hi && span_hi <= o->give_hi);
    mp_assert((span_lo & 4095) == 0 && (span_hi & 4095) == 0);
    if (!still_givable(o, span_lo, span_hi)) continue;
    atomic_fetch_add_explicit(&give_calls, 1, memory_order_relaxed);
    MP_TEST_TIME_START(give_from);
    if (madvise((void*)span_lo, span_hi - span_lo, MADV_DONTNEED) == 0)
      atomic_fetch_add_explicit(&bytes_given, span_hi - span_lo, memory_order_relaxed);
    MP_TEST_TIME_END(MP_TIME_GIVE, give_from);
  }
}

static unsigned windows_of(uintptr_t lo, uintptr_t hi) { return (unsigned)((hi - lo + WINDOW - 1) / WINDOW); }

/* As pending_lock: the walk's ranges joined to the pending ones (each merged into the first
 * pending range of its object it overlaps or touches; one that bridges two leaves them apart,
 * counted twice, so its pages go back sooner), all handed back when more than PENDING_WINDOWS
 * windows (by length) or too old. */
static void note_pending(const mp_unwind_walk_t* walk, int64_t now) {
  if (pending.n == 0 && walk->n != 0) atomic_store_explicit(&pending_since, now, memory_order_relaxed);
  for (unsigned i = 0; i < walk->n; i++) {
    const object_t* o = (const object_t*)walk->object[i];
    uintptr_t lo = walk->lo[i], hi = walk->hi[i];
    unsigned k = 0;
    while (k < pending.n && !(pending.object[k] == o && lo <= pending.hi[k] && pending.lo[k] <= hi)) k++;
    if (k == pending.n) {
      mp_assert(pending.n < PENDING_RANGES); /* pending.n <= PENDING_WINDOWS between walks */
      pending.lo[k] = lo;
      pending.hi[k] = hi;
      pending.object[k] = o;
      pending.n++;
      pending.windows += windows_of(lo, hi);
      continue;
    }
    pending.windows -= windows_of(pending.lo[k], pending.hi[k]);
    if (lo < pending.lo[k]) pending.lo[k] = lo;
    if (hi > pending.hi[k]) pending.hi[k] = hi;
    pending.windows += windows_of(pending.lo[k], pending.hi[k]);
  }
  bool due = pending.windows > PENDING_WINDOWS ||
             (pending.n != 0 && now - atomic_load_explicit(&pending_since, memory_order_relaxed) >= PENDING_NS);
#ifdef MP_TEST_HOOKS
  due = due || mp_test_hook("MP_TEST_UNWIND_GIVE_EACH"); /* the batching test's control: every walk's at its end */
#endif
  if (due) {
    give_back(pending.lo, pending.hi, pending.object, pending.n);
    pending.n = pending.windows = 0;
  }
  mp_assert(pending.windows <= PENDING_WINDOWS && pending.n <= PENDING_WINDOWS);
  atomic_store_explicit(&pending_ranges, pending.n, memory_order_relaxed);
}

void mp_unwind_walk_end(mp_unwind_walk_t* walk) {
  if (walk->n == 0) {
    if (atomic_load_explicit(&pending_ranges, memory_order_relaxed) == 0) return; /* the common case */
  }
  int saved = errno;
  int64_t now = mp_monotonic_ns();
  if (walk->n == 0 && now - atomic_load_explicit(&pending_since, memory_order_relaxed) < PENDING_NS) {
    errno = saved;
    return;
  }
  if (!mp_lock_try(&pending_lock)) {
    give_back(walk->lo, walk->hi, (const object_t* const*)walk->object, walk->n); /* another thread notes */
  } else {
    note_pending(walk, now);
    mp_unlock(&pending_lock);
  }
  errno = saved;
  walk->n = 0;
}

/* The pages of o, from hdr's on, that hold the file's bytes as the loader mapped them (see
 * above), from the object's program headers: the executable's from the auxiliary vector (its
 * dlfo_map_start may be its text, not its first segment), a library's from its ELF header at
 * the start of its mapping. */
static void givable_range(uintptr_t* give_lo, uintptr_t* give_hi, const uint8_t* hdr, const struct dl_find_object* info) {
  *give_lo = *give_hi = 0;
  const struct link_map* lm = info->dlfo_link_map;
  uintptr_t start = (uintptr_t)info->dlfo_map_start, end = (uintptr_t)info->dlfo_map_end;
  /* getauxval sets errno (ENOENT) for an entry the vector lacks: without a vDSO (qemu-user's
   * aarch64 in Debian 12's 7.2, a kernel booted with vdso=0) this runs inside a sampled
   * allocation, whose caller's errno stays as it was */
  int saved = errno;
  uintptr_t vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
  errno = saved;
  if (lm == NULL || start == vdso) return;
  const ElfW(Phdr)* ph;
  size_t phnum;
  if (lm->l_name == NULL || lm->l_name[0] == 0) { /* the executable */
    ph = (const ElfW(Phdr)*)getauxval(AT_PHDR);
    phnum = getauxval(AT_PHNUM);
    if (ph == NULL || getauxval(AT_PHENT) != sizeof(ElfW(Phdr))) return;
  } else {
    const ElfW(Ehdr)* eh = (const ElfW(Ehdr)*)start;
    if (end - start < sizeof(ElfW(Ehdr)) || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
        eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phoff > end - start ||
        (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > end - start - eh->e_phoff)
      return;
    ph = (const ElfW(Phdr)*)(start + eh->e_phoff);
    phnum = eh->e_phnum;
    bool header_mapped = false; /* the header read is the object's own: its first segment maps it */
    for (size_t i = 0; i < phnum; i++)
      header_mapped = header_mapped || (ph[i].p_type == PT_LOAD && ph[i].p_offset == 0 &&
                                        ((lm->l_addr + ph[i].p_vaddr) & ~(uintptr_t)4095) == start);
    if (!header_mapped) return;
  }
  uintptr_t page = (uintptr_t)getpagesize(), lo = 0, hi = 0;
  for (size_t i = 0; i < phnum; i++) {
    uintptr_t seg = lm->l_addr + ph[i].p_vaddr;
    if (ph[i].p_type == PT_GNU_RELRO && seg <= (uintptr_t)hdr && (uintptr_t)hdr < seg + ph[i].p_memsz) return;
    if (ph[i].p_type != PT_LOAD || (uintptr_t)hdr < seg || (uintptr_t)hdr >= seg + ph[i].p_filesz) continue;
    if ((ph[i].p_flags & (PF_W | PF_X)) != 0) return;
    lo = (uintptr_t)hdr & ~(page - 1);
    hi = (seg + ph[i].p_filesz) & ~(page - 1); /* the last partial page is left alone */
  }
  if (lo >= hi) return;
  for (const ElfW(Dyn)* d = lm->l_ld; d != NULL && d->d_tag != DT_NULL; d++)
    if (d->d_tag == DT_TEXTREL || (d->d_tag == DT_FLAGS && (d->d_un.d_val & DF_TEXTREL) != 0)) return;
  *give_lo = lo;
  *give_hi = hi;
}

/* As objects_writer: fills o (its search table kept sparsely when the pool has room). */
static void object_setup(object_t* o, const uint8_t* hdr, const struct dl_find_object* info) {
  o->eh = hdr;
  o->cies.writer = (mp_lock_t)MP_LOCK_INIT(MP_LEVEL_UNWIND);
  givable_range(&o->give_lo, &o->give_hi, hdr, info);
  o->sparse = NULL;
  if (!parse_hdr(hdr, &o->count, &o->table_rel)) {
    o->count = 0;
    return;
  }
  unsigned starts = (unsigned)((o->count + SPARSE_STEP - 1) / SPARSE_STEP);
  if (starts > SPARSE_POOL - sparse_used) return;
  const int32_t* table = (const int32_t*)(const void*)(hdr + o->table_rel);
  int32_t* sparse = sparse_pool + sparse_used;
  for (unsigned i = 0; i < starts; i++) sparse[i] = table[2 * (size_t)i * SPARSE_STEP];
  mp_unwind_walk_t walk = MP_UNWIND_WALK_INIT;
  note_read(&walk, o, (uintptr_t)table, (size_t)o->count * 8);
  mp_unwind_walk_end(&walk);
  sparse_used += starts;
  o->sparse = sparse;
}

/* The object entry of hdr, made at its first miss; NULL when another thread's setup took too
 * long or this thread's own is under way (see SETUP_WAIT_NS). */
static object_t* object_of(const uint8_t* hdr, const struct dl_find_object* info) {
  uintptr_t me = (uintptr_t)&mp_tls;
  int64_t deadline = 0;
  for (unsigned spins = 0;; spins++) {
    unsigned n = atomic_load_explicit(&objects_n, memory_order_acquire);
    for (unsigned i = 0; i < n; i++)
      if (atomic_load_explicit(&objects[i].hdr, memory_order_acquire) == hdr) return &objects[i];
    if (n == OBJECTS_MAX) return NULL;
    uintptr_t held = atomic_load_explicit(&objects_writer, memory_order_relaxed);
    if (held == me) return NULL;
    if (held == 0 && mp_lock_try(&setup_hold)) { /* taken first: objects_writer is never ours unheld */
      if (atomic_compare_exchange_strong_explicit(&objects_writer, &held, me, memory_order_acquire, memory_order_relaxed)) break;
      mp_unlock(&setup_hold);
    }
    if (spins < 64) {
      mp_spin_hint();
      continue;
    }
    int64_t began = atomic_load_explicit(&objects_setup_ns, memory_order_relaxed); /* 0: between its start and its clock */
    if (began != 0 && (deadline == 0 || began + SETUP_WAIT_NS < deadline)) deadline = began + SETUP_WAIT_NS;
    if (!mp_wait_turn(&deadline, SETUP_WAIT_NS)) return NULL;
  }
  atomic_store_explicit(&objects_setup_ns, mp_monotonic_ns(), memory_order_relaxed);
  object_t* o = NULL;
  unsigned n = atomic_load_explicit(&objects_n, memory_order_relaxed);
  for (unsigned i = 0; i < n && o == NULL; i++)
    if (atomic_load_explicit(&objects[i].hdr, memory_order_relaxed) == hdr) o = &objects[i];
  if (o == NULL && n < OBJECTS_MAX) {
    o = &objects[n];
    object_setup(o, hdr, info);
    atomic_store_explicit(&o->hdr, hdr, memory_order_release);
    atomic_store_explicit(&objects_n, n + 1, memory_order_release);
  }
  atomic_store_explicit(&objects_setup_ns, 0, memory_order_relaxed);
  atomic_store_explicit(&objects_writer, 0, memory_order_release);
  mp_unlock(&setup_hold); /* a signal held back meanwhile is delivered here */
  return o;
}

/* The FDE that may cover pc: by o's sparse table and one block of its search table, or (o
 * without one, or NULL) by a binary search of the whole table. */
static uintptr_t fde_of(mp_unwind_walk_t* walk, object_t* o, const uint8_t* hdr, uintptr_t pc) {
  uint64_t count;
  uint32_t table_rel;
  if (o != NULL) {
    if (o->count == 0) return 0;
    count = o->count;
    table_rel = o->table_rel;
  } else if (!parse_hdr(hdr, &count, &table_rel)) {
    return 0;
  }
  const int32_t* table = (const int32_t*)(const void*)(hdr + table_rel);
  intptr_t rel = (intptr_t)(pc - (uintptr_t)hdr);
  if (o != NULL && o->sparse != NULL) {
    if (rel < o->sparse[0]) return 0;
    size_t lo = last_at_or_below(o->sparse, 1, (size_t)((count + SPARSE_STEP - 1) / SPARSE_STEP), rel);
    uint64_t first = (uint64_t)lo * SPARSE_STEP;
    size_t n = count - first < SPARSE_STEP ? (size_t)(count - first) : SPARSE_STEP;
    const int32_t* block = table + 2 * first;
    note_read(walk, o, (uintptr_t)block, n * 8);
    return (uintptr_t)hdr + (uintptr_t)(intptr_t)block[2 * last_at_or_below(block, 2, n, rel) + 1];
  }
  if (rel < table[0]) return 0;
  note_read(walk, o, (uintptr_t)table, (size_t)count * 8);
  return (uintptr_t)hdr + (uintptr_t)(intptr_t)table[2 * last_at_or_below(table, 2, count, rel) + 1];
}

static void lookup_uncached(mp_unwind_walk_t* walk, uintptr_t pc, mp_unwind_rule_t* out) {
  struct dl_find_object info;
  out->kind = MP_RULE_FP;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->fp_off = 0;
#if defined(__aarch64__)
  out->ra_words = 0;
#endif
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_FP_ONLY")) return; /* the unwind test's control: frame pointers only */
#endif
  if (_dl_find_object((void*)pc, &info) != 0 || info.dlfo_eh_frame == NULL) return; /* JIT code or no object */
  const uint8_t* hdr = info.dlfo_eh_frame;
  MP_TEST_TIME_START(miss_from);
  object_t* o = object_of(hdr, &info);
  atomic_fetch_add_explicit(&rules_parsed, 1, memory_order_relaxed);
  uintptr_t fde = fde_of(walk, o, hdr, pc);
  mp_unwind_rule_t r = *out; /* what rule_from_fde does not set stays zero: a rule packs the same every time */
  if (fde != 0 && rule_from_fde(walk, o, o != NULL ? &o->cies : NULL, fde, pc, (uintptr_t)hdr, &r)) *out = r;
  MP_TEST_TIME_END(MP_TIME_MISS, miss_from);
}

void mp_unwind_counts(uint64_t* parsed, uint64_t* given, uint64_t* calls) {
  *parsed = atomic_load(&rules_parsed);
  *given = atomic_load(&bytes_given);
  *calls = atomic_load(&give_calls);
}

/* ---- the cache ---------------------------------------------------------------------------------- */
/* Set-associative: a pc's rule may sit in any of the CACHE_WAYS slots of one cache line, so a
 * lookup reads one line (a direct-mapped table of the same size would lose a fifth of its
 * entries to collisions). A short Node service meets ~1,500 distinct return addresses of node
 * and ~300 of JIT code; the rules kept between runs (rulefile.c) gather more of node's from run
 * to run (2,100 after four runs of bench/fixtures/http-workers.cjs), for which 2048 slots left a
 * full set evicting what a later run needed again. 64 KiB, made resident when profiling starts
 * (mp_unwind_init). */
#define CACHE_SETS 1024u
#define CACHE_WAYS 4u
#define CACHE_PC_LIMIT ((uintptr_t)1 << 48) /* a pc shares its word with a 16-bit sequence */

/* A slot is valid for a reader when its tag holds the pc with an even sequence and is the same
 * before and after the reader read the rule: a writer makes the sequence odd, writes the rule,
 * then writes the pc with the next even sequence, so a reader never pairs one address with
 * another's rule, however the writes interleave (short of 32768 writes to that one slot
 * between a reader's two reads of it). */
typedef struct slot_s {
  _Atomic uint64_t tag; /* pc << 16 | sequence; pc 0: empty (no code address is below 4096) */
  _Atomic uint64_t rule;
} slot_t;
typedef struct set_s {
  _Alignas(64) slot_t way[CACHE_WAYS];
} set_t;
_Static_assert(sizeof(set_t) == 64, "a set is one cache line");

static set_t cache[CACHE_SETS];
static mp_lock_t writer = MP_LOCK_INIT(MP_LEVEL_UNWIND);
static unsigned next_victim; /* under `writer` */

_Static_assert(CACHE_SETS == 1024u, "set_of takes the hash's top 10 bits");
static inline set_t* set_of(uintptr_t pc) { return &cache[(size_t)((pc * 0x9E3779B97F4A7C15ull) >> 54) & (CACHE_SETS - 1)]; }

static inline uint64_t pack(const mp_unwind_rule_t* r) {
  uint64_t v;
  memcpy(&v, r, sizeof(v));
  return v;
}

static bool cached(const set_t* set, uintptr_t pc, mp_unwind_rule_t* out) {
  for (unsigned i = 0; i < CACHE_WAYS; i++) {
    const slot_t* s = &set->way[i];
    uint64_t tag = atomic_load_explicit(&s->tag, memory_order_acquire);
    if ((tag >> 16) != pc || (tag & 1) != 0) continue;
    uint64_t v = atomic_load_explicit(&s->rule, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(&s->tag, memory_order_relaxed) != tag) return false; /* rewritten meanwhile */
    memcpy(out, &v, sizeof(v));
    return true;
  }
  return false;
}

/* Writes pc's rule into its set; skipped while another thread writes (it is asked again at
 * its next miss). */
static bool writer_take(void) {
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_WRITER_UNTRACKED")) /* the hostile-signals test's control: a flag, as before */
    return !atomic_exchange_explicit(&writer.held, 1, memory_order_acquire);
#endif
  return mp_lock_try(&writer);
}

static void writer_give(void) {
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_WRITER_UNTRACKED")) {
    atomic_store_explicit(&writer.held, 0, memory_order_release);
    return;
  }
#endif
  mp_unlock(&writer);
}

static void put(set_t* set, uintptr_t pc, uint64_t rule) {
  if (!writer_take()) return; /* someone else writes */
#ifdef MP_TEST_HOOKS
  static atomic_bool raised; /* the hostile-signals test: the program's SIGPROF lands here, once */
  if (mp_test_hook("MP_TEST_SIGNAL_IN_UNWIND_WRITER") && !atomic_exchange(&raised, true)) raise(SIGPROF);
#endif
  unsigned i = 0; /* the first empty way, or pc's own (a rule from the files may be there already) */
  for (; i < CACHE_WAYS; i++) {
    uint64_t held = atomic_load_explicit(&set->way[i].tag, memory_order_relaxed) >> 16;
    if (held == 0 || held == pc) break;
  }
  if (i == CACHE_WAYS) i = next_victim++ % CACHE_WAYS; /* full: round robin */
  slot_t* s = &set->way[i];
  uint64_t tag = atomic_load_explicit(&s->tag, memory_order_relaxed);
  uint64_t seq = (tag & 0xfffe) + 1; /* odd; writers take turns (a fork child may inherit an odd one) */
  atomic_store_explicit(&s->tag, (tag & ~(uint64_t)0xffff) | seq, memory_order_relaxed);
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->rule, rule, memory_order_relaxed);
  atomic_store_explicit(&s->tag, (uint64_t)pc << 16 | ((seq + 1) & 0xffff), memory_order_release);
  writer_give();
}

void mp_unwind_rule(mp_unwind_walk_t* walk, uintptr_t pc, mp_unwind_rule_t* out) {
#ifdef MP_TEST_HOOKS
  if (mp_test_hook("MP_TEST_UNWIND_NOCACHE")) { /* every lookup a miss */
    lookup_uncached(walk, pc, out);
    return;
  }
#endif
  if (pc >= CACHE_PC_LIMIT) {
    lookup_uncached(walk, pc, out);
    return;
  }
  set_t* set = set_of(pc);
  if (cached(set, pc, out)) return;
  lookup_uncached(walk, pc, out);
  put(set, pc, pack(out));
}

/* ---- the cache's contents, kept between runs (rulefile.c) ------------------------------------- */
_Static_assert(CACHE_SETS * CACHE_WAYS == MP_UNWIND_SLOTS, "rulefile.c reads every slot");

bool mp_unwind_slot(unsigned i, uintptr_t* pc, uint64_t* rule) {
  const slot_t* s = &cache[i / CACHE_WAYS].way[i % CACHE_WAYS];
  uint64_t tag = atomic_load_explicit(&s->tag, memory_order_acquire);
  if ((tag >> 16) == 0 || (tag & 1) != 0) return false;
  uint64_t v = atomic_load_explicit(&s->rule, memory_order_relaxed);
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&s->tag, memory_order_relaxed) != tag) return false;
  *pc = (uintptr_t)(tag >> 16);
  *rule = v;
  return true;
}

void mp_unwind_remember(uintptr_t pc, uint64_t rule) {
  if (pc == 0 || pc >= CACHE_PC_LIMIT) return;
#if MP_DEBUG_ON
  mp_unwind_rule_t fresh;
  lookup_uncached(NULL, pc, &fresh);
  mp_assert(pack(&fresh) == rule); /* a rule kept between runs is the one the tables give */
#endif
  put(set_of(pc), pc, rule);
}

/* Whether `rule` is one lookup_uncached can return: what it leaves unset is zero (its start). */
bool mp_unwind_rule_valid(uint64_t rule) {
  mp_unwind_rule_t r;
#if !defined(__aarch64__)
  uint8_t flag; /* a bool's byte: 0 or 1, else reading it as a bool is undefined */
  memcpy(&flag, (const uint8_t*)&rule + offsetof(mp_unwind_rule_t, cfa_rbp), 1);
  if (flag > 1) return false;
#endif
  memcpy(&r, &rule, sizeof(r));
  mp_unwind_rule_t zero = {.kind = r.kind};
  switch (r.kind) {
    case MP_RULE_FP:
    case MP_RULE_END:
    case MP_RULE_SIGNAL:
      return memcmp(&r, &zero, sizeof(r)) == 0;
    case MP_RULE_DRAP: /* GCC's realigning frames, x86-64 only (rule_from_fde) */
#if defined(__aarch64__)
      return false;
#else
      return r.cfa_rbp && (r.cfa_off & 7) == 0 && (r.fp_off & 7) == 0;
#endif
    case MP_RULE_CFI:
#if defined(__aarch64__)
      return r.cfa_off >= 0 && r.fp_off <= 0 && (r.fp_off & 7) == 0;
#else
      return r.cfa_off > 0 && r.fp_off <= 0 && (r.fp_off & 7) == 0;
#endif
    default:
      return false;
  }
}

void mp_unwind_child_reinit(void) { /* the child's only thread is the one that forked */
  mp_lock_reset(&writer);
  /* another thread may have been noting: its ranges, maybe half written, are dropped (the
   * child maps none of those pages: fork copies no page table entry of a file mapping never
   * written) */
  pending.n = pending.windows = 0;
  atomic_store(&pending_ranges, 0);
  mp_lock_reset(&pending_lock);
  atomic_store(&objects_writer, 0);
  atomic_store(&objects_setup_ns, 0);
  mp_lock_reset(&setup_hold);
  for (unsigned i = 0; i < OBJECTS_MAX; i++) mp_lock_reset(&objects[i].cies.writer);
}

/* The cache's pages are made writable before the first lookup: a lookup reads its set
 * before a miss writes it, and a read of a never-touched page maps the shared zero page,
 * whose replacement at the write flushes the TLB of every CPU that runs the process (see
 * mp_os_alloc). The distinct return addresses of one process touch all its pages anyway. */
void mp_unwind_init(void) { mp_prewrite(cache, sizeof(cache)); }

void mp_unwind_prefetch(uintptr_t pc) { __builtin_prefetch(set_of(pc)); }

#else /* !MP_UNWIND_CFI */

void mp_unwind_rule(mp_unwind_walk_t* walk, uintptr_t pc, mp_unwind_rule_t* out) {
  (void)walk;
  (void)pc;
  out->kind = MP_RULE_FP;
  out->cfa_rbp = false;
  out->cfa_off = 0;
  out->fp_off = 0;
#if defined(__aarch64__)
  out->ra_words = 0;
#endif
}
void mp_unwind_child_reinit(void) {}
void mp_unwind_walk_end(mp_unwind_walk_t* walk) { (void)walk; }
void mp_unwind_init(void) {}
void mp_unwind_prefetch(uintptr_t pc) { (void)pc; }
void mp_unwind_counts(uint64_t* parsed, uint64_t* given, uint64_t* calls) { *parsed = *given = *calls = 0; }
bool mp_unwind_slot(unsigned i, uintptr_t* pc, uint64_t* rule) { (void)i; (void)pc; (void)rule; return false; }
void mp_unwind_remember(uintptr_t pc, uint64_t rule) { (void)pc; (void)rule; }
bool mp_unwind_rule_valid(uint64_t rule) { (void)rule; return false; }

#endif
