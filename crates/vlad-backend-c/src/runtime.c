/* The runtime of compiled VLAD programs: boxed values, an arena, printing in the evaluator's
   number format, read-real, run-time errors with their source positions, and a big stack. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <errno.h>
#include <sys/mman.h>

#ifdef VL_LIBRARY
#include <setjmp.h>
/* A shared library (`vlad compile --lib`) has no main: its entry points (vlad_NAME) catch a
   run-time error here, and the caller reads its message with vlad_error(). */
static jmp_buf *vl_lib_jmp;
static char *vl_lib_error;
#endif
/* Ends the program with this text on stderr and this status; in a library, returns from the
   entry point being run instead, the text kept for vlad_error(). */
static void vl_die(const char *text, int code) {
  fflush(stdout);
#ifdef VL_LIBRARY
  if (vl_lib_jmp) {
    free(vl_lib_error);
    vl_lib_error = strdup(text);
    longjmp(*vl_lib_jmp, code ? code : 1);
  }
#endif
  fputs(text, stderr);
  exit(code);
}

typedef struct vl_obj *V;
typedef union { double d; long b; V v; void *a; } vl_slot;
/* The AD tags (VL_FORWARD ...), the kinds of objects (VL_NIL ...) and of the AD maps of boxed
   closures (VL_MAP_...) are defined before this file, by the compiler (abi.rs). */
/* `zero` holds flags (a flat array's is the accumulator mark instead, VL_ACC_MARK below):
   VL_LAZY marks a lazy zero sensitivity (the evaluator's Value::Zero, see vl_as_zero);
   VL_NOREALS an object with no real anywhere in it (the empty list, booleans, primitives, and
   pairs and tagged values of such: set where they are made), which `plus` of the
   object and itself and `equal_data` need not walk (vl_ad_plus). */
struct vl_obj { unsigned short kind; unsigned short zero; unsigned aux; vl_slot s[]; };
enum { VL_LAZY = 1, VL_NOREALS = 4 };

/* ---- the arena: boxed values live in chunks allocated in order. Values are immutable and
   a call can hand on what it allocated only through its result, so after a call whose result
   has no boxed part, everything allocated during the call is garbage: the generated code takes
   a mark before such a call and releases it after (vl_mark / vl_release), and the chunks above
   the mark are reused. A loop releases its mark at each step keeping what it carries: copied
   down (vl_release_carrying, vl_collect, below). Nothing else is ever freed.
   The state every translation unit shares is declared VL_SHARED (zero-initialised): `static`
   when the program is one unit; defined in unit 0 and `extern` in the others when it is
   compiled as several (crates/vlad-backend-c/src/units.rs). */
/* start: the bytes of the chunks before it (vl_pos). */
struct vl_chunk_rec { char *base; size_t size; size_t start; };
VL_SHARED char *vl_chunk;
VL_SHARED size_t vl_left;
VL_SHARED struct vl_chunk_rec *vl_chunks;
VL_SHARED size_t vl_nchunks, vl_capchunks;
VL_SHARED size_t vl_cur; /* the number of chunks in use; the current one is vl_cur - 1 */
typedef struct { size_t cur; char *chunk; size_t left; } vl_mark_t;
/* Makes the next chunk that holds n bytes current: a free one above the current, else a new one.
   A new chunk for a large request has half as much again to spare: a loop that releases its
   arena and then asks for a little more than before (a collection copying down what it
   carries, a tape that grows) finds it free next time, instead of a new chunk of exactly the
   size each time, all of them kept (the arena grew quadratically). */
static void vl_alloc_slow(size_t n) {
  while (vl_cur < vl_nchunks) {
    size_t i = vl_cur++;
    if (vl_chunks[i].size >= n) {
      vl_chunk = vl_chunks[i].base;
      vl_left = vl_chunks[i].size;
      return;
    }
  }
  size_t size = n > (1u << 24) ? n + n / 2 : (1u << 24);
  char *c = malloc(size);
  if (vl_nchunks == vl_capchunks) {
    vl_capchunks = vl_capchunks ? 2 * vl_capchunks : 64;
    vl_chunks = realloc(vl_chunks, vl_capchunks * sizeof *vl_chunks);
  }
  if (!c || !vl_chunks) vl_die("vlad: out of memory\n", 70);
  vl_chunks[vl_nchunks].base = c;
  vl_chunks[vl_nchunks].size = size;
  vl_chunks[vl_nchunks].start =
      vl_nchunks ? vl_chunks[vl_nchunks - 1].start + vl_chunks[vl_nchunks - 1].size : 0;
  vl_cur = ++vl_nchunks;
  vl_chunk = c;
  vl_left = size;
}
/* Allocation, vl_obj, vl_flat and vl_flat_zeroed are inlined wherever they are called: GCC
   stops inlining once a unit has grown by its limit (vlad sets it low for compile time:
   vlad::cc::gcc_tuning), and a boxed value's constructors called out of line then cost
   reverse mode through boxed values more than the call saves in code (benches/README.md,
   "Boxed values without reals are not added"). A flat array made by a call in a loop made the
   caller save every live double around it (the vector registers are caller-saved): most of
   what a repetition of a short loop nest cost beyond its arithmetic (benches/README.md, "New
   flat arrays inlined"). */
#define VL_INLINE static inline __attribute__((always_inline))
VL_INLINE void *vl_alloc(size_t n) {
  n = (n + 15) & ~(size_t)15;
  if (n > vl_left) vl_alloc_slow(n);
  void *p = vl_chunk;
  vl_chunk += n;
  vl_left -= n;
  return p;
}
static inline vl_mark_t vl_mark(void) { vl_mark_t m = {vl_cur, vl_chunk, vl_left}; return m; }
static inline void vl_release(vl_mark_t m) { vl_cur = m.cur; vl_chunk = m.chunk; vl_left = m.left; }
/* The arena's position at (cur, chunk) as a number of bytes: the chunks below the current one
   in full, and the part of the current one in use. The bytes allocated since a mark are the
   difference of two positions (O(1): vl_collect tests it at every step of a loop). */
static inline size_t vl_pos(size_t cur, const char *chunk) {
  return cur ? vl_chunks[cur - 1].start + (size_t)(chunk - vl_chunks[cur - 1].base) : 0;
}

static struct vl_obj vl_nil_obj = {VL_NIL, VL_NOREALS, 0};
static struct { unsigned short kind; unsigned short zero; unsigned aux; vl_slot s[1]; }
    vl_true_obj = {VL_BOOL, VL_NOREALS, 0, {{.b = 1}}},
    vl_false_obj = {VL_BOOL, VL_NOREALS, 0, {{.b = 0}}};
#define vl_nil (&vl_nil_obj)
VL_INLINE V vl_obj(int kind, unsigned aux, int n) {
  V o = vl_alloc(sizeof(struct vl_obj) + n * sizeof(vl_slot));
  o->kind = kind;
  o->zero = 0;
  o->aux = aux;
  return o;
}
/* A boxed closure of a code with n slots (filled by the compiled code); () as a value. */
static inline V vl_closure(long code, long n) { return vl_obj(VL_CLOSURE, (unsigned)code, (int)n); }
static inline V vl_nil_value(void) { return vl_nil; }
static V vl_bool(long b) { return b ? (V)&vl_true_obj : (V)&vl_false_obj; }

/* ---- arrays. An array whose elements have one abstract value is *flat*: slot 0 holds its
   length n, and element i's k slots (aux: the layout of the element value's shape, its known
   parts stored too; vlad-lower/src/arrays.rs) are slots 1 + i*k ... i*k + k. The generated code reads
   and writes them; for printing or an error message, or where it becomes part of a boxed
   value (a list of arrays whose length is known only at run time), it is boxed into a
   VL_ARRAY (aux its AD tags, as a pair's; slot 0 the length, slots 1..n the boxed elements),
   which the AD operators below map element by element.
   A flat array's aux is the number of its element layout in vl_layouts (the compiler writes
   the table: each slot's letter, `d` real, `b` boolean or integer, `v` pointer), which is
   how the collector (vl_collect) finds the pointers in it; VL_LAYOUT_REALS and
   VL_LAYOUT_BOXED are the runtime's own arrays of reals and of pointers. */
VL_SHARED const char *vl_layouts[];
VL_INLINE V vl_flat(long n, unsigned k, unsigned layout) {
  V o = vl_alloc(sizeof(struct vl_obj) + (1 + (size_t)n * k) * sizeof(vl_slot));
  o->kind = VL_FLAT;
  o->zero = 0;
  o->aux = layout;
  o->s[0].b = n;
  return o;
}
/* vl_flat of a layout with pointers: their slots null until they are stored, so that the
   collector never reads an uninitialised pointer. */
VL_INLINE V vl_flat_zeroed(long n, unsigned k, unsigned layout) {
  V o = vl_flat(n, k, layout);
  memset(&o->s[1], 0, (size_t)n * k * sizeof(vl_slot));
  return o;
}
/* A new flat array of n elements of k slots, copied from data (an array literal). */
static V vl_flat_of(long n, unsigned k, unsigned layout, const vl_slot *data) {
  V a = vl_flat(n, k, layout);
  memcpy(&a->s[1], data, (size_t)n * k * sizeof(vl_slot));
  return a;
}
/* The bytes of flat array x, as vl_flat allocated them. */
static inline size_t vl_flat_bytes(V x) {
  return sizeof(struct vl_obj) + (1 + (size_t)x->s[0].b * strlen(vl_layouts[x->aux])) * sizeof(vl_slot);
}
/* Releases the arena to mark m but keeps the n flat arrays xs[0..n), whose elements hold no
   pointers: they are copied down to the mark and xs is updated. A loop that carries arrays it
   built from one iteration to the next (a tail call, an ifold step) calls this at the end of
   each iteration, so what the iteration allocated is reclaimed and the carried arrays take the
   place of the previous iteration's: it runs in constant memory. Copying is safe because flat
   arrays are immutable and nothing can tell a copy from the original. One array moves in
   place: releasing and allocating write no memory, and memmove copies overlapping ranges.
   Several are staged through the heap, since moving one could overwrite another. */
static void vl_release_carrying(vl_mark_t m, V *xs, int n) {
  if (n == 1) {
    size_t size = vl_flat_bytes(xs[0]);
    vl_release(m);
    V d = vl_alloc(size);
    memmove(d, xs[0], size);
    xs[0] = d;
    return;
  }
  size_t total = 0;
  for (int i = 0; i < n; i++) total += vl_flat_bytes(xs[i]);
  char *stage = malloc(total ? total : 1), *p = stage;
  if (!stage) vl_die("vlad: out of memory\n", 70);
  for (int i = 0; i < n; i++) {
    size_t size = vl_flat_bytes(xs[i]);
    memcpy(p, xs[i], size);
    p += size;
  }
  vl_release(m);
  p = stage;
  for (int i = 0; i < n; i++) {
    size_t size = vl_flat_bytes((V)p);
    xs[i] = vl_alloc(size);
    memcpy(xs[i], p, size);
    p += size;
  }
  free(stage);
}
/* A flat array boxed by reference (VL_FLATREF, aux its AD tags; slot 0 its length, 1 the flat
   array, 2 the number of its element layout), in O(1): boxing a flat array element by element
   would cost O(n) wherever an array enters a boxed value (a closure that closes over it, boxed
   in a chain of backpropagators, would make a loop over the array quadratic). Its elements are
   boxed when they are read (vl_elem: vl_box_elem, generated per layout); anything else that
   looks inside makes it a VL_ARRAY (vl_dense). */
VL_FUN V vl_box_elem(long layout, V a, long i);
static V vl_flatref(V flat, unsigned tags, int layout) {
  V o = vl_obj(VL_FLATREF, tags, 3);
  o->s[0].b = flat->s[0].b;
  o->s[1].v = flat;
  o->s[2].b = layout;
  return o;
}
/* Element i of a boxed array: a VL_ARRAY or a VL_FLATREF. */
static V vl_elem(V a, long i) {
  return a->kind == VL_FLATREF ? vl_box_elem((int)a->s[2].b, a->s[1].v, i) : a->s[1 + i].v;
}
static V vl_boxed_array(long n, unsigned tags) {
  V o = vl_alloc(sizeof(struct vl_obj) + (1 + (size_t)n) * sizeof(vl_slot));
  o->kind = VL_ARRAY;
  o->zero = 0;
  o->aux = tags;
  o->s[0].b = n;
  return o;
}
/* A real that is an index or a count (a non-negative integer; the evaluator's test). */
/* A natural number: below 2^63 by a round trip through a long (no call of floor in a loop's
   index checks), above by floor (infinity is not one). */
static inline int vl_is_natural(double r) {
  if (r >= 0.0 && r < 9223372036854775808.0) return (double)(long)r == r;
  return r >= 0.0 && r - floor(r) == 0.0;
}
static V vl_real(double d) { V o = vl_obj(VL_REAL, 0, 1); o->s[0].d = d; return o; }
static V vl_prim(unsigned p) { V o = vl_obj(VL_PRIM, p, 0); o->zero = VL_NOREALS; return o; }
/* VL_NOREALS of an object made of a and b (either may be an empty slot). */
static inline unsigned short vl_noreals2(V a, V b) {
  return a && b ? a->zero & b->zero & VL_NOREALS : 0;
}
static V vl_pair(unsigned tags, V a, V b) {
  V o = vl_obj(VL_PAIR, tags, 2); o->s[0].v = a; o->s[1].v = b; o->zero = vl_noreals2(a, b); return o;
}
/* A bundle is never flagged VL_NOREALS (its primal is a real in all but odd programs, and the
   test of its parts cost reverse-over-forward code more than the flag saved it). */
static V vl_bundle(V p, V t) { V o = vl_obj(VL_BUNDLE, 0, 2); o->s[0].v = p; o->s[1].v = t; return o; }
static V vl_tagged(unsigned tag, V x) {
  V o = vl_obj(VL_TAGGED, tag, 1); o->s[0].v = x; o->zero = x ? x->zero & VL_NOREALS : 0; return o;
}
/* A lazy array sensitivity (VL_SENS, below) computed, an array boxed by reference (VL_FLATREF)
   boxed element by element; any other value as it is. Inline, one comparison: the runtime's AD
   operators call it on every value they look into. */
static V vl_dense_slow(V v);
static inline V vl_dense(V v) { return v->kind >= VL_SENS ? vl_dense_slow(v) : v; }
static int vl_truthy(V v) {
  while (v->kind == VL_BUNDLE || v->kind == VL_TAGGED) v = v->s[0].v;
  return !(v->kind == VL_BOOL && !v->s[0].b);
}

/* ---- printing: the evaluator's external form (vlad-eval/src/print.rs) */
typedef struct { char *p; size_t n, cap; } vl_buf;
static void vl_put(vl_buf *b, const char *s) {
  size_t k = strlen(s);
  if (b->n + k + 1 > b->cap) {
    b->cap = (b->n + k + 1) * 2;
    b->p = realloc(b->p, b->cap);
    if (!b->p) vl_die("vlad: out of memory\n", 70);
  }
  memcpy(b->p + b->n, s, k + 1);
  b->n += k;
}

/* Shortest round-trip digits, written as Rust's `{}` (plain) or `{:e}` (exponent) would:
   vlad-syntax/src/number.rs `format_real`. */
static void vl_format_real(double x, char *out) {
  if (isnan(x)) { strcpy(out, "+nan.0"); return; }
  if (isinf(x)) { strcpy(out, x > 0 ? "+inf.0" : "-inf.0"); return; }
  if (x == 0) { strcpy(out, signbit(x) ? "-0" : "0"); return; }
  char tmp[64];
  int prec;
  for (prec = 0; prec < 17; prec++) {
    snprintf(tmp, sizeof tmp, "%.*e", prec, x);
    if (strtod(tmp, 0) == x) break;
  }
  /* tmp is [-]d[.ddd]e[+-]xx */
  char digits[32];
  int nd = 0, neg = tmp[0] == '-';
  char *q = tmp + neg;
  for (; *q && *q != 'e'; q++)
    if (*q != '.') digits[nd++] = *q;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = 0;
  int e = atoi(q + 1);
  double l = floor(log10(fabs(x)));
  char *o = out;
  if (neg) *o++ = '-';
  if (l >= -5 && l < 21) {
    if (e >= nd - 1) {
      memcpy(o, digits, nd); o += nd;
      for (int i = 0; i < e - (nd - 1); i++) *o++ = '0';
    } else if (e >= 0) {
      memcpy(o, digits, e + 1); o += e + 1;
      *o++ = '.';
      memcpy(o, digits + e + 1, nd - e - 1); o += nd - e - 1;
    } else {
      *o++ = '0'; *o++ = '.';
      for (int i = 0; i < -e - 1; i++) *o++ = '0';
      memcpy(o, digits, nd); o += nd;
    }
    *o = 0;
  } else {
    *o++ = digits[0];
    if (nd > 1) { *o++ = '.'; memcpy(o, digits + 1, nd - 1); o += nd - 1; }
    sprintf(o, "e%d", e);
  }
}

static const char *vl_prim_names[];
static const char *vl_tag_names[] = {"forward", "perturbation", "sensitivity", "reverse"};
static void vl_fail_internal(const char *m);

static int vl_top(V v);
static unsigned vl_tags_push(unsigned t, unsigned tag);
static unsigned vl_tags_pop(unsigned t);
/* For printing (vlad-eval/src/ad.rs `split_forward_shallow`, `untag_shallow`). */
static V vl_split_shallow(V v, int tangent) {
  v = vl_dense(v);
  if (v->kind == VL_BUNDLE) return v->s[tangent].v;
  if (v->kind == VL_ARRAY && vl_top(v) == 0) {
    unsigned rest = vl_tags_pop(v->aux);
    V a = vl_boxed_array(v->s[0].b, tangent ? vl_tags_push(rest, 1) : rest);
    for (long i = 0; i < v->s[0].b; i++) a->s[1 + i].v = vl_split_shallow(v->s[1 + i].v, tangent);
    return a;
  }
  if (v->kind == VL_PAIR && vl_top(v) == 0) {
    unsigned rest = vl_tags_pop(v->aux);
    return vl_pair(tangent ? vl_tags_push(rest, 1) : rest, vl_split_shallow(v->s[0].v, tangent),
                   vl_split_shallow(v->s[1].v, tangent));
  }
  return v;
}
static V vl_untag_shallow(V v, unsigned tag) {
  v = vl_dense(v);
  if (v->kind == VL_TAGGED && v->aux == tag) return v->s[0].v;
  if (v->kind == VL_ARRAY && vl_top(v) == (int)tag) {
    V a = vl_boxed_array(v->s[0].b, vl_tags_pop(v->aux));
    for (long i = 0; i < v->s[0].b; i++) a->s[1 + i].v = vl_untag_shallow(v->s[1 + i].v, tag);
    return a;
  }
  if (v->kind == VL_PAIR && vl_top(v) == (int)tag)
    return vl_pair(vl_tags_pop(v->aux), vl_untag_shallow(v->s[0].v, tag), vl_untag_shallow(v->s[1].v, tag));
  return v;
}

static void vl_write(vl_buf *b, V v) {
  char num[64];
  v = vl_dense(v);
  if ((v->kind == VL_PAIR || v->kind == VL_ARRAY) && v->aux) {
    /* Tagged aggregates print as the tag applied to the untagged aggregate. */
    if (vl_top(v) == VL_FORWARD) {
      vl_put(b, "(forward "); vl_write(b, vl_split_shallow(v, 0)); vl_put(b, " ");
      vl_write(b, vl_split_shallow(v, 1)); vl_put(b, ")");
    } else {
      vl_put(b, "("); vl_put(b, vl_tag_names[v->aux & 3]); vl_put(b, " ");
      vl_write(b, vl_untag_shallow(v, v->aux & 3)); vl_put(b, ")");
    }
    return;
  }
  switch (v->kind) {
  case VL_NIL: vl_put(b, "()"); return;
  case VL_BOOL: vl_put(b, v->s[0].b ? "#t" : "#f"); return;
  case VL_REAL: vl_format_real(v->s[0].d, num); vl_put(b, num); return;
  case VL_PRIM: vl_put(b, "<procedure:"); vl_put(b, vl_prim_names[v->aux]); vl_put(b, ">"); return;
  case VL_CLOSURE: vl_put(b, "<procedure>"); return;
  case VL_ARRAY:
    vl_put(b, "#(");
    for (long i = 0; i < v->s[0].b; i++) {
      if (i) vl_put(b, " ");
      vl_write(b, v->s[1 + i].v);
    }
    vl_put(b, ")");
    return;
  case VL_BUNDLE:
    vl_put(b, "(forward "); vl_write(b, v->s[0].v); vl_put(b, " "); vl_write(b, v->s[1].v);
    vl_put(b, ")"); return;
  case VL_TAGGED:
    vl_put(b, "("); vl_put(b, vl_tag_names[v->aux]); vl_put(b, " "); vl_write(b, v->s[0].v);
    vl_put(b, ")"); return;
  case VL_PAIR:
    vl_put(b, "(");
    for (;;) {
      vl_write(b, v->s[0].v);
      V d = v->s[1].v;
      if (d->kind == VL_PAIR && !d->aux) { vl_put(b, " "); v = d; continue; }
      if (d->kind != VL_NIL) { vl_put(b, " . "); vl_write(b, d); }
      break;
    }
    vl_put(b, ")");
    return;
  }
}

/* Standard output could not be written (a full disk, `> /dev/full`): said as the evaluator
   says it (vlad-eval/src/io.rs, WriteFailure), status 1. A reader that went away (EPIPE,
   where SIGPIPE is ignored) ends the program quietly, as SIGPIPE would. Checked after each
   line the runtime prints, before an error message and at the end; the C library buffers, so
   a failure shows at a flush. */
static void vl_check_output(void) {
#ifdef VL_LIBRARY
  return; /* the host's standard output is the host's business: a library never exits */
#endif
  if (!ferror(stdout)) return;
  int e = errno;
  if (e == EPIPE) _exit(0);
  fprintf(stderr, "vlad: error: cannot write the output: %s\n", strerror(e));
  _exit(1);
}

/* A line known at compile time. */
static void vl_put_line(const char *s) {
  fputs(s, stdout);
  fputc('\n', stdout);
  vl_check_output();
}

static void vl_print_line(V v) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, "");
  vl_write(&b, v);
  fputs(b.p, stdout);
  fputc('\n', stdout);
  free(b.p);
  vl_check_output();
}

static double vl_write_real(double x) {
  char num[64];
  vl_format_real(x, num);
  fputs(num, stdout);
  fputc('\n', stdout);
  vl_check_output();
  return x;
}

static V vl_write_value(V v) { vl_print_line(v); return v; }

/* The evaluator's `describe` (vlad-eval/src/value.rs), for error messages. */
static void vl_describe(vl_buf *b, V v) {
  switch (v->kind) {
  case VL_NIL: case VL_BOOL: case VL_REAL: vl_write(b, v); return;
  case VL_PRIM: vl_put(b, "the primitive `"); vl_put(b, vl_prim_names[v->aux]); vl_put(b, "`"); return;
  case VL_CLOSURE: vl_put(b, "a procedure"); return;
  case VL_SENS: {
    char n[64];
    if (v->zero & VL_LAZY) snprintf(n, sizeof n, "a zero sensitivity");
    else snprintf(n, sizeof n, "a sensitivity array of length %ld", v->s[0].b);
    vl_put(b, n);
    return;
  }
  case VL_FLAT: /* only a library's argument made by vlad_array_f64 reaches here */
  case VL_ARRAY: case VL_FLATREF: {
    char n[64];
    if (v->aux && v->kind != VL_FLAT) snprintf(n, sizeof n, "a %s array of length %ld", vl_tag_names[v->aux & 3], v->s[0].b);
    else snprintf(n, sizeof n, "an array of length %ld", v->s[0].b);
    vl_put(b, n);
    return;
  }
  case VL_PAIR:
    if (!v->aux) { vl_put(b, "a pair"); return; }
    vl_put(b, "a "); vl_put(b, vl_tag_names[v->aux & 3]); vl_put(b, " pair"); return;
  default: {
    vl_buf t = {0, 0, 0};
    vl_put(&t, "");
    vl_write(&t, v);
    if (t.n > 60) {
      vl_put(b, "a "); vl_put(b, vl_tag_names[v->kind == VL_BUNDLE ? 0 : v->aux]); vl_put(b, " value");
    } else vl_put(b, t.p);
    free(t.p);
  }
  }
}

/* ---- run-time errors: each site's rendered position (prefix) and source excerpt (suffix). */
/* An error site: the text before the message, and the excerpt under it (the source line, held
   once in vl_lines however many sites it has, and a caret line under the span), rendered as the
   evaluator's diagnostics are; line < 0: no excerpt. */
typedef struct { const char *prefix; int line, text, col, width; } vl_site_t;
static const vl_site_t vl_sites[];
static const char *vl_lines[];

VL_SHARED int vl_site; /* the most recent call site in the user's program */

/* The excerpt of an error site, as the evaluator's diagnostics write it: the source line with
   its number, and a caret line under the span. */
static void vl_excerpt(vl_buf *b, const vl_site_t *s) {
  if (s->line < 0) return;
  char num[32];
  snprintf(num, sizeof num, "%d", s->line);
  size_t gutter = strlen(num);
  for (size_t i = 0; i < gutter; i++) vl_put(b, " ");
  vl_put(b, " |\n");
  vl_put(b, num);
  vl_put(b, " | ");
  vl_put(b, vl_lines[s->text]);
  vl_put(b, "\n");
  for (size_t i = 0; i < gutter; i++) vl_put(b, " ");
  vl_put(b, " | ");
  for (int i = 1; i < s->col; i++) vl_put(b, " ");
  for (int i = 0; i < s->width; i++) vl_put(b, "^");
  vl_put(b, "\n");
}
static void vl_fail_at(int site, const char *message) {
  fflush(stdout);
  vl_check_output();
  /* An error at a library line that says what its errors mean (site -2 - i: entry i's prefix
     is that message): reported with it, at the user's call site. */
  if (site < -1) {
    message = vl_sites[-2 - site].prefix;
    site = -1;
  }
  if (site < 0) site = vl_site;
  vl_buf b = {0, 0, 0};
  vl_put(&b, vl_sites[site].prefix);
  vl_put(&b, message);
  vl_put(&b, "\n");
  vl_excerpt(&b, &vl_sites[site]);
  vl_die(b.p, 1);
}
/* A diagnostic rendered at compile time (an expansion error of a later top-level form). */
static void vl_exit_diagnostic(const char *d) {
  fflush(stdout);
  vl_check_output();
  vl_die(d, 1);
}
static void vl_fail_internal(const char *m) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, "vlad: internal error in compiled code: ");
  vl_put(&b, m);
  vl_put(&b, "\n");
  vl_die(b.p, 70);
}
/* An AD map (by kind) met a boxed closure of a code it was not compiled for. */
static void vl_fail_no_map(long kind, V v) {
  char m[120];
  snprintf(m, sizeof m, "an AD operator (map %ld) met a boxed procedure of code %u it was not compiled for", kind, v->aux);
  vl_fail_internal(m);
}
/* ---- the explicit stack of deep recursion (crates/vlad-ir/src/passes/machines.rs). A function
   of a recursive component with non-tail calls inside it runs natively until the C stack is
   deeper than a budget (VL_DEEP, tested at each call between members; VLAD_NATIVE_DEPTH_BYTES,
   1 MiB by default); beyond it the call goes to the component's machine, whose frames (a
   member's parameters and live locals, a resume point, where its result goes, the caller's
   frame) are pushed here, on memory reserved once and mapped by the kernel as it is used.
   Frames are popped in LIFO order, machines nested in machines included; the pages stay
   mapped, as the arena's chunks do. */
/* A machine's frame header: the member, its resume point, and the distance back to the frame
   below (0 at the bottom, which returns to the machine's caller). Frames are contiguous: a
   frame is on top whenever it pushes another. */
typedef struct vl_frame { unsigned short fn, pc; unsigned back; } vl_frame;
VL_SHARED char *vl_xs_top;
VL_SHARED char *vl_xs_end;
/* The explicit stack's base and the highest its top has been (for VLAD_ARENA_STATS). */
VL_SHARED char *vl_xs_base;
VL_SHARED char *vl_xs_high;
VL_SHARED char *vl_native_floor;
#if defined(__GNUC__)
/* The machines and their entries: rarely run, so optimised lightly and never inlined into, which
   keeps saddle-RF's compile at 1.45 s of cc instead of 1.70 (its native run takes about 9 %
   longer with them than without: functions the native code called once are now called from the
   machine too, and GCC no longer inlines them whatever their size). */
#define VL_COLD __attribute__((cold, optimize("O1")))
#define VL_DEEP() __builtin_expect((char *)__builtin_frame_address(0) < vl_native_floor, 0)
#else
#define VL_COLD
#define VL_DEEP() 0
#endif
static void vl_xs_grow(size_t n) {
  if (!vl_xs_top) {
    size_t sizes[] = {(size_t)1 << 38, (size_t)1 << 35, (size_t)1 << 32, (size_t)1 << 28};
    for (int i = 0; i < 4; i++) {
      char *p = mmap(0, sizes[i], PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (p != MAP_FAILED) {
        vl_xs_top = vl_xs_base = vl_xs_high = p;
        vl_xs_end = p + sizes[i];
        break;
      }
    }
  }
  if (!vl_xs_top || (size_t)(vl_xs_end - vl_xs_top) < n) {
    vl_die("vlad: error: the compiled program ran out of memory for the frames of its "
           "recursion\n", 1);
  }
}
static inline void *vl_push(size_t n) {
  n = (n + 7) & ~(size_t)7;
  if ((size_t)(vl_xs_end - vl_xs_top) < n) vl_xs_grow(n);
  char *p = vl_xs_top;
  vl_xs_top = p + n;
  if (vl_xs_top > vl_xs_high) vl_xs_high = vl_xs_top;
  return p;
}
/* "<head><description of v><tail>" at a site */
static void vl_fail_value(int site, const char *head, V v, const char *tail) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, head);
  vl_describe(&b, v);
  vl_put(&b, tail);
  vl_fail_at(site, b.p);
}
static void vl_fail_mismatch(int site, V c, V v) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, "pattern mismatch: expected ");
  vl_write(&b, c);
  vl_put(&b, ", got ");
  vl_describe(&b, v);
  vl_fail_at(site, b.p);
}
/* `+` and the other two-real primitives on operands that are not both reals. */
static void vl_fail_two(int site, const char *prim, V a, V b) {
  vl_buf m = {0, 0, 0};
  vl_put(&m, "`"); vl_put(&m, prim); vl_put(&m, "` takes two reals, got ");
  vl_describe(&m, a); vl_put(&m, " and "); vl_describe(&m, b);
  vl_fail_at(site, m.p);
}
/* The errors of `build`, `ifold` and `get` (vlad-eval/src/array.rs). */
static VL_COLD void vl_check_count_fail(int site, const char *op, const char *what, double r) {
  char num[64], m[200];
  vl_format_real(r, num);
  if (vl_is_natural(r)) snprintf(m, sizeof m, "%s: the %s %s is too large", op, what, num);
  else snprintf(m, sizeof m, "%s: the %s must be a non-negative integer, got %s", op, what, num);
  vl_fail_at(site, m);
}
/* A count: a natural number below 2^53 (vl_is_natural's first case, which needs no floor). */
static inline int vl_count_ok(double r) {
  return r >= 0.0 && r < 9007199254740992.0 && (double)(long)r == r;
}
/* Inline, with the message apart: a loop's count is checked each time the loop starts, and an
   inner loop starts once per step of the outer one. */
static inline __attribute__((always_inline)) void vl_check_count(int site, const char *op, const char *what, double r) {
  if (__builtin_expect(vl_count_ok(r), 1)) return;
  vl_check_count_fail(site, op, what, r);
}
/* vl_check_count of a count that is a forward value: the message describes it whole. */
static void vl_count_fail(int site, const char *op, const char *what, double r, V v) {
  vl_buf m = {0, 0, 0};
  vl_put(&m, op);
  vl_put(&m, ": the ");
  vl_put(&m, what);
  if (vl_is_natural(r)) { vl_put(&m, " "); vl_describe(&m, v); vl_put(&m, " is too large"); }
  else { vl_put(&m, " must be a non-negative integer, got "); vl_describe(&m, v); }
  vl_fail_at(site, m.p);
}
/* A count that is a boxed value: its innermost primal (through bundles and tagged values, as
   the evaluator's scalar_primal), checked, the errors describing the value whole. */
static double vl_boxed_count(int site, const char *op, const char *what, V v) {
  V x = v;
  while (x->kind == VL_BUNDLE || x->kind == VL_TAGGED) x = x->s[0].v;
  double r = x->kind == VL_REAL ? x->s[0].d : NAN;
  if (!vl_count_ok(r)) vl_count_fail(site, op, what, r, v);
  return r;
}
static void vl_index_fail(int site, double r, long n) {
  char num[64], m[200];
  vl_format_real(r, num);
  if (!vl_is_natural(r))
    snprintf(m, sizeof m, "get: the index must be a non-negative integer, got %s", num);
  else
    snprintf(m, sizeof m, "get: index %s is out of range for an array of length %ld", num, n);
  vl_fail_at(site, m);
}
static inline long vl_index(int site, double r, long n) {
  if (vl_is_natural(r) && r < (double)n) return (long)r;
  vl_index_fail(site, r, n);
  return 0;
}
/* vl_index of an index that is an integer already (a loop's counter, a constant). */
static inline long vl_index_i(int site, long i, long n) {
  if ((unsigned long)i < (unsigned long)n) return i;
  vl_index_fail(site, (double)i, n);
  return 0;
}
/* `get` and `array-length` of a boxed value (a VL_ARRAY, else the evaluator's error). */
static void vl_not_array(int site, const char *op, V a) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, op); vl_put(&b, ": expected an array, got ");
  vl_describe(&b, a);
  vl_fail_at(site, b.p);
}
/* The boxed value `get` reads: a VL_ARRAY or VL_FLATREF (a lazy sensitivity made dense), else
   the evaluator's error. */
static V vl_get_array(int site, V a) {
  if (a->kind == VL_SENS) a = vl_dense(a);
  if (a->kind != VL_ARRAY && a->kind != VL_FLATREF) vl_not_array(site, "get", a);
  return a;
}
static V vl_boxed_get(int site, V a, double r) {
  a = vl_get_array(site, a);
  return vl_elem(a, vl_index(site, r, a->s[0].b));
}
/* A boxed index of `get`: its real, else the evaluator's error. */
static double vl_index_real(int site, V i) {
  if (i->kind != VL_REAL) vl_fail_value(site, "get: the index must be a non-negative integer, got ", i, "");
  return i->s[0].d;
}
/* `get` of a boxed value at a boxed index: the array checked first, as the evaluator does. */
static V vl_boxed_get_v(int site, V a, V i) {
  a = vl_get_array(site, a);
  return vl_elem(a, vl_index(site, vl_index_real(site, i), a->s[0].b));
}
/* An exported procedure's argument, checked to be a flat array of elements of k slots (made
   by vlad_array_f64, k = 1). */
/* The arguments of an exported entry point `name` (vlad compile --lib): the caller's mistakes
   are reported without a position in the program. */
static void vl_arg_fail(vl_buf *b) {
  vl_buf m = {0, 0, 0};
  vl_put(&m, "vlad: error: ");
  vl_put(&m, b->p);
  vl_put(&m, "\n");
  vl_die(m.p, 1);
}
static void vl_arg_null(V v, const char *name) {
  if (v) return;
  vl_buf b = {0, 0, 0};
  vl_put(&b, name); vl_put(&b, ": a null vlad_value (the result of a call that failed?)");
  vl_arg_fail(&b);
}
static double vl_arg_real(V v, const char *name) {
  vl_arg_null(v, name);
  if (v->kind == VL_REAL) return v->s[0].d;
  vl_buf b = {0, 0, 0};
  vl_put(&b, name); vl_put(&b, ": expected a real, got ");
  vl_describe(&b, v);
  vl_arg_fail(&b);
  return 0;
}
/* An argument that is an array of reals (depth 1) or of such arrays (depth d: of arrays of
   depth d - 1), as the flat array of that layout: one made by vlad_array_f64 as it is, a boxed
   one (vlad_array, or an array a call returned) converted, its elements checked. */
/* An array of reals vlad_array_f64 made, boxed (as every element of a boxed array is). */
static V vl_arg_boxed(V x) {
  if (!x || x->kind != VL_FLAT) return x;
  V e = vl_boxed_array(x->s[0].b, 0);
  for (long j = 0; j < x->s[0].b; j++) e->s[1 + j].v = vl_real(x->s[1 + j].d);
  return e;
}
static V vl_as_flat(V v, long depth, const char *name) {
  vl_arg_null(v, name);
  if (depth == 1 && v->kind == VL_FLAT && v->aux == VL_LAYOUT_REALS) return v;
  v = vl_dense(vl_arg_boxed(v));
  if (v->kind != VL_ARRAY && v->kind != VL_FLATREF) {
    vl_buf b = {0, 0, 0};
    vl_put(&b, name); vl_put(&b, ": expected an array, got ");
    vl_describe(&b, v);
    vl_arg_fail(&b);
  }
  long n = v->s[0].b;
  V a = depth == 1 ? vl_flat(n, 1, VL_LAYOUT_REALS) : vl_flat_zeroed(n, 1, VL_LAYOUT_BOXED);
  for (long i = 0; i < n; i++) {
    V x = vl_elem(v, i);
    if (depth == 1) a->s[1 + i].d = vl_arg_real(x, name);
    else a->s[1 + i].v = vl_as_flat(x, depth - 1, name);
  }
  return a;
}
static double vl_boxed_length(int site, V a) {
  if (a->kind != VL_ARRAY && a->kind != VL_SENS && a->kind != VL_FLATREF) vl_not_array(site, "array-length", a);
  return (double)a->s[0].b;
}
static double vl_to_real(V v, int site, const char *prim) {
  if (v->kind == VL_REAL) return v->s[0].d;
  vl_buf b = {0, 0, 0};
  vl_put(&b, "`"); vl_put(&b, prim); vl_put(&b, "` takes a real, got ");
  vl_describe(&b, v);
  vl_fail_at(site, b.p);
  return 0;
}
static V vl_car(V v, unsigned tags, int site) {
  if (v->kind != VL_PAIR || v->aux != tags) {
    vl_buf b = {0, 0, 0};
    vl_put(&b, "pattern mismatch: expected ");
    if (tags) { vl_put(&b, "a "); vl_put(&b, vl_tag_names[tags & 3]); vl_put(&b, " pair"); }
    else vl_put(&b, "a pair");
    vl_put(&b, ", got ");
    vl_describe(&b, v);
    vl_fail_at(site, b.p);
  }
  return v->s[0].v;
}
/* The cdr of a pair vl_car checked. */
static inline V vl_cdr(V v) { return v->s[1].v; }
/* Constant patterns and predicates on boxed values. */
static inline long vl_real_is(V v, double x) { return v->kind == VL_REAL && v->s[0].d == x; }
static inline long vl_bool_is(V v, long b) { return v->kind == VL_BOOL && v->s[0].b == b; }
static inline long vl_is_plain_pair(V v) { return v->kind == VL_PAIR && v->aux == 0; }

/* ---- the AD operators on boxed data (vlad-eval/src/ad.rs); boxed procedures are mapped by
   the compiled code, never here. */
static unsigned vl_tags_push(unsigned t, unsigned tag) {
  unsigned d = t >> 28;
  if (d >= 14) vl_fail_internal("AD tags nested too deep");
  return ((d + 1) << 28) | ((t & 0x0fffffffu) << 2) | tag;
}
static unsigned vl_tags_pop(unsigned t) {
  unsigned d = t >> 28;
  return d ? ((d - 1) << 28) | ((t & 0x0fffffffu) >> 2) : t;
}
/* The outermost tag of a value, or -1. */
static int vl_top(V v) {
  switch (v->kind) {
  case VL_PAIR: case VL_ARRAY: case VL_SENS: case VL_FLATREF: return v->aux >> 28 ? (int)(v->aux & 3) : -1;
  case VL_BUNDLE: return VL_FORWARD;
  case VL_TAGGED: return (int)v->aux;
  default: return -1;
  }
}
static void vl_no_procedure(V v) {
  if (v->kind == VL_CLOSURE || v->kind == VL_PRIM)
    vl_fail_internal("an AD operator met a boxed procedure");
}
/* The AD maps of boxed closures, generated per code (the compiled program defines them):
   kind 0-3 push a tag, 4-7 remove one, 8/9 primal/tangent, 10 the zero sensitivity, 11 the
   shallow primal; and `bundle` of a closure and its perturbation. */
VL_FUN V vl_map_closure(long kind, V v);
VL_FUN V vl_map_bundle(V p, V t);
static void vl_ad_fail(const char *op, const char *what, V v) {
  vl_buf b = {0, 0, 0};
  vl_put(&b, op); vl_put(&b, ": expected "); vl_put(&b, what); vl_put(&b, ", got ");
  vl_describe(&b, v);
  vl_fail_at(-1, b.p);
}
/* Returns a boxed array of SRC's length with AD tags TAGS whose element i_ is ELEM, an
   expression of SRC's element x_ (and of i_). */
#define VL_ARRAY_MAP(SRC, TAGS, ELEM)                                       \
  do {                                                                      \
    V o_ = vl_boxed_array((SRC)->s[0].b, (TAGS));                           \
    for (long i_ = 0; i_ < (SRC)->s[0].b; i_++) {                           \
      V x_ = (SRC)->s[1 + i_].v;                                            \
      (void)x_;                                                             \
      o_->s[1 + i_].v = (ELEM);                                             \
    }                                                                       \
    return o_;                                                              \
  } while (0)
/* The AD operators below walk a pair's car before its cdr, as the evaluator does, so that of two
   errors the compiled program reports the one the evaluator reports: the car's result is taken
   first (`V a = ...`), since C leaves the order of a call's arguments to the compiler. */
static V vl_ad_tag(V v, unsigned tag) {
  v = vl_dense(v);
  if (v->kind == VL_CLOSURE) return vl_map_closure((int)tag, v);
  vl_no_procedure(v);
  if (v->kind == VL_ARRAY) VL_ARRAY_MAP(v, vl_tags_push(v->aux, tag), vl_ad_tag(x_, tag));
  if (v->kind == VL_PAIR) {
    V a = vl_ad_tag(v->s[0].v, tag);
    return vl_pair(vl_tags_push(v->aux, tag), a, vl_ad_tag(v->s[1].v, tag));
  }
  return vl_tagged(tag, v);
}
static V vl_ad_untag(V v, unsigned tag, const char *op) {
  v = vl_dense(v);
  if (v->kind == VL_CLOSURE) return vl_map_closure(VL_MAP_UNTAG + (int)tag, v);
  vl_no_procedure(v);
  if (v->kind == VL_TAGGED && v->aux == tag) return v->s[0].v;
  if (v->kind == VL_PAIR && vl_top(v) == (int)tag) {
    V a = vl_ad_untag(v->s[0].v, tag, op);
    return vl_pair(vl_tags_pop(v->aux), a, vl_ad_untag(v->s[1].v, tag, op));
  }
  if (v->kind == VL_ARRAY && vl_top(v) == (int)tag)
    VL_ARRAY_MAP(v, vl_tags_pop(v->aux), vl_ad_untag(x_, tag, op));
  vl_ad_fail(op, tag == VL_PERTURBATION ? "a perturbation value" : tag == VL_SENSITIVITY ? "a sensitivity value" : "a reverse value", v);
  return v;
}
static V vl_ad_split(V v, int tangent) {
  v = vl_dense(v);
  if (v->kind == VL_CLOSURE) return vl_map_closure(tangent ? VL_MAP_TANGENT : VL_MAP_PRIMAL, v);
  vl_no_procedure(v);
  if (v->kind == VL_BUNDLE) return v->s[tangent].v;
  if (v->kind == VL_PAIR && vl_top(v) == VL_FORWARD) {
    unsigned rest = vl_tags_pop(v->aux);
    V a = vl_ad_split(v->s[0].v, tangent);
    return vl_pair(tangent ? vl_tags_push(rest, VL_PERTURBATION) : rest, a, vl_ad_split(v->s[1].v, tangent));
  }
  if (v->kind == VL_ARRAY && vl_top(v) == VL_FORWARD) {
    unsigned rest = vl_tags_pop(v->aux);
    VL_ARRAY_MAP(v, tangent ? vl_tags_push(rest, VL_PERTURBATION) : rest, vl_ad_split(x_, tangent));
  }
  vl_ad_fail(tangent ? "tangent" : "primal", "a forward value", v);
  return v;
}
static void vl_shape_fail(const char *op, V a, V b) {
  vl_buf m = {0, 0, 0};
  vl_put(&m, op); vl_put(&m, ": the values do not have the same shape: ");
  vl_describe(&m, a); vl_put(&m, " and "); vl_describe(&m, b);
  vl_fail_at(-1, m.p);
}
static void vl_length_fail(const char *op, long a, long b) {
  char m[160];
  snprintf(m, sizeof m, "%s: the arrays have different lengths (%ld and %ld)", op, a, b);
  vl_fail_at(-1, m);
}
static int vl_scalar(V v) {
  return v->kind != VL_PAIR && v->kind != VL_CLOSURE && v->kind != VL_PRIM && v->kind != VL_ARRAY;
}
/* Can t (untagged) be the tangent of the scalar p (the evaluator's same_scalar_shape)? Reals
   pair with reals; booleans with the same boolean; bundles and tagged values part by part. */
static int vl_same_scalar_shape(V p, V t) {
  if (p->kind != t->kind) return 0;
  switch (p->kind) {
  case VL_BOOL: return p->s[0].b == t->s[0].b;
  case VL_BUNDLE: return vl_same_scalar_shape(p->s[0].v, t->s[0].v) && vl_same_scalar_shape(p->s[1].v, t->s[1].v);
  case VL_TAGGED: return p->aux == t->aux && vl_same_scalar_shape(p->s[0].v, t->s[0].v);
  default: return 1;
  }
}
static V vl_ad_bundle(V p, V t) {
  p = vl_dense(p);
  t = vl_dense(t);
  if (p->kind == VL_CLOSURE) return vl_map_bundle(p, t);
  /* A primitive and its own perturbation bundle into its forward version, which compiled code
     makes; the runtime never meets that case. Any other procedure is a shape error. */
  if (p->kind == VL_PRIM && t->kind == VL_TAGGED && t->aux == VL_PERTURBATION &&
      t->s[0].v->kind == VL_PRIM && t->s[0].v->aux == p->aux)
    vl_no_procedure(p);
  if (vl_scalar(p) && t->kind == VL_TAGGED && t->aux == VL_PERTURBATION && vl_same_scalar_shape(p, t->s[0].v))
    return vl_bundle(p, t);
  if (p->kind == VL_PAIR && t->kind == VL_PAIR && t->aux == vl_tags_push(p->aux, VL_PERTURBATION)) {
    V a = vl_ad_bundle(p->s[0].v, t->s[0].v);
    return vl_pair(vl_tags_push(p->aux, VL_FORWARD), a, vl_ad_bundle(p->s[1].v, t->s[1].v));
  }
  if (p->kind == VL_ARRAY && t->kind == VL_ARRAY && t->aux == vl_tags_push(p->aux, VL_PERTURBATION)) {
    if (p->s[0].b != t->s[0].b) vl_length_fail("bundle", p->s[0].b, t->s[0].b);
    VL_ARRAY_MAP(p, vl_tags_push(p->aux, VL_FORWARD), vl_ad_bundle(x_, t->s[1 + i_].v));
  }
  vl_shape_fail("bundle", p, t);
  return p;
}
VL_SHARED const char *vl_code_slots[];
/* v, a zero sensitivity computed one level (vl_zero_sens, or a lazy zero the compiled code
   boxes), as the lazy zero it stands for: a fresh copy of its top object, flagged `zero`, so
   that vl_ad_plus returns the other operand as it is, without a walk or an allocation. The
   evaluator's plus does exactly this with its lazy zeros (no arithmetic, so no -0.0 + 0.0,
   and no shape check), so the results are the same. Shared objects (constants, nil) are
   never flagged: they are copied first, or returned as they are. */
static V vl_as_zero(V v) {
  int n;
  switch (v->kind) {
  case VL_REAL: case VL_TAGGED: n = 1; break;
  case VL_PAIR: case VL_BUNDLE: n = 2; break;
  case VL_ARRAY: n = 1 + (int)v->s[0].b; break;
  case VL_FLATREF: n = 3; break;
  case VL_CLOSURE:
    if (!vl_code_slots[v->aux]) return v;
    n = (int)strlen(vl_code_slots[v->aux]);
    break;
  default: return v;
  }
  V o = vl_obj(v->kind, v->aux, n);
  memcpy(o->s, v->s, (size_t)n * sizeof(vl_slot));
  o->zero = VL_LAZY | (v->zero & VL_NOREALS);
  return o;
}
static V vl_sens_sum(V a, V b);
static V vl_ad_plus_slow(V a, V b);
static inline V vl_ad_plus(V a, V b) {
  /* A lazy zero is the identity of plus, as in the evaluator: what keeps reverse mode linear. */
  if (a->zero & VL_LAZY) return b;
  if (b->zero & VL_LAZY) return a;
  /* An object with no reals added to itself is itself: nothing to add, no shapes to compare.
     The environments of closures hold many such (the sensitivities of the primitives and
     empty lists they close over, tagged), shared, and reverse mode adds them up at every step. */
  if (a == b && (a->zero & VL_NOREALS)) return a;
  return vl_ad_plus_slow(a, b);
}
/* The sums of reals, and of pairs, tagged values and bundles of one shape: what reverse mode
   through boxed values adds at every step, kept apart from the rest (vl_ad_plus_other) so that
   it is a small function. A pair, tagged value or bundle whose parts add to a's own parts
   (parts without reals, as the tagged empty lists of closure sensitivities, or the other
   side's lazy zeros) is a itself: values are immutable, so the sum need not be a new object.
   The car is added first, as the evaluator adds it (the first shape error is the one it
   reports). */
static V vl_ad_plus_other(V a, V b);
static V vl_ad_plus_slow(V a, V b) {
  if (a->kind == b->kind) switch (a->kind) {
    case VL_REAL: return vl_real(a->s[0].d + b->s[0].d);
    case VL_NIL: return a;
    case VL_TAGGED:
      if (a->aux == b->aux) {
        V x = vl_ad_plus(a->s[0].v, b->s[0].v);
        return x == a->s[0].v ? a : vl_tagged(a->aux, x);
      }
      break;
    case VL_PAIR:
      if (a->aux == b->aux) {
        V x = vl_ad_plus(a->s[0].v, b->s[0].v);
        V y = vl_ad_plus(a->s[1].v, b->s[1].v);
        return x == a->s[0].v && y == a->s[1].v ? a : vl_pair(a->aux, x, y);
      }
      break;
    case VL_BUNDLE: {
      V p = vl_ad_plus(a->s[0].v, b->s[0].v);
      V t = vl_ad_plus(a->s[1].v, b->s[1].v);
      return p == a->s[0].v && t == a->s[1].v ? a : vl_bundle(p, t);
    }
    default: break;
    }
  return vl_ad_plus_other(a, b);
}
static __attribute__((noinline)) V vl_ad_plus_other(V a, V b) {
  if (a->kind >= VL_SENS || b->kind >= VL_SENS) {
    if (a->kind == VL_SENS || b->kind == VL_SENS) return vl_sens_sum(a, b);
    a = vl_dense(a);
    b = vl_dense(b);
    if (a->kind < VL_SENS && b->kind < VL_SENS) return vl_ad_plus_slow(a, b);
  }
  if (a->kind == VL_CLOSURE && b->kind == VL_CLOSURE && a->aux == b->aux && vl_code_slots[a->aux]) {
    /* Closures of one code: their environments added slot by slot (a itself where no slot is
       a real and every pointer slot adds to a's own, as for pairs). */
    const char *k = vl_code_slots[a->aux];
    int n = (int)strlen(k), same = 1;
    V o = vl_obj(VL_CLOSURE, a->aux, n);
    for (int i = 0; i < n; i++) {
      if (k[i] == 'd') {
        o->s[i].d = a->s[i].d + b->s[i].d;
        same = 0;
      } else if (k[i] == 'b') {
        o->s[i].b = a->s[i].b;
      } else {
        o->s[i].v = vl_ad_plus(a->s[i].v, b->s[i].v);
        same &= o->s[i].v == a->s[i].v;
      }
    }
    return same ? a : o;
  }
  /* Closures of one code whose environments the runtime cannot see: compiled code adds them. */
  if (a->kind == VL_CLOSURE && b->kind == VL_CLOSURE && a->aux == b->aux) vl_no_procedure(a);
  if (a->kind == VL_PRIM && b->kind == VL_PRIM && a->aux == b->aux) return a;
  if (a->kind == VL_BOOL && b->kind == VL_BOOL && a->s[0].b == b->s[0].b) return a;
  if (a->kind == VL_ARRAY && b->kind == VL_ARRAY && a->aux == b->aux) {
    if (a->s[0].b != b->s[0].b) vl_length_fail("plus", a->s[0].b, b->s[0].b);
    VL_ARRAY_MAP(a, a->aux, vl_ad_plus(x_, b->s[1 + i_].v));
  }
  vl_shape_fail("plus", a, b);
  return a;
}
/* The zero of a flat array (sensitivity as vl_ad_zero's), slot by slot as its layout says:
   reals 0, booleans and integers as they are, pointers mapped (a pointer slot may be empty).
   Flat arrays reach the runtime's AD operators in the environment slots of a boxed closure (a
   closure chosen at run time, and the data it captured). */
static V vl_ad_zero(V v, int sensitivity);
static V vl_ad_zero_flat(V a, int sensitivity) {
  const char *k = vl_layouts[a->aux];
  size_t w = strlen(k);
  long n = a->s[0].b;
  V o = vl_flat(n, (unsigned)w, a->aux);
  for (long e = 0; e < n; e++)
    for (size_t j = 0; j < w; j++) {
      size_t s = 1 + (size_t)e * w + j;
      if (k[j] == 'd') o->s[s].d = 0.0;
      else if (k[j] == 'b') o->s[s].b = a->s[s].b;
      else o->s[s].v = a->s[s].v ? vl_ad_zero(a->s[s].v, sensitivity) : NULL;
    }
  return o;
}
/* zero (sensitivity == 0) or the zero sensitivity before its tag (sensitivity == 1). */
static V vl_ad_zero(V v, int sensitivity) {
  v = vl_dense(v);
  if (!sensitivity && v->kind == VL_CLOSURE && vl_code_slots[v->aux]) {
    const char *k = vl_code_slots[v->aux];
    int n = (int)strlen(k);
    V o = vl_obj(VL_CLOSURE, v->aux, n);
    for (int i = 0; i < n; i++) {
      if (k[i] == 'd') o->s[i].d = 0.0;
      else if (k[i] == 'b') o->s[i].b = v->s[i].b;
      else o->s[i].v = vl_ad_zero(v->s[i].v, 0);
    }
    return o;
  }
  if (!sensitivity && v->kind == VL_PRIM) return v;
  if (sensitivity && v->kind == VL_CLOSURE) return vl_map_closure(VL_MAP_SZERO, v);
  vl_no_procedure(v);
  switch (v->kind) {
  case VL_REAL: return vl_real(0.0);
  case VL_PAIR: {
    V a = vl_ad_zero(v->s[0].v, sensitivity);
    return vl_pair(v->aux, a, vl_ad_zero(v->s[1].v, sensitivity));
  }
  case VL_BUNDLE: {
    V a = vl_ad_zero(v->s[0].v, sensitivity);
    return vl_bundle(a, vl_ad_zero(v->s[1].v, sensitivity));
  }
  case VL_TAGGED: return vl_tagged(v->aux, vl_ad_zero(v->s[0].v, sensitivity));
  case VL_ARRAY: VL_ARRAY_MAP(v, v->aux, vl_ad_zero(x_, sensitivity));
  case VL_FLAT: return vl_ad_zero_flat(v, sensitivity);
  default: return v;
  }
}
/* The evaluator's `equal_data` (constant patterns). */
static int vl_equal_data(V a, V b) {
  a = vl_dense(a);
  b = vl_dense(b);
  if (a == b && (a->zero & VL_NOREALS)) return 1;
  /* Tagged values (a tagged empty list, the pattern of a closure sensitivity's end) without a
     call per tag. */
  while (a->kind == VL_TAGGED && b->kind == VL_TAGGED) {
    if (a->aux != b->aux) return 0;
    a = vl_dense(a->s[0].v);
    b = vl_dense(b->s[0].v);
  }
  if (a->kind != b->kind) return 0;
  switch (a->kind) {
  case VL_NIL: return 1;
  case VL_BOOL: return a->s[0].b == b->s[0].b;
  case VL_REAL: return a->s[0].d == b->s[0].d;
  case VL_PAIR: return a->aux == b->aux && vl_equal_data(a->s[0].v, b->s[0].v) && vl_equal_data(a->s[1].v, b->s[1].v);
  case VL_BUNDLE: return vl_equal_data(a->s[0].v, b->s[0].v) && vl_equal_data(a->s[1].v, b->s[1].v);
  case VL_TAGGED: return a->aux == b->aux && vl_equal_data(a->s[0].v, b->s[0].v);
  case VL_ARRAY:
    if (a->aux != b->aux || a->s[0].b != b->s[0].b) return 0;
    for (long i = 0; i < a->s[0].b; i++)
      if (!vl_equal_data(a->s[1 + i].v, b->s[1 + i].v)) return 0;
    return 1;
  default: return 0;
  }
}
/* The zero sensitivity of a reverse value, computed in full (the evaluator's lazy zero,
   forced all the way down): closures by their generated maps (map 14). */
static V vl_zero_sens1(V of);
static V vl_zero_sens(V of) { return vl_as_zero(vl_zero_sens1(of)); }
static V vl_zero_sens1(V of) {
  of = vl_dense(of);
  if (of->kind == VL_CLOSURE) return vl_map_closure(VL_MAP_ZERO_SENS, of);
  if (of->kind == VL_PAIR && vl_top(of) == VL_REVERSE) {
    V a = vl_zero_sens(of->s[0].v);
    return vl_pair(vl_tags_push(vl_tags_pop(of->aux), VL_SENSITIVITY), a, vl_zero_sens(of->s[1].v));
  }
  if (of->kind == VL_ARRAY && vl_top(of) == VL_REVERSE)
    VL_ARRAY_MAP(of, vl_tags_push(vl_tags_pop(of->aux), VL_SENSITIVITY), vl_zero_sens(x_));
  return vl_ad_tag(vl_ad_zero(vl_ad_untag(of, VL_REVERSE, "zero"), 1), VL_SENSITIVITY);
}
static V vl_ad_shallow_primal(V v) {
  v = vl_dense(v);
  if (v->kind == VL_CLOSURE) return vl_map_closure(VL_MAP_SHALLOW, v);
  vl_no_procedure(v);
  switch (v->kind) {
  case VL_BUNDLE: return v->s[0].v;
  case VL_TAGGED: return v->s[0].v;
  case VL_PAIR:
    if (v->aux >> 28) return vl_pair(vl_tags_pop(v->aux), v->s[0].v, v->s[1].v);
    break;
  case VL_ARRAY:
    if (v->aux >> 28) VL_ARRAY_MAP(v, vl_tags_pop(v->aux), x_);
    break;
  }
  vl_ad_fail("primal", "a forward or reverse value", v);
  return v;
}

/* ---- lazy array sensitivities (vlad-eval/src/array.rs, SensNode). The sensitivity that the
   backpropagator of a reverse-mode `get` returns is one-hot: the sensitivity of the element read
   at its index, zero elsewhere. Built as an array, it would cost O(n) per `get`, so a loop
   reading every element would be quadratic. Instead it is a VL_SENS node, O(1): `plus` of two
   sensitivities of one array, when one is lazy, is a sum node (O(1)), and the dense array is
   computed when something looks inside (vl_dense: `get`, the AD operators, printing), in
   O(n + the number of contributions), adding them in the evaluator's order with its `plus` (a
   lazy zero element is the identity, so signs of zero agree). Slots: 0 the length, 1 the node
   (0 one-hot, 1 sum, 2 the zero of the array), then
     one-hot: 2 the index, 3 the element's sensitivity;
     sum: 2 and 3 the two operands (a VL_SENS or a VL_ARRAY each);
     one-hot and zero: 4 the reverse array it is the sensitivity of (boxed, or NULL), 5 the
       zero sensitivity shared by all its elements (where 4 is NULL: elements of one flat layout
       with no boxed parts, no unknown booleans and no arrays, whose zeros are all alike).
   A zero node is flagged `zero`, so plus returns the other operand, as for any lazy zero.
   The dense array is not cached in the node: it would be allocated above an arena mark that
   the node may be below (see vl_mark). A node is looked inside about once (its consumer is the
   next backpropagator, which untags or converts it), so this costs nothing in practice. */
enum { VL_SENS_ONEHOT, VL_SENS_SUM, VL_SENS_ZERO };
static V vl_sens_node(long n, unsigned tags, long node) {
  V o = vl_obj(VL_SENS, tags, 6);
  memset(o->s, 0, 6 * sizeof(vl_slot));
  o->s[0].b = n;
  o->s[1].b = node;
  return o;
}
/* The sensitivity of reverse array `of` (boxed; or NULL, with n its length, tags its AD tags
   and zelem its elements' common zero sensitivity) that is s at index k: the evaluator's
   `%onehot-sensitivity`, its index already checked by `get`. */
static V vl_onehot(V of, long n, unsigned tags, V zelem, long k, V s) {
  if (of) {
    if ((of->kind != VL_ARRAY && of->kind != VL_FLATREF) || vl_top(of) != VL_REVERSE || k < 0 || k >= of->s[0].b)
      vl_fail_internal("a one-hot sensitivity of a value that is not a reverse array");
    n = of->s[0].b;
    tags = of->aux;
  }
  tags = vl_tags_push(vl_tags_pop(tags), VL_SENSITIVITY);
  V o = vl_sens_node(n, tags, s->zero & VL_LAZY ? VL_SENS_ZERO : VL_SENS_ONEHOT);
  o->zero = s->zero & VL_LAZY;
  o->s[2].b = k;
  o->s[3].v = s;
  o->s[4].v = of;
  o->s[5].v = zelem;
  return o;
}
/* The tags and length of an array sensitivity, dense or lazy; 0 if it is not one. */
static int vl_array_shape(V v, unsigned *tags, long *n) {
  if (v->kind != VL_ARRAY && v->kind != VL_SENS && v->kind != VL_FLATREF) return 0;
  *tags = v->aux;
  *n = v->s[0].b;
  return 1;
}
static V vl_sens_sum(V a, V b) {
  unsigned ta, tb;
  long na, nb;
  if (!vl_array_shape(a, &ta, &na) || !vl_array_shape(b, &tb, &nb) || ta != tb) vl_shape_fail("plus", a, b);
  if (na != nb) vl_length_fail("plus", na, nb);
  V o = vl_sens_node(na, ta, VL_SENS_SUM);
  o->s[2].v = a;
  o->s[3].v = b;
  return o;
}
/* A growable array of pointers for vl_sens_force (on the heap: a sum can be a chain of a
   million contributions, so no recursion). */
typedef struct { V *p; size_t n, cap; } vl_vec;
static void vl_vec_push(vl_vec *v, V x) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 64;
    v->p = realloc(v->p, v->cap * sizeof *v->p);
    if (!v->p) vl_die("vlad: out of memory\n", 70);
  }
  v->p[v->n++] = x;
}
static V vl_sens_force(V s) {
  vl_vec work = {0, 0, 0}, ones = {0, 0, 0}, dense = {0, 0, 0};
  V of = 0, zelem = 0;
  int have_of = 0;
  long n = s->s[0].b;
  vl_vec_push(&work, s);
  /* Depth first, left operand first: the evaluator's order of contributions. */
  while (work.n) {
    V v = work.p[--work.n];
    if (v->kind == VL_SENS && v->s[1].b == VL_SENS_SUM) {
      vl_vec_push(&work, v->s[3].v);
      vl_vec_push(&work, v->s[2].v);
    } else if (v->kind == VL_SENS) {
      if (v->s[1].b == VL_SENS_ONEHOT) vl_vec_push(&ones, v);
      if (!have_of) { of = v->s[4].v; zelem = v->s[5].v; have_of = 1; }
    } else vl_vec_push(&dense, vl_dense(v));
  }
  V o = vl_boxed_array(n, s->aux);
  for (long i = 0; i < n; i++)
    o->s[1 + i].v = dense.n ? dense.p[0]->s[1 + i].v : of ? vl_zero_sens(vl_elem(of, i)) : zelem;
  for (size_t d = 1; d < dense.n; d++)
    for (long i = 0; i < n; i++) o->s[1 + i].v = vl_ad_plus(o->s[1 + i].v, dense.p[d]->s[1 + i].v);
  for (size_t j = 0; j < ones.n; j++) {
    long i = ones.p[j]->s[2].b;
    o->s[1 + i].v = vl_ad_plus(o->s[1 + i].v, ones.p[j]->s[3].v);
  }
  free(work.p);
  free(ones.p);
  free(dense.p);
  return o;
}
static V vl_dense_slow(V v) {
  if (v->kind == VL_SENS) return vl_sens_force(v);
  V o = vl_boxed_array(v->s[0].b, v->aux);
  o->zero = v->zero & VL_LAZY;
  for (long i = 0; i < v->s[0].b; i++) o->s[1 + i].v = vl_elem(v, i);
  return o;
}

/* ---- the collection of what a loop carries (crates/vlad-ir/src/passes/carry.rs). The arena
   marks reclaim what a call allocated when it returns nothing boxed, and a loop's steps when
   they carry nothing the step allocated, or only flat arrays of reals (vl_release_carrying).
   A loop that carries a boxed value it rebuilds (a list, a gradient, a closure) would keep
   every step's objects until the loop returns. Instead, at the loop's back edge (a self tail
   call turned `continue`, the end of an ifold step), vl_collect copies the objects allocated
   since the loop's mark that the carried values reach down to the mark, and frees the rest:
   a copying collection, Cheney's, of the region above the mark.
   - Values are immutable and nothing older than the mark points into the region (an object
     can only point to older ones), so the carried values are the only roots: the compiled
     code holds no other pointer into the region at a back edge (the IR's verifier checks it
     with the liveness of its variables), and the constants and everything below the mark
     stay where they are.
   - Sharing is kept: a copied object is overwritten by a forwarding record (kind VL_MOVED,
     slot 0 where its copy is).
   - Every object says its size and where its pointers are: by its kind, a closure by its
     code's environment (vl_code_slots), a flat array by its element layout (vl_layouts).
   - The survivors are copied twice: first into a heap buffer, where the pointers to copies
     are kept as offsets into it (odd numbers, which no object address is); then, after the
     release, into the arena at the mark, the offsets turned into addresses.
   - It runs only when the arena above the mark has grown past VL_GC_FACTOR times what
     survived the last collection (and past VL_GC_MIN), so its cost, proportional to the
     survivors, is a constant per byte allocated, and the loop's memory stays within a
     constant factor of what it carries (VLAD_GC_MIN_BYTES sets VL_GC_MIN). */
#define VL_MOVED 0xffffu
#define VL_GC_MIN ((size_t)1 << 20)
#define VL_GC_FACTOR 4
VL_SHARED size_t vl_collections;
/* VLAD_GC_MIN_BYTES=N: collect past N bytes instead of VL_GC_MIN (0: as soon as the arena has
   grown past VL_GC_FACTOR times the last survivors; the tests run every program so once, so
   that the collector runs in every loop that carries boxed values). Every translation unit's
   state starts zero, and a library reads no settings, so zero must mean "not set": the floor
   is held XOR VL_GC_MIN (vl_collect_due, at every step of a loop, takes one `xor` to read it),
   and vl_gc_min_set says whether it was set. */
VL_SHARED size_t vl_gc_floor_x, vl_gc_min_set;
/* The slots of an object, by its kind. */
static size_t vl_obj_slots(V o) {
  switch (o->kind) {
  case VL_NIL: case VL_PRIM: return 0;
  case VL_BOOL: case VL_REAL: case VL_TAGGED: return 1;
  case VL_PAIR: case VL_BUNDLE: return 2;
  case VL_CLOSURE: return vl_code_slots[o->aux] ? strlen(vl_code_slots[o->aux]) : 0;
  case VL_ARRAY: return 1 + (size_t)o->s[0].b;
  case VL_FLAT: return 1 + (size_t)o->s[0].b * strlen(vl_layouts[o->aux]);
  case VL_SENS: return 6;
  case VL_FLATREF: return 3;
  }
  vl_fail_internal("the collector met an object of no known kind");
  return 0;
}
/* The bytes vl_alloc took for an object. */
static size_t vl_obj_bytes(V o) {
  return (sizeof(struct vl_obj) + vl_obj_slots(o) * sizeof(vl_slot) + 15) & ~(size_t)15;
}
/* The collection's state: the parts of chunks above the mark (sorted by address), the
   buffer the survivors are copied to first, and where they end up. */
typedef struct { char *lo, *hi; } vl_range;
static vl_range *vl_gc_from;
static size_t vl_gc_nfrom;
static char *vl_gc_to, *vl_gc_at;
static size_t vl_gc_used, vl_gc_cap;
static int vl_gc_above(const char *p) {
  size_t lo = 0, hi = vl_gc_nfrom;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (p < vl_gc_from[mid].lo) hi = mid;
    else if (p >= vl_gc_from[mid].hi) lo = mid + 1;
    else return 1;
  }
  return 0;
}
/* x's copy (an odd offset into vl_gc_to), copied now if it has not been; x itself if it is
   older than the mark (or null). */
static V vl_gc_copy(V x) {
  if (!x || !vl_gc_above((const char *)x)) return x;
  if (x->kind == VL_MOVED) return x->s[0].v;
  size_t bytes = vl_obj_bytes(x);
  if (vl_gc_used + bytes > vl_gc_cap) {
    vl_gc_cap = 2 * (vl_gc_used + bytes);
    vl_gc_to = realloc(vl_gc_to, vl_gc_cap);
    if (!vl_gc_to) vl_die("vlad: out of memory\n", 70);
  }
  memcpy(vl_gc_to + vl_gc_used, x, bytes);
  V to = (V)(((size_t)vl_gc_used << 1) | 1);
  vl_gc_used += bytes;
  x->kind = VL_MOVED;
  x->s[0].v = to;
  return to;
}
/* A pointer of a survivor: copied (moving = 1), or an offset made an address (0). */
static V vl_gc_fix(V x, int moving) {
  if (moving) return vl_gc_copy(x);
  return ((size_t)x & 1) ? (V)(vl_gc_at + ((size_t)x >> 1)) : x;
}
/* Fixes the pointers of the object at offset off of *base (which vl_gc_copy may move while
   it runs: the object is found again after each copy); the object's size. */
static size_t vl_gc_object(char **base, size_t off, int moving) {
#define VL_GC_FIX(I)                                                        \
  do {                                                                      \
    V y_ = vl_gc_fix(((V)(*base + off))->s[I].v, moving);                   \
    ((V)(*base + off))->s[I].v = y_;                                        \
  } while (0)
  V o = (V)(*base + off);
  size_t bytes = vl_obj_bytes(o);
  switch (o->kind) {
  case VL_PAIR: case VL_BUNDLE: VL_GC_FIX(0); VL_GC_FIX(1); break;
  case VL_TAGGED: VL_GC_FIX(0); break;
  case VL_FLATREF: VL_GC_FIX(1); break;
  case VL_SENS:
    /* a sum: its two operands; a one-hot or a zero: the element's sensitivity, the array
       (or null) and the elements' zero (or null) */
    if (o->s[1].b == VL_SENS_SUM) { VL_GC_FIX(2); VL_GC_FIX(3); }
    else { VL_GC_FIX(3); VL_GC_FIX(4); VL_GC_FIX(5); }
    break;
  case VL_ARRAY: {
    long n = o->s[0].b;
    for (long i = 0; i < n; i++) VL_GC_FIX(1 + i);
    break;
  }
  case VL_CLOSURE: {
    const char *k = vl_code_slots[o->aux];
    for (size_t i = 0; k && k[i]; i++)
      if (k[i] == 'v') VL_GC_FIX(i);
    break;
  }
  case VL_FLAT: {
    const char *k = vl_layouts[o->aux];
    size_t w = strlen(k);
    long n = o->s[0].b;
    if (strchr(k, 'v'))
      for (long e = 0; e < n; e++)
        for (size_t j = 0; j < w; j++)
          if (k[j] == 'v') VL_GC_FIX(1 + (size_t)e * w + j);
    break;
  }
  default: break;
  }
#undef VL_GC_FIX
  return bytes;
}
static int vl_gc_order(const void *a, const void *b) {
  const vl_range *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}
/* The collection itself: the n values xs[0..n) and what they reach above mark m copied down
   to m (xs updated), everything else above m freed. Returns the next budget. */
static long vl_collect_now(vl_mark_t m, V *xs, int n) {
  size_t first = m.cur ? m.cur - 1 : 0;
  vl_gc_nfrom = 0;
  vl_gc_from = malloc((vl_cur - first + 1) * sizeof *vl_gc_from);
  if (!vl_gc_from) vl_die("vlad: out of memory\n", 70);
  for (size_t i = first; i < vl_cur; i++) {
    char *lo = m.cur && i == m.cur - 1 ? m.chunk : vl_chunks[i].base;
    char *hi = i == vl_cur - 1 ? vl_chunk : vl_chunks[i].base + vl_chunks[i].size;
    if (lo < hi) vl_gc_from[vl_gc_nfrom++] = (vl_range){lo, hi};
  }
  qsort(vl_gc_from, vl_gc_nfrom, sizeof *vl_gc_from, vl_gc_order);
  vl_gc_used = 0;
  for (int i = 0; i < n; i++) xs[i] = vl_gc_copy(xs[i]);
  for (size_t scan = 0; scan < vl_gc_used;) scan += vl_gc_object(&vl_gc_to, scan, 1);
  size_t total = vl_gc_used;
  vl_release(m);
  vl_gc_at = total ? vl_alloc(total) : 0;
  if (total) memcpy(vl_gc_at, vl_gc_to, total);
  for (size_t at = 0; at < total;) at += vl_gc_object(&vl_gc_at, at, 0);
  for (int i = 0; i < n; i++) xs[i] = vl_gc_fix(xs[i], 0);
  free(vl_gc_from);
  vl_gc_from = 0;
  /* The buffer is kept for the next collection unless it is large. */
  if (vl_gc_cap > VL_GC_MIN) {
    free(vl_gc_to);
    vl_gc_to = 0;
    vl_gc_cap = 0;
  }
  vl_collections++;
  return (long)(VL_GC_FACTOR * total);
}
/* VLAD_GC_MIN_BYTES, read once at start-up (vl_gc_floor_x above). */
static void vl_gc_settings(void) {
  const char *min = getenv("VLAD_GC_MIN_BYTES");
  if (min && atol(min) >= 0) {
    vl_gc_floor_x = (size_t)atol(min) ^ VL_GC_MIN;
    vl_gc_min_set = 1;
  }
}
/* The bytes allocated since the mark are found without the chunk table while the arena is
   still in the mark's chunk (the common case, at every step of a loop). A collection keeps at
   least the flat arrays the loop carries: until the steps have allocated VL_GC_FACTOR times
   their size it is not due (a reverse sweep's first step makes
   the dense sensitivity it then adds into: collecting there copied all of it and freed
   nothing), and that is the next budget. Not when VLAD_GC_MIN_BYTES is set: the tests set it
   to make the collector run. */
static inline size_t vl_used_since(vl_mark_t m) {
  return m.cur == vl_cur ? (size_t)(vl_chunk - m.chunk)
                         : vl_pos(vl_cur, vl_chunk) - vl_pos(m.cur, m.chunk);
}
/* Whether the collection is due (the test above). The generated code tests it at the back
   edge before it puts the carried values in the array vl_collect updates, so that they stay
   in registers through the iterations that collect nothing. */
static inline int vl_collect_due(vl_mark_t m, long budget) {
  size_t used = vl_used_since(m);
  return used > (vl_gc_floor_x ^ VL_GC_MIN) && used > (size_t)budget;
}
/* At a loop's back edge: collects (above) if the arena has grown past the budget since mark
   m, and returns the next budget (the same if it did not collect). */
static long vl_collect(vl_mark_t m, V *xs, int n, long budget) {
  if (!vl_collect_due(m, budget)) return budget;
  size_t used = vl_used_since(m);
  if (!vl_gc_min_set) {
    size_t kept = 0;
    for (int i = 0; i < n; i++)
      if (xs[i] && xs[i]->kind == VL_FLAT) kept += vl_flat_bytes(xs[i]);
    if (used <= VL_GC_FACTOR * kept) return (long)(VL_GC_FACTOR * kept);
  }
  return vl_collect_now(m, xs, n);
}

/* ---- `build` in reverse mode: its definition conses the elements on a list, last first, and
   turns the list into an array (%list->array-rev); the backpropagator turns the array's
   sensitivity back into the list's (%array->list-rev). */
/* The AD tags of a value (the evaluator's Value::tags); procedures are never lists here. */
static unsigned vl_tags_of(V v) {
  switch (v->kind) {
  case VL_PAIR: case VL_ARRAY: case VL_SENS: case VL_FLATREF: return v->aux;
  case VL_BUNDLE: return vl_tags_push(vl_tags_of(v->s[0].v), VL_FORWARD);
  case VL_TAGGED: return vl_tags_push(vl_tags_of(v->s[0].v), v->aux);
  default: return 0;
  }
}
/* v with the AD tags `tags` put on, innermost first (the evaluator's `lift`). */
static V vl_lift(V v, unsigned tags) {
  if (!(tags >> 28)) return v;
  V inner = vl_lift(v, vl_tags_pop(tags));
  unsigned tag = tags & 3;
  if (tag == VL_FORWARD) return vl_ad_bundle(inner, vl_ad_tag(vl_ad_zero(inner, 0), VL_PERTURBATION));
  return vl_ad_tag(inner, tag);
}
/* The list (x_{n-1} ... x_0) with any tags as the array #(x_0 ... x_{n-1}) with the same tags:
   boxed (VL_ARRAY), or flat with one boxed slot per element (VL_FLAT), which has the same
   slots. */
static V vl_list_to_array_rev(V l, int flat) {
  unsigned tags = vl_tags_of(l);
  long n = 0;
  for (V x = l; x->kind == VL_PAIR && x->aux == tags; x = x->s[1].v) n++;
  V a = flat ? vl_flat(n, 1, VL_LAYOUT_BOXED) : vl_boxed_array(n, tags);
  long i = n;
  for (V x = l; x->kind == VL_PAIR && x->aux == tags; x = x->s[1].v) a->s[i--].v = x->s[0].v;
  return a;
}
/* The flat arrays of the accumulators of reverse-mode sweeps (`%accumulate`,
   crates/vlad-lower/src/accumulate.rs): the array a sweep made to add into in place is marked in
   `zero` (which flat arrays do not otherwise use), and only a marked array is added into. */
enum { VL_ACC_MARK = 2 };
static inline V vl_acc_mark(V a) { a->zero = VL_ACC_MARK; return a; }
static inline V vl_acc_clear(V a) { a->zero = 0; return a; }
static inline long vl_acc_owned(V a) { return a->kind == VL_FLAT && a->zero == VL_ACC_MARK; }
/* `%lazy-zero?` of a boxed value: a lazy zero is flagged `zero` (a flat array's flag is the mark
   above instead). */
static inline long vl_is_lazy_zero(V v) { return v->kind != VL_FLAT && (v->zero & VL_LAZY); }
/* `%dense`: an array sensitivity computed (the sweep of the reverse `build` reads it an element
   at a time); anything but an array is the evaluator's error. */
static V vl_dense_array(int site, V a) {
  a = vl_dense(a);
  if (a->kind != VL_ARRAY)
    vl_fail_value(site, "the sensitivity of an array made by `build` must be an array, got ", a, "");
  return a;
}
static V vl_array_to_list_rev(int site, V a) {
  a = vl_dense(a);
  if (a->kind != VL_ARRAY)
    vl_fail_value(site, "the sensitivity of an array made by `build` must be an array, got ", a, "");
  V acc = vl_lift(vl_nil, a->aux);
  for (long i = 0; i < a->s[0].b; i++) acc = vl_pair(a->aux, a->s[1 + i].v, acc);
  return acc;
}

/* ---- read-real: the next token of standard input (bytes up to whitespace), read as a numeral.
   A transcription of the evaluator's reader of numbers (vlad-syntax/src/number.rs:
   `is_input_space`, `parse_number`, `show_token`; vlad-eval/src/io.rs `next_token`), which
   the tests run against this one on the same inputs: tokens of any length, NUL bytes and
   all, and no numeral but the reader's (strtod alone would take `nan`, `inf`, `0x10` and
   leading spaces, and reject `+nan.0` and `#x1F`). */
static int vl_is_input_space(int c) {
  return c == ' ' || c == '\t' || c == '\n' || c == 0x0b || c == 0x0c || c == '\r';
}
/* The value of digit c (lower case) in radix r, or -1. */
static int vl_digit(int c, int r) {
  int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'z' ? c - 'a' + 10 : 99;
  return d < r ? d : -1;
}
/* parse_number of the n bytes at tok: 1 and *out, or 0 if they are not a numeral. */
static int vl_parse_number(const char *tok, size_t n, double *out) {
  char *s = malloc(n + 1);
  if (!s) vl_die("vlad: out of memory\n", 70);
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)tok[i];
    s[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : (char)c;
  }
  s[n] = 0;
  int radix = 10, ok = 0;
  const char *b = s;
  size_t m = n;
  if (n >= 2 && s[0] == '#' && (s[1] == 'b' || s[1] == 'o' || s[1] == 'd' || s[1] == 'x')) {
    radix = s[1] == 'b' ? 2 : s[1] == 'o' ? 8 : s[1] == 'd' ? 10 : 16;
    b += 2;
    m -= 2;
  }
  if (radix != 10) {
    int neg = m > 0 && b[0] == '-';
    size_t i = m > 0 && (b[0] == '-' || b[0] == '+') ? 1 : 0;
    double v = 0;
    ok = i < m;
    for (; ok && i < m; i++) {
      int d = vl_digit((unsigned char)b[i], radix);
      if (d < 0) ok = 0;
      else v = v * radix + d;
    }
    if (ok) *out = neg ? -v : v;
  } else if (m == 6 && (!memcmp(b, "+inf.0", 6) || !memcmp(b, "-inf.0", 6))) {
    *out = b[0] == '+' ? INFINITY : -INFINITY;
    ok = 1;
  } else if (m == 6 && (!memcmp(b, "+nan.0", 6) || !memcmp(b, "-nan.0", 6))) {
    *out = NAN;
    ok = 1;
  } else {
    /* sign? digits* (. digits*)? (e sign? digits+)?, with a digit before the exponent */
    size_t i = 0, digits = 0;
    if (i < m && (b[i] == '+' || b[i] == '-')) i++;
    while (i < m && b[i] >= '0' && b[i] <= '9') i++, digits++;
    if (i < m && b[i] == '.') {
      i++;
      while (i < m && b[i] >= '0' && b[i] <= '9') i++, digits++;
    }
    ok = digits > 0;
    if (ok && i < m && b[i] == 'e') {
      i++;
      if (i < m && (b[i] == '+' || b[i] == '-')) i++;
      size_t start = i;
      while (i < m && b[i] >= '0' && b[i] <= '9') i++;
      ok = i > start;
    }
    ok = ok && i == m;
    /* Only the checked text reaches strtod: correctly rounded, as Rust's parse (the "C"
       locale: the program never sets another). */
    if (ok) *out = strtod(b, 0);
  }
  free(s);
  return ok;
}
static double vl_read_real(int site) {
  /* What the program printed so far is out before it waits for input, as in the evaluator. */
  fflush(stdout);
  size_t n = 0, cap = 64;
  char *tok = malloc(cap);
  if (!tok) vl_die("vlad: out of memory\n", 70);
  int c;
  while ((c = getchar()) != EOF && vl_is_input_space(c)) {}
  for (; c != EOF && !vl_is_input_space(c); c = getchar()) {
    if (n == cap) {
      cap *= 2;
      tok = realloc(tok, cap);
      if (!tok) vl_die("vlad: out of memory\n", 70);
    }
    tok[n++] = (char)c;
  }
  if (ferror(stdin)) {
    char m[300];
    snprintf(m, sizeof m, "read-real: cannot read standard input: %s", strerror(errno));
    vl_fail_at(site, m);
  }
  if (n == 0) vl_fail_at(site, "read-real: end of input");
  double x;
  if (!vl_parse_number(tok, n, &x)) {
    /* show_token: the first 40 bytes, those outside printable ASCII as \xHH */
    char m[300], *o = m + sprintf(m, "read-real: `");
    for (size_t i = 0; i < n && i < 40; i++) {
      unsigned char b = (unsigned char)tok[i];
      if (b >= 0x21 && b < 0x7f) *o++ = (char)b;
      else o += sprintf(o, "\\x%02X", b);
    }
    sprintf(o, "%s` is not a number", n > 40 ? "..." : "");
    vl_fail_at(site, m);
  }
  free(tok);
  return x;
}

/* ---- main: the program runs on a thread with a large stack (deep non-tail recursion: the
   reverse sweep of a long loop recurses once per step), mapped by the kernel only as it is
   used. Below it is a guard region; a fault there is reported as what it is, instead of a
   bare segmentation fault. VLAD_STACK_BYTES sets the size (for tests). */
#ifndef VL_SECONDARY
/* The C stack depth beyond which deep recursion goes to the explicit stack: 1 MiB, or half the
   stack if that is less; VLAD_NATIVE_DEPTH_BYTES sets it as it is (0: every call of a deep
   component runs in its machine, as the tests run them all once; more than the stack: none
   does, and a deep recursion runs out of stack). */
static void vl_set_native_floor(size_t stack) {
#if defined(__GNUC__)
  size_t budget = (size_t)1 << 20;
  if (budget > stack / 2) budget = stack / 2;
  const char *want = getenv("VLAD_NATIVE_DEPTH_BYTES");
  if (want) budget = atol(want) < 0 ? (size_t)-1 : (size_t)atol(want);
  char *here = (char *)__builtin_frame_address(0);
  vl_native_floor = budget >= (size_t)here ? 0 : here - budget;
#else
  (void)stack;
#endif
}
#ifdef VL_LIBRARY
/* ---- the library's interface (vlad compile --lib; the header it writes documents it). */
#define VL_EXPORT __attribute__((visibility("default")))
typedef V vlad_value;
static void vl_init_constants(void);
static vl_mark_t vl_lib_base;
static int vl_lib_ready;
/* Builds the program's constants once; 0, or -1 (vlad_error() says why). */
VL_EXPORT int vlad_init(void) {
  if (vl_lib_ready) return 0;
  jmp_buf here;
  jmp_buf *outer = vl_lib_jmp;
  vl_lib_jmp = &here;
  if (setjmp(here)) {
    vl_lib_jmp = outer;
    return -1;
  }
  vl_init_constants();
  vl_lib_base = vl_mark();
  vl_lib_ready = 1;
  vl_lib_jmp = outer;
  return 0;
}
/* Frees every value made since vlad_init (the values the calls returned included). */
VL_EXPORT void vlad_reset(void) {
  if (vl_lib_ready) vl_release(vl_lib_base);
}
/* The message of the last error (a call that returned 0), or 0. */
VL_EXPORT const char *vlad_error(void) { return vl_lib_error; }
/* The arguments' constructors build the constants first, so that vlad_reset frees the
   arguments too. Out of memory here (outside an entry point) ends the process with the
   message. */
VL_EXPORT vlad_value vlad_real(double x) {
  vlad_init();
  return vl_real(x);
}
/* An array of n reals (copied). */
VL_EXPORT vlad_value vlad_array_f64(const double *xs, long n) {
  vlad_init();
  V a = vl_flat(n, 1, VL_LAYOUT_REALS);
  for (long i = 0; i < n; i++) a->s[1 + i].d = xs[i];
  return a;
}
/* An array of n values (arrays, for an argument that is an array of arrays). */
VL_EXPORT vlad_value vlad_array(const vlad_value *xs, long n) {
  vlad_init();
  V a = vl_boxed_array(n, 0);
  for (long i = 0; i < n; i++) {
    a->s[1 + i].v = vl_arg_boxed(xs[i]);
  }
  return a;
}
enum { VLAD_NIL, VLAD_BOOLEAN, VLAD_REAL, VLAD_PAIR, VLAD_ARRAY, VLAD_OTHER };
/* A value the library returned, as the functions below read it: a lazy sensitivity computed,
   anything else as it is. An array boxed by reference (VL_FLATREF) is read in place, each
   element boxed when it is asked for: boxing the whole array at every read made reading an
   n-element result O(n^2). */
static V vl_lib_value(V v) { return v->kind == VL_SENS ? vl_sens_force(v) : v; }
/* What a value the library returned is. */
VL_EXPORT int vlad_kind(vlad_value v) {
  v = vl_lib_value(v);
  switch (v->kind) {
  case VL_NIL: return VLAD_NIL;
  case VL_BOOL: return VLAD_BOOLEAN;
  case VL_REAL: return VLAD_REAL;
  case VL_PAIR: return v->aux ? VLAD_OTHER : VLAD_PAIR;
  case VL_ARRAY: case VL_FLATREF: return v->aux ? VLAD_OTHER : VLAD_ARRAY;
  case VL_FLAT: return VLAD_ARRAY; /* an argument made by vlad_array_f64 */
  default: return VLAD_OTHER;
  }
}
/* The parts of a value; 0 (or 0.0, or -1 for a length) where it is not of that kind. */
VL_EXPORT double vlad_real_of(vlad_value v) { return v->kind == VL_REAL ? v->s[0].d : 0.0; }
VL_EXPORT int vlad_boolean_of(vlad_value v) { return v->kind == VL_BOOL && v->s[0].b; }
VL_EXPORT vlad_value vlad_car(vlad_value v) { return vlad_kind(v) == VLAD_PAIR ? v->s[0].v : 0; }
VL_EXPORT vlad_value vlad_cdr(vlad_value v) { return vlad_kind(v) == VLAD_PAIR ? v->s[1].v : 0; }
/* (An array's length is slot 0 of each of its kinds.) */
VL_EXPORT long vlad_length(vlad_value v) {
  return vlad_kind(v) == VLAD_ARRAY ? vl_lib_value(v)->s[0].b : -1;
}
VL_EXPORT vlad_value vlad_at(vlad_value v, long i) {
  if (i < 0 || i >= vlad_length(v)) return 0;
  if (v->kind == VL_FLAT) return vl_real(v->s[1 + i].d); /* made by vlad_array_f64 */
  return vl_elem(vl_lib_value(v), i);
}
/* An entry point's frame: a run-time error returns to it, and the native stack budget is
   measured from it (the library may be called from any thread, at any depth). */
#define VL_LIB_CALL(RESULT, CALL)                                                   \
  do {                                                                              \
    if (vlad_init() != 0) return 0;                                                 \
    jmp_buf here_;                                                                  \
    jmp_buf *outer_ = vl_lib_jmp;                                                   \
    char *floor_ = vl_native_floor;                                                 \
    vl_lib_jmp = &here_;                                                            \
    vl_set_native_floor((size_t)1 << 20);                                           \
    if (setjmp(here_)) {                                                            \
      vl_lib_jmp = outer_;                                                          \
      vl_native_floor = floor_;                                                     \
      return 0;                                                                     \
    }                                                                               \
    RESULT = CALL;                                                                  \
    vl_lib_jmp = outer_;                                                            \
    vl_native_floor = floor_;                                                       \
  } while (0)
#else
static void vl_program(void);
static char *vl_stack_lo;
#define VL_STACK_GUARD ((size_t)1 << 16)
static void vl_on_fault(int sig, siginfo_t *si, void *ctx) {
  (void)ctx;
  char *a = (char *)si->si_addr;
  if (vl_stack_lo && a >= vl_stack_lo - VL_STACK_GUARD && a < vl_stack_lo + 4096) {
    static const char m[] =
        "vlad: error: the compiled program ran out of stack (its recursion is deeper than its "
        "stack allows); `vlad run --interp` runs it in the evaluator, which has no such limit\n";
    fflush(stdout);
    if (write(2, m, sizeof m - 1) < 0) _exit(1);
    _exit(1);
  }
  signal(sig, SIG_DFL);
  raise(sig);
}
static size_t vl_stack_size;
static void *vl_thread(void *arg) {
  (void)arg;
  /* The handler runs on a stack of its own: the thread's is full when it is called. */
  static char alt[1 << 16];
  stack_t ss;
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ss.ss_flags = 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = vl_on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaltstack(&ss, 0) == 0) {
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGBUS, &sa, 0);
  }
  vl_set_native_floor(vl_stack_size);
  vl_gc_settings();
  vl_program();
  return 0;
}
int main(void) {
  pthread_attr_t a;
  pthread_t t;
  pthread_attr_init(&a);
  size_t sizes[] = {(size_t)1 << 33, (size_t)1 << 30, (size_t)1 << 26};
  const char *want = getenv("VLAD_STACK_BYTES");
  if (want && atol(want) > 0) sizes[0] = ((size_t)atol(want) + 4095) & ~(size_t)4095;
  int ok = 0;
  for (int i = 0; i < 3 && !ok; i++) {
    char *p = mmap(0, sizes[i] + VL_STACK_GUARD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    vl_stack_lo = p + VL_STACK_GUARD;
    vl_stack_size = sizes[i];
    if (mprotect(p, VL_STACK_GUARD, PROT_NONE) == 0 &&
        pthread_attr_setstack(&a, p + VL_STACK_GUARD, sizes[i]) == 0 &&
        pthread_create(&t, &a, vl_thread, 0) == 0) {
      ok = 1;
    } else {
      vl_stack_lo = 0;
      munmap(p, sizes[i] + VL_STACK_GUARD);
    }
  }
  if (!ok) {
    vl_set_native_floor((size_t)1 << 22);
    vl_gc_settings();
    vl_program();
  }
  else pthread_join(t, 0);
  fflush(stdout);
  vl_check_output();
  /* VLAD_ARENA_STATS: the arena's size at exit, its peak (chunks are never freed), and the
     peak of the explicit stack's frames. */
  if (getenv("VLAD_ARENA_STATS")) {
    size_t bytes = 0;
    for (size_t i = 0; i < vl_nchunks; i++) bytes += vl_chunks[i].size;
    fprintf(stderr, "vlad: arena: %zu chunks, %zu bytes, %zu collections, %zu bytes of frames\n",
            vl_nchunks, bytes, vl_collections, (size_t)(vl_xs_high - vl_xs_base));
  }
  return 0;
}
#endif /* VL_LIBRARY */
#endif
