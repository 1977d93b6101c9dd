/* A one-pass scanner for Kineto trace JSON: the events array's bytes in, typed columns out.
 *
 * It is an accelerator, not a second decoder: it accepts only input it can prove the msgspec
 * reference path (trace/_decode.py + trace/_build.py) would accept and turn into the same columns,
 * and answers None on anything else (bad JSON, unusual types, numbers it would have to round,
 * escaped or duplicate keys, deep nesting, ...), so the caller runs the reference path, which then
 * accepts, recovers or raises exactly as it always did.
 *
 * scan(buffer, start, end, stop_at) works in two phases. Phase 1 runs without the GIL and touches
 * no Python object: it parses the events from buffer[start:end], interning strings by their decoded
 * bytes, and fills malloc'd arrays. Phase 2, with the GIL, turns distinct strings into Python
 * objects and hands each array over as a read-only buffer (Column). Two threads may scan two halves at once.
 *
 * start == 0: the span is the whole array "[ ... ]" (trailing whitespace allowed); with stop_at >= 0
 * the scan stops when the next event would begin exactly at stop_at ("met"), else runs to the end.
 * start > 0: the span begins at an event '{' inside the array and runs to its closing ']'.
 *
 * Only the C API and the C standard library are used; SSE2 speeds up string scanning where the
 * compiler offers it, with a portable loop otherwise.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(PROFUSE_SCAN_PORTABLE) && (defined(__SSE2__) || defined(_M_X64) || defined(_M_AMD64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 2))
#define SCAN_SSE2 1
#include <emmintrin.h>
#if defined(_MSC_VER)
#include <intrin.h>
static int ctz32(unsigned int x) { unsigned long i; _BitScanForward(&i, x); return (int)i; }
#else
static int ctz32(unsigned int x) { return __builtin_ctz(x); }
#endif
#else
#define SCAN_SSE2 0
#endif

#define MAX_DEPTH 64
#define TWO53 9007199254740992LL
#define TWO33 8589934592LL

/* ---- growable arrays ------------------------------------------------------------------------ */

/* Arrays of VEC_MAP_MIN bytes and more live in their own anonymous mapping (Linux): it grows by mremap,
 * which moves page tables instead of copying. Smaller ones, and every array elsewhere, are malloc'd.
 * ``mapped`` is the mapping's size in bytes, 0 for malloc'd data. The mapping asks for no 2 MB pages:
 * they fault 512 times less often, but where the kernel must first find (compact) or the host back one
 * again, each costs far more: the 1 GB synthetic trace's scan alone, 4 interleaved rounds, 3.7-4.8 s
 * (system time 4.8 s, median) with them against 1.3-1.9 s without (trace/build.py, _load_settings).
 * Mapping from 256 KB on instead of 4 MB, to spare realloc's copies (11% of a vit50 load's
 * page faults are in them), left the load's faults as they were (38.6 k -> 39.0 k, 10 runs): the heap
 * the copies leave behind is taken again by later arrays, so the count follows the peak, not the copies. */
typedef struct { void *data; size_t len, cap, item, mapped; } Vec;

#if defined(__linux__)
#include <sys/mman.h>
#define VEC_MAP_MIN ((size_t)4 << 20)
#define VEC_MAP_STEP ((size_t)2 << 20)
#endif

static void release(void *data, size_t mapped) {
#if defined(__linux__)
    if (mapped) { munmap(data, mapped); return; }
#endif
    (void)mapped;
    free(data);
}

static void vec_free(Vec *v) {
    release(v->data, v->mapped);
    v->data = NULL;
    v->cap = v->mapped = 0;
}

/* v's storage grown to hold cap items (its len kept): in its own mapping from VEC_MAP_MIN bytes on. */
static int vec_grow(Vec *v, size_t cap) {
#if defined(__linux__)
    if (cap * v->item >= VEC_MAP_MIN) {
        size_t bytes = (cap * v->item + VEC_MAP_STEP - 1) & ~(VEC_MAP_STEP - 1);
        void *p = v->mapped ? mremap(v->data, v->mapped, bytes, MREMAP_MAYMOVE)
                            : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return -1;
        if (!v->mapped) {
            if (v->len) memcpy(p, v->data, v->len * v->item);
            free(v->data);
        }
        v->data = p;
        v->mapped = bytes;
        v->cap = bytes / v->item;
        return 0;
    }
#endif
    void *p = realloc(v->data, cap * v->item);
    if (!p) return -1;
    v->data = p;
    v->cap = cap;
    return 0;
}

static int vec_reserve(Vec *v, size_t extra) {
    if (v->len + extra <= v->cap) return 0;
    size_t cap = v->cap ? v->cap * 2 : 1024;
    while (cap < v->len + extra) cap *= 2;
    return vec_grow(v, cap);
}
/* the room checked here, the function called only to grow */
#define VEC_PUSH(v, T, x) (((v)->len < (v)->cap || !vec_reserve((v), 1)) ? (((T *)(v)->data)[(v)->len++] = (x), 0) : -1)

/* ---- an arena for unescaped strings ----------------------------------------------------------- */

typedef struct Block { struct Block *next; size_t used, cap; char data[1]; } Block;
typedef struct { Block *head; } Arena;

static char *arena_alloc(Arena *a, size_t n) {
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        Block *b = (Block *)malloc(sizeof(Block) + cap);
        if (!b) return NULL;
        b->next = a->head; b->used = 0; b->cap = cap;
        a->head = b;
    }
    char *p = a->head->data + a->head->used;
    a->head->used += n;
    return p;
}
static void arena_free(Arena *a) {
    while (a->head) { Block *n = a->head->next; free(a->head); a->head = n; }
}

/* ---- tokens --------------------------------------------------------------------------------- */

enum { T_MISSING = 0, T_NULL, T_INT, T_STR, T_FLOAT, T_BOOL, T_COMPOUND, T_BIGINT };

typedef struct {
    int type;
    int esc;            /* string holds backslash escapes (p, len: the raw text between the quotes) */
    int64_t i;          /* T_INT: the value; numbers: integer part */
    int neg, frac_digits, frac, has_exp;
    const char *p;      /* strings: content; numbers and compound values: the value's text */
    Py_ssize_t len;
} Tok;

/* ---- interning ------------------------------------------------------------------------------ */

typedef struct { uint64_t hash; int type; const char *p; Py_ssize_t len; int64_t i; } Entry;
typedef struct { Vec entries; int32_t *slots; size_t nslots; size_t last; } Intern;  /* last: id + 1 of the last answer, 0: none */

/* Eight bytes a step (names and shape texts run to hundreds of bytes), mixed as in splitmix64. */
static uint64_t hash_bytes(const char *p, Py_ssize_t n, uint64_t seed) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ seed ^ ((uint64_t)n << 32), w;
    for (; n >= 8; p += 8, n -= 8) {
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    if (n) {
        w = 0;
        memcpy(&w, p, (size_t)n);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ULL;
    }
    h = (h ^ (h >> 30)) * 0x94D049BB133111EBULL;
    return h ^ (h >> 31);
}

static int intern_grow(Intern *t) {
    size_t n = t->nslots ? t->nslots * 2 : 256;
    int32_t *s = (int32_t *)malloc(n * sizeof(int32_t));
    if (!s) return -1;
    for (size_t k = 0; k < n; k++) s[k] = -1;
    Entry *e = (Entry *)t->entries.data;
    for (size_t k = 0; k < t->entries.len; k++) {
        size_t j = e[k].hash & (n - 1);
        while (s[j] >= 0) j = (j + 1) & (n - 1);
        s[j] = (int32_t)k;
    }
    free(t->slots);
    t->slots = s;
    t->nslots = n;
    return 0;
}

static inline int same_value(const Entry *x, int type, const char *p, Py_ssize_t len, int64_t i) {
    return x->type == type && (type == T_NULL || (type == T_INT && x->i == i) ||
                               (type == T_STR && x->len == len && memcmp(x->p, p, (size_t)len) == 0));
}

/* The id of a value (null, int or unescaped string); -1 on memory failure. The last answer is tried
 * first: consecutive events mostly share their pid, tid and category (a hash of each cost ~1/8 of a scan). */
static int32_t intern_id(Intern *t, int type, const char *p, Py_ssize_t len, int64_t i) {
    if (t->last && same_value(&((Entry *)t->entries.data)[t->last - 1], type, p, len, i))
        return (int32_t)(t->last - 1);
    uint64_t h;
    if (type == T_STR) h = hash_bytes(p, len, 7);
    else if (type == T_INT) h = hash_bytes((const char *)&i, 8, 11);
    else h = 3;
    if ((t->entries.len + 1) * 2 > t->nslots && intern_grow(t)) return -1;
    size_t j = h & (t->nslots - 1);
    Entry *e = (Entry *)t->entries.data;
    while (t->slots[j] >= 0) {
        Entry *x = &e[t->slots[j]];
        if (x->hash == h && same_value(x, type, p, len, i)) {
            t->last = (size_t)t->slots[j] + 1;
            return t->slots[j];
        }
        j = (j + 1) & (t->nslots - 1);
    }
    Entry ne = {h, type, p, len, i};
    if (VEC_PUSH(&t->entries, Entry, ne)) return -1;
    t->slots[j] = (int32_t)(t->entries.len - 1);
    t->last = t->entries.len;
    return (int32_t)(t->entries.len - 1);
}

static void intern_free(Intern *t) { vec_free(&t->entries); free(t->slots); }

/* ---- scanner state -------------------------------------------------------------------------- */

enum { C_TS, C_DUR, C_CORR, C_SEQ, C_FWD, C_PYID, C_PYPID, C_BYTES, C_EXT, C_DEV, C_STREAM, N_I64 };
static const char *const I64_NAMES[N_I64] = {
    "ts", "dur", "correlation", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes",
    "external_id", "device", "stream"};

/* the key each column's unusable args values are counted under in meta.ignored_args (the reference's) */
static const char *const IGNORED_NAMES[N_I64] = {
    "ts", "dur", "correlation", "seq", "fwd_tid", "python_id", "python_parent_id", "nbytes",
    "External id", "device", "stream"};

/* A [memory] instant's args, in trace/memory.py's order (_ARGS). */
enum { N_MEM = 6 };
static const char *const MEM_NAMES[N_MEM] = {"mem_bytes", "mem_addr", "mem_total_allocated", "mem_total_reserved",
                                             "mem_device_type", "mem_device"};

typedef struct { int64_t row; int32_t text[5]; } Shape;   /* ids in Scan.shape_texts, -1: absent */
typedef struct { int64_t row; int32_t text; } Direction;  /* a string args.direction: its id in Scan.dir_texts */

/* Concrete Inputs that say nothing (every entry an empty string: `["", "", ""]`) are not kept. */
static int blank_concrete(const char *p, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] != '[' && p[i] != ']' && p[i] != '"' && p[i] != ',' && p[i] != ' ') return 0;
    return 1;
}
typedef struct { int64_t row; const char *p; Py_ssize_t len; } FloatFix;
typedef struct { Tok pid, tid, name, aname, alabels; } Meta;
typedef struct { int8_t ph; int64_t ts; int32_t pid, tid, cat, id; } Flow;   /* id: in Scan.fids */

/* A key as it was last seen at one place in an object (see member_key): its text from the opening
 * quote through the colon and the whitespace after it (`"ph": `), zero-padded, a mask of 0xFF over the
 * text, its length, its length as a key (no quotes) and its index in the key set. */
#define KEY_MEMO 24
#define MEMO_WAYS 2
#define MEMO_TEXT 32
typedef struct { char text[MEMO_TEXT], mask[MEMO_TEXT]; int len, key_len, which; } KeyMemo;

typedef struct {
    const char *buf, *cur, *end;
    KeyMemo ev_memo[KEY_MEMO][MEMO_WAYS], arg_memo[KEY_MEMO][MEMO_WAYS];   /* events' and args' keys by place */
    Arena arena;
    Intern names, cats, pids, tids, phs, fcats;
    Intern shape_texts;                   /* the raw texts of Input Dims, Input type, ... (they repeat) */
    Intern fids;                          /* flow ids (each start and finish share one) */
    Intern dir_texts;                     /* the args.direction strings (HOST_TO_DEVICE, ...) */
    Vec i64[N_I64];
    Vec name, cat, pid, tid, flops;       /* int32 x4, double */
    Vec shapes, fixes, metas, flows;
    Vec dirs;                             /* Direction: the complete events with a string args.direction */
    Vec inst_name, inst_cat, inst_pid, inst_tid, inst_ts;
    Vec ph_counts;                        /* int64 per phs id */
    Vec members;                          /* document mode: top-level (key, value span) other than traceEvents */
    int64_t ignored[N_I64];               /* args values read as absent (not numbers), per column */
    int met;
    int nomem;
    int top_level;                        /* skipping a top-level value: "ts" keys there are harmless */
    int small_noisy;                      /* a ts below 2^33 us - 1 with float noise (over 3 fraction digits) */
    Vec mem_ts, mem_pid, mem_tid, mem_v[N_MEM];  /* the [memory] instants (see memory_row) */
    int64_t mem_skipped;                  /* [memory] instants trace/memory.py leaves out (counted) */
    int mem_defer;                        /* a [memory] event only trace/memory.py may judge */
    int big;                              /* a ts of 2^33 us - 1 or more */
    int release;                          /* the buffer is a file's read-only mapping: pages let go behind */
    const char *released;                 /* where the bytes not yet let go begin (page aligned) */
} Scan;

/* ---- letting a mapped trace's pages go behind the scan ---------------------------------------- */

/* A mapped trace (trace/_decode.py, _map) is the page cache's own pages: once the scan has passed
 * them, nothing reads them again but the hash (which lets them go too, trace/_native.py) and the odd
 * top-level member. madvise(MADV_DONTNEED) takes them out of this process (its RSS), not out of the
 * page cache: a later read faults them in again, from the file, as they were. Only ever asked for a
 * file's read-only mapping: on anonymous memory it would zero the bytes. RELEASE_STEP bytes at a
 * time, so the calls cost nothing next to the scan; the last RELEASE_KEEP bytes before the scan's
 * place are kept (the event being read). */
#define RELEASE_STEP ((Py_ssize_t)16 << 20)
#define RELEASE_KEEP ((Py_ssize_t)1 << 20)

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
static uintptr_t scan_page;

/* The whole pages inside [lo, hi) let go; true where any were. */
static int release_span(const char *lo, const char *hi) {
    if (!scan_page) scan_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)lo + scan_page - 1) & ~(scan_page - 1), b = (uintptr_t)hi & ~(scan_page - 1);
    if (b <= a) return 0;
    return madvise((void *)a, b - a, MADV_DONTNEED) == 0;
}
#else
static int release_span(const char *lo, const char *hi) { (void)lo; (void)hi; return 0; }
#endif

/* The pages the scan has passed let go, RELEASE_STEP at a time (all of them with `all`). */
static void release_behind(Scan *s, int all) {
    const char *upto = all ? s->cur : s->cur - RELEASE_KEEP;
    if (!s->release || upto - s->released < (all ? 1 : RELEASE_STEP)) return;
    release_span(s->released, upto);
    s->released = upto;
}

/* ---- lexing --------------------------------------------------------------------------------- */

static inline int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Whitespace passed over. Most gaps are none or one space (`"ph": "X", "cat"`); the others are a line
 * break and its indent, taken 16 bytes a step (a byte at a time, this was a sixth of a scan). */
static inline void ws(Scan *s) {
    const char *p = s->cur, *end = s->end;
    if (p >= end || (unsigned char)*p > ' ') return;           /* every whitespace byte is <= ' ' */
    if (*p == ' ' && (end - p < 2 || (unsigned char)p[1] > ' ')) { s->cur = p + 1; return; }
#if SCAN_SSE2
    while (end - p >= 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        __m128i w = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8(' ')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\n'))),
                                 _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('\r')), _mm_cmpeq_epi8(x, _mm_set1_epi8('\t'))));
        unsigned other = ~(unsigned)_mm_movemask_epi8(w) & 0xFFFFu;
        if (other) { s->cur = p + ctz32(other); return; }
        p += 16;
    }
#endif
    while (p < end && is_ws(*p)) p++;
    s->cur = p;
}

/* Length of a valid UTF-8 sequence at p (lead byte >= 0x80), 0 if invalid. */
static int utf8_len(const unsigned char *p, const unsigned char *end) {
    unsigned c = p[0];
    int n;
    unsigned min;
    if (c >= 0xC2 && c <= 0xDF) { n = 2; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; min = 0x10000; }
    else return 0;
    if (end - p < n) return 0;
    unsigned cp = c & (0x7F >> n);
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int hex4(const char *p) {
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int h = hexval(p[k]);
        if (h < 0) return -1;
        v = v * 16 + h;
    }
    return v;
}

/* A string at s->cur (on its opening quote): validated (escapes, UTF-8, no control bytes). */
static int lex_string(Scan *s, Tok *t) {
    const char *p = ++s->cur, *end = s->end;
    int esc = 0;
    for (;;) {
#if SCAN_SSE2
        while (end - p >= 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)p);
            __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                                  _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))),
                                     _mm_cmplt_epi8(x, _mm_set1_epi8(0x20)));  /* signed: also bytes >= 0x80 */
            unsigned mask = (unsigned)_mm_movemask_epi8(m);
            if (mask) { p += ctz32(mask); break; }
            p += 16;
        }
#endif
        if (p >= end) return -1;
        unsigned char c = (unsigned char)*p;
        if (c == '"') break;
        if (c == '\\') {
            esc = 1;
            if (end - p < 2) return -1;
            char e = p[1];
            if (e == 'u') {
                if (end - p < 6) return -1;
                int v = hex4(p + 2);
                if (v < 0) return -1;
                if (v >= 0xD800 && v <= 0xDBFF) {   /* a high surrogate must pair with a low one */
                    if (end - p < 12 || p[6] != '\\' || p[7] != 'u') return -1;
                    int w = hex4(p + 8);
                    if (w < 0xDC00 || w > 0xDFFF) return -1;
                    p += 12;
                } else if (v >= 0xDC00 && v <= 0xDFFF) {
                    return -1;
                } else {
                    p += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
                p += 2;
            } else {
                return -1;
            }
        } else if (c < 0x20) {
            return -1;
        } else if (c >= 0x80) {
            int n = utf8_len((const unsigned char *)p, (const unsigned char *)end);
            if (!n) return -1;
            p += n;
        } else {
            p++;
        }
    }
    t->type = T_STR;
    t->esc = esc;
    t->p = s->cur;
    t->len = p - s->cur;
    s->cur = p + 1;
    return 0;
}

/* Decode a validated escaped string into out (at most len bytes); returns the decoded length. */
static Py_ssize_t unescape(const char *p, Py_ssize_t len, char *out) {
    const char *end = p + len;
    char *o = out;
    while (p < end) {
        if (*p != '\\') { *o++ = *p++; continue; }
        char e = p[1];
        if (e != 'u') {
            *o++ = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            p += 2;
            continue;
        }
        unsigned cp = (unsigned)hex4(p + 2);
        p += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((unsigned)hex4(p + 2) - 0xDC00);
            p += 6;
        }
        if (cp < 0x80) *o++ = (char)cp;
        else if (cp < 0x800) { *o++ = (char)(0xC0 | (cp >> 6)); *o++ = (char)(0x80 | (cp & 0x3F)); }
        else if (cp < 0x10000) {
            *o++ = (char)(0xE0 | (cp >> 12)); *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
        } else {
            *o++ = (char)(0xF0 | (cp >> 18)); *o++ = (char)(0x80 | ((cp >> 12) & 0x3F));
            *o++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *o++ = (char)(0x80 | (cp & 0x3F));
        }
    }
    return o - out;
}

/* A string token made plain (escapes decoded into the arena), ready to intern. */
static int plain(Scan *s, Tok *t) {
    if (t->type != T_STR || !t->esc) return 0;
    char *o = arena_alloc(&s->arena, (size_t)t->len + 1);
    if (!o) { s->nomem = 1; return -1; }
    t->len = unescape(t->p, t->len, o);
    t->p = o;
    t->esc = 0;
    return 0;
}

static inline int is_digit(char c) { return (unsigned)(c - '0') < 10u; }

/* A JSON number with the strict grammar; integer part, up to 3 fraction digits and flags kept. */
static int lex_number(Scan *s, Tok *t) {
    const char *p = s->cur, *end = s->end;
    t->p = p;
    t->neg = 0; t->frac_digits = 0; t->frac = 0; t->has_exp = 0;
    if (p < end && *p == '-') { t->neg = 1; p++; }
    if (p >= end || *p < '0' || *p > '9') return -1;
    uint64_t v = 0;
    int big = 0;
    if (*p == '0') p++;
    else {
        /* up to 19 digits fit in 64 bits; a number of 20 or more is past int64 whatever it is (big) */
        const char *first = p;
        do { v = v * 10 + (uint64_t)(*p - '0'); p++; } while (p < end && is_digit(*p));
        big = p - first > 19;
    }
    int isfloat = 0;
    if (p < end && *p == '.') {
        p++;
        isfloat = 1;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') {
            if (t->frac_digits < 3) t->frac = t->frac * 10 + (*p - '0');
            t->frac_digits++;
            p++;
        }
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        isfloat = 1;
        t->has_exp = 1;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return -1;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    t->len = p - s->cur;
    s->cur = p;
    if (big || v > (uint64_t)INT64_MAX) { t->type = isfloat ? T_FLOAT : T_BIGINT; t->i = INT64_MAX; return 0; }
    t->i = t->neg ? -(int64_t)v : (int64_t)v;
    t->type = isfloat ? T_FLOAT : T_INT;
    return 0;
}

static int lex_literal(Scan *s, const char *word, int n) {
    if (s->end - s->cur < n || memcmp(s->cur, word, (size_t)n) != 0) return -1;
    s->cur += n;
    return 0;
}

static int skip_value(Scan *s, int depth);

/* A number checked against the strict grammar and passed over (what lex_number accepts). */
static int skip_number(Scan *s) {
    const char *p = s->cur, *end = s->end;
    if (p < end && *p == '-') p++;
    if (p >= end) return -1;
    if (*p == '0') p++;
    else if (is_digit(*p)) { do p++; while (p < end && is_digit(*p)); }
    else return -1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p)) return -1;
        do p++; while (p < end && is_digit(*p));
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return -1;
        do p++; while (p < end && is_digit(*p));
    }
    s->cur = p;
    return 0;
}

/* An array at s->cur (on its '[', itself at `depth`) checked and passed over without recursion for
 * nested arrays, numbers and strings (Input Dims, Input Strides, Input type, Concrete Inputs: most of
 * a shape-recording trace's bytes); objects and literals as skip_value checks them. Accepts exactly
 * what skip_value accepts, with the same depth limit. */
static int skip_array(Scan *s, int depth) {
    const char *end = s->end;
    int d = depth;   /* depth of the innermost open array */
    Tok t;
    if (depth > MAX_DEPTH) return -1;
    s->cur++;
    ws(s);
    if (s->cur < end && *s->cur == ']') { s->cur++; return 0; }
    for (;;) {
        /* a value at depth d + 1 */
        if (d + 1 > MAX_DEPTH || s->cur >= end) return -1;
        char c = *s->cur;
        if (c == '[') {
            d++;
            s->cur++;
            ws(s);
            if (s->cur >= end || *s->cur != ']') continue;
            s->cur++;
            d--;
        } else if (c == '"') {
            if (lex_string(s, &t)) return -1;
        } else if (c == '-' || is_digit(c)) {
            if (skip_number(s)) return -1;
        } else if (skip_value(s, d + 1)) {
            return -1;
        }
        /* after a value in the array at depth d: ',' and the next, or ']' closing it (and maybe more) */
        for (;;) {
            ws(s);
            if (s->cur >= end) return -1;
            if (*s->cur == ',') { s->cur++; ws(s); break; }
            if (*s->cur != ']') return -1;
            s->cur++;
            if (d == depth) return 0;
            d--;
        }
    }
}

/* Any value: scalars become tokens, objects and arrays are validated and kept as text. */
static int lex_value(Scan *s, Tok *t, int depth) {
    if (s->cur >= s->end) return -1;
    char c = *s->cur;
    t->esc = 0;
    t->p = s->cur;
    t->len = 0;
    if (c == '"') return lex_string(s, t);
    if (c == '-' || (c >= '0' && c <= '9')) return lex_number(s, t);
    if (c == 'n') { t->type = T_NULL; t->len = 4; return lex_literal(s, "null", 4); }
    if (c == 't') { t->type = T_BOOL; t->len = 4; return lex_literal(s, "true", 4); }
    if (c == 'f') { t->type = T_BOOL; t->len = 5; return lex_literal(s, "false", 5); }
    if (c == '{' || c == '[') {
        t->type = T_COMPOUND;
        t->p = s->cur;
        if (c == '[' ? skip_array(s, depth) : skip_value(s, depth)) return -1;
        t->len = s->cur - t->p;
        return 0;
    }
    return -1;
}

static int skip_value(Scan *s, int depth) {
    if (depth > MAX_DEPTH || s->cur >= s->end) return -1;
    char c = *s->cur;
    Tok t;
    if (c == '{') {
        s->cur++;
        ws(s);
        if (s->cur < s->end && *s->cur == '}') { s->cur++; return 0; }
        for (;;) {
            if (s->cur >= s->end || *s->cur != '"' || lex_string(s, &t)) return -1;
            /* the reference counts every "ts" key when it reads exact times from the text */
            if (t.esc || (!s->top_level && t.len == 2 && t.p[0] == 't' && t.p[1] == 's')) return -1;
            ws(s);
            if (s->cur >= s->end || *s->cur != ':') return -1;
            s->cur++;
            ws(s);
            if (skip_value(s, depth + 1)) return -1;
            ws(s);
            if (s->cur >= s->end) return -1;
            if (*s->cur == ',') { s->cur++; ws(s); continue; }
            if (*s->cur == '}') { s->cur++; return 0; }
            return -1;
        }
    }
    if (c == '[') return skip_array(s, depth);
    if (c == '-' || is_digit(c)) return skip_number(s);   /* checked as lex_number would, its value unused */
    return lex_value(s, &t, depth);
}

/* ---- events --------------------------------------------------------------------------------- */

static int key_is(const Tok *k, const char *word) {
    size_t n = strlen(word);
    return (size_t)k->len == n && memcmp(k->p, word, n) == 0;
}

/* The keys a parser looks for, found by a slot of (length, first and last byte): a key is compared
 * with at most KEY_WAYS words, not all of them (every event has 5-10 keys and its args as many). */
#define KEY_SLOTS 64
#define KEY_WAYS 4
typedef struct { const char *const *words; unsigned char lens[32]; int8_t slot[KEY_SLOTS][KEY_WAYS]; } KeySet;

static unsigned key_slot(const char *p, Py_ssize_t len) {
    return ((unsigned)len * 7u + (unsigned char)p[0] * 3u + (unsigned char)p[len - 1]) & (KEY_SLOTS - 1);
}

static int keyset_init(KeySet *ks, const char *const *words, int n) {
    ks->words = words;
    memset(ks->slot, -1, sizeof(ks->slot));
    for (int j = 0; j < n; j++) {
        size_t len = strlen(words[j]);
        int8_t *c = ks->slot[key_slot(words[j], (Py_ssize_t)len)];
        int w = 0;
        while (w < KEY_WAYS && c[w] >= 0) w++;
        if (w == KEY_WAYS || len > 255 || j > 31) return -1;
        c[w] = (int8_t)j;
        ks->lens[j] = (unsigned char)len;
    }
    return 0;
}

static inline int same_bytes(const char *a, const char *b, size_t n) {
    uint64_t x, y;
    for (; n >= 8; a += 8, b += 8, n -= 8) {
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y) return 0;
    }
    for (; n; n--) if (*a++ != *b++) return 0;
    return 1;
}

/* Index of a (non-empty) key among the set's words, or -1. */
static int key_index(const Tok *k, const KeySet *ks) {
    const int8_t *c = ks->slot[key_slot(k->p, k->len)];
    for (int w = 0; w < KEY_WAYS && c[w] >= 0; w++)
        if ((Py_ssize_t)ks->lens[c[w]] == k->len && same_bytes(k->p, ks->words[c[w]], (size_t)k->len)) return c[w];
    return -1;
}

enum { A_EXT, A_EXT_LC, A_CORR, A_DEV, A_STREAM, A_STREAM_ID, A_DIMS, A_TYPE, A_GRID, A_BLOCK, A_PYID, A_PYPID,
       A_SEQ, A_FWD, A_BYTES, A_FLOPS, A_NAME, A_LABELS, A_CONC, A_DIR,
       A_MEM, A_MEM_LAST = A_MEM + N_MEM - 1, N_ARGS };
static const char *const ARG_KEYS[N_ARGS] = {
    "External id", "external id", "correlation", "device", "stream", "stream_id", "Input Dims", "Input type",
    "grid", "block", "Python id", "Python parent id", "Sequence number", "Fwd thread id", "bytes", "flops",
    "name", "labels", "Concrete Inputs", "direction",
    "Bytes", "Addr", "Total Allocated", "Total Reserved", "Device Type", "Device Id"};
static KeySet ARG_SET;

/* A JSON object, member by member, for the event and its args alike:
 *   for (int r = object_start(s); r == 0; r = member_end(s)) { member_key(...); <the value> }
 * Each returns -1 on anything the reference decoder must judge (the caller gives up on the chunk). */

/* At `{`: 0 when members follow, 1 for an empty object (consumed), -1 when it is not an object. */
static int object_start(Scan *s) {
    if (s->cur >= s->end || *s->cur != '{') return -1;
    s->cur++;
    ws(s);
    if (s->cur < s->end && *s->cur == '}') { s->cur++; return 1; }
    return 0;
}

/* Whether the len bytes at p are the memo's text: p's bytes under the memo's mask (0xFF over the text,
 * 0 past it) equal the zero-padded text, a whole step at a time. p must have MEMO_TEXT bytes readable. */
static inline int memo_matches(const char *p, const KeyMemo *m) {
#if SCAN_SSE2
    for (int i = 0; i < m->len; i += 16) {
        __m128i x = _mm_and_si128(_mm_loadu_si128((const __m128i *)(p + i)), _mm_loadu_si128((const __m128i *)(m->mask + i)));
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(x, _mm_loadu_si128((const __m128i *)(m->text + i)))) != 0xFFFF) return 0;
    }
#else
    for (int i = 0; i < m->len; i += 8) {
        uint64_t x, k, y;
        memcpy(&x, p + i, 8);
        memcpy(&k, m->mask + i, 8);
        memcpy(&y, m->text + i, 8);
        if ((x & k) != y) return 0;
    }
#endif
    return 1;
}

/* A member's `"key":` (no escapes in the key), leaving the value next; *which is the key's index in
 * keys[], or -1 for any other (or an empty) key. `place`: the member's place in its object; memo: the
 * keys last seen at each place of objects of this kind (events, args). Events of one kind write their
 * keys in one order, so what follows is most often the very text met at that place before, from the
 * key's opening quote to its value (`"ph": `): those bytes compared as they stand (a key text without a
 * backslash, ending in its closing quote, is that one string) stand for lexing and looking it up. */
static int member_key(Scan *s, const KeySet *keys, KeyMemo (*memo)[MEMO_WAYS], int place, Tok *key, int *which) {
    KeyMemo *m = place < KEY_MEMO ? memo[place] : NULL;
    if (m && s->end - s->cur >= MEMO_TEXT) {
        for (int w = 0; w < MEMO_WAYS; w++) {
            if (m[w].len && memo_matches(s->cur, &m[w])) {
                key->type = T_STR; key->esc = 0; key->p = s->cur + 1; key->len = m[w].key_len;
                s->cur += m[w].len;
                *which = m[w].which;
                if (w) { KeyMemo t = m[0]; m[0] = m[1]; m[1] = t; }   /* the most recent first */
                ws(s);   /* more whitespace before the value than last time */
                return 0;
            }
        }
    }
    const char *start = s->cur;
    if (s->cur >= s->end || *s->cur != '"' || lex_string(s, key) || key->esc) return -1;
    ws(s);
    if (s->cur >= s->end || *s->cur != ':') return -1;
    s->cur++;
    ws(s);
    *which = key->len ? key_index(key, keys) : -1;
    if (m && s->cur - start <= MEMO_TEXT) {   /* remembered in place of the older of the two */
        m[1] = m[0];
        memset(m[0].text, 0, MEMO_TEXT);
        memcpy(m[0].text, start, (size_t)(s->cur - start));
        memset(m[0].mask, 0, MEMO_TEXT);
        memset(m[0].mask, 0xFF, (size_t)(s->cur - start));
        m[0].len = (int)(s->cur - start);
        m[0].key_len = (int)key->len;
        m[0].which = *which;
    }
    return 0;
}

/* After a member's value: 0 when another member follows (`,`), 1 at the object's `}`, else -1. */
static int member_end(Scan *s) {
    ws(s);
    if (s->cur >= s->end) return -1;
    if (*s->cur == ',') { s->cur++; ws(s); return 0; }
    if (*s->cur == '}') { s->cur++; return 1; }
    return -1;
}

/* *mem_dup: a [memory] figure given twice (the reference keeps the last; only memory.py reads them).
 * a[] comes all T_MISSING (parse_event, which reads one "args" per event at most). */
static int parse_args(Scan *s, Tok *a, int *mem_dup) {
    int r, place = 0;
    for (r = object_start(s); r == 0; r = member_end(s), place++) {   /* args must be an object */
        Tok key;
        int which;
        if (member_key(s, &ARG_SET, s->arg_memo, place, &key, &which)) return -1;
        if (which < 0) {
            if (key.len == 2 && key.p[0] == 't' && key.p[1] == 's') return -1;
            if (skip_value(s, 2)) return -1;
        } else {
            if (a[which].type != T_MISSING) {
                if (which < A_MEM) return -1;   /* a repeated key: left to the reference */
                *mem_dup = 1;
            }
            if (lex_value(s, &a[which], 2)) return -1;
            if ((which == A_DIMS || which == A_TYPE || which == A_GRID || which == A_BLOCK || which == A_CONC)
                && a[which].type == T_STR) {
                a[which].p -= 1;          /* Raw: the value's text, quotes included */
                a[which].len += 2;
            }
        }
    }
    return r < 0 ? -1 : 0;
}

/* msgspec's `int | str | None` and the reference's int_column, as one int64 (-1: absent). */
static int arg_int(const Tok *t, int typed, int64_t *out, int64_t *ignored) {
    switch (t->type) {
    case T_MISSING: case T_NULL: *out = -1; return 0;
    case T_INT: *out = t->i; return 0;
    case T_STR: {
        const char *p = t->p;
        Py_ssize_t n = t->len, k = 0;
        if (t->esc) return -1;
        if (n > 0 && p[0] == '-') k = 1;
        if (n - k >= 1 && n - k <= 18) {
            int digits = 1;
            for (Py_ssize_t j = k; j < n; j++) if (p[j] < '0' || p[j] > '9') { digits = 0; break; }
            if (digits) {
                int64_t v = 0;
                for (Py_ssize_t j = k; j < n; j++) v = v * 10 + (p[j] - '0');
                *out = k ? -v : v;
                return 0;
            }
        }
        /* not digits: absent, provided no float parser could read it (so both reference paths agree) */
        int foreign = n == 0;
        for (Py_ssize_t j = 0; j < n; j++) {
            unsigned char c = (unsigned char)p[j];
            if (c >= 0x80) return -1;
            if (((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) && !strchr("eEiInNfFaAtTyY", c)) foreign = 1;
        }
        if (!foreign) return -1;
        *out = -1;
        (*ignored)++;   /* the reference reads it as absent and counts it in meta.ignored_args */
        return 0;
    }
    default:
        (void)typed;
        return -1;
    }
}

/* Times with float noise (more than 3 fraction digits: 1234.5670000001), read as the reference
 * reads them. Its rule is per chunk of events: where a chunk holds a ts of 2^33 us or more, every
 * ts of the chunk is read from the text, truncated after the ns digit;
 * elsewhere a ts is the double msgspec parses (strtod rounds correctly, as msgspec does) in ns as
 * floor(us) * 1000 + rint(frac(us) * 1000), and a dur is always rint(us * 1000), ties to even.
 * So: a noisy dur -> from its double; a noisy ts of 2^33 us or more (its own chunk reads text)
 * -> truncated text; a noisy ts below -> from its double, provided the
 * trace holds no ts of 2^33 us or more (s->small_noisy, s->big: else the reference decides). */
static int noisy_double(const Tok *t, double *us) {
    char buf[64];
    if (t->len <= 0 || t->len >= (Py_ssize_t)sizeof(buf)) return -1;
    memcpy(buf, t->p, (size_t)t->len);
    buf[t->len] = 0;
    *us = strtod(buf, NULL);
    return 0;
}

/* ts / dur: exact integer ns from the text; only forms where the reference is exact too (and the
 * noisy forms above). */
static int time_ns(Scan *s, const Tok *t, int is_dur, int64_t *out) {
    if (t->type != T_INT && t->type != T_FLOAT) return -1;
    if (t->has_exp) return -1;
    int64_t mag = t->neg ? -t->i : t->i;
    if (!is_dur && mag >= TWO33 - 1) s->big = 1;
    if (t->frac_digits > 3) {
        double us;
        if (noisy_double(t, &us)) return -1;
        if (is_dur) { *out = (int64_t)rint(us * 1000.0); return 0; }
        if (mag == TWO33 - 1) return -1;                       /* which side of 2^33 the double is */
        if (mag < TWO33 - 1) {
            double whole = floor(us);
            s->small_noisy = 1;
            *out = (int64_t)whole * 1000 + (int64_t)rint((us - whole) * 1000.0);
            return 0;
        }
        /* truncated text, below */
    }
    int64_t whole = t->neg ? -t->i : t->i;
    if (whole >= TWO53) return -1;
    int64_t f = t->frac;
    for (int k = t->frac_digits; k < 3; k++) f *= 10;
    int64_t v = whole * 1000 + f;
    *out = t->neg ? -v : v;
    return 0;
}

enum { E_PH, E_CAT, E_NAME, E_PID, E_TID, E_TS, E_DUR, E_ID, E_BP, E_ARGS, N_EV };
static const char *const EV_KEYS[N_EV] = {"ph", "cat", "name", "pid", "tid", "ts", "dur", "id", "bp", "args"};
static KeySet EV_SET;

static int push_i64(Scan *s, int col, int64_t v) { return VEC_PUSH(&s->i64[col], int64_t, v); }

static int intern_tok(Scan *s, Intern *t, Tok *k, int32_t *id) {
    if (plain(s, k)) return -1;
    int type = k->type == T_MISSING ? T_NULL : k->type;
    *id = intern_id(t, type, k->p, k->len, k->i);
    if (*id < 0) { s->nomem = 1; return -1; }
    return 0;
}

/* A [memory] instant (name "[memory]" as written, ph i or I) as trace/memory.py reads it: a row where
 * its time is plain and its six figures are integers, counted as skipped where one is missing or not
 * a number (or the time is absent); anything else (a figure repeated, a float, an integer beyond
 * int64, a time with float noise) sets mem_defer, and memory.py reads the trace's memory events itself. */
static int memory_row(Scan *s, const Tok *e, const Tok *a, int has_ts, int64_t ts, int mem_dup,
                      int32_t pid, int32_t tid) {
    if (mem_dup || (has_ts && e[E_TS].frac_digits > 3)) { s->mem_defer = 1; return 0; }
    int skip = !has_ts;
    int64_t v[N_MEM];
    for (int k = 0; k < N_MEM; k++) {
        const Tok *t = &a[A_MEM + k];
        if (t->type == T_INT) v[k] = t->i;
        else if (t->type == T_FLOAT || t->type == T_BIGINT) { s->mem_defer = 1; return 0; }
        else skip = 1;
    }
    if (skip) { s->mem_skipped++; return 0; }
    if (VEC_PUSH(&s->mem_ts, int64_t, ts) || VEC_PUSH(&s->mem_pid, int32_t, pid) ||
        VEC_PUSH(&s->mem_tid, int32_t, tid))
        return -1;
    for (int k = 0; k < N_MEM; k++)
        if (VEC_PUSH(&s->mem_v[k], int64_t, v[k])) return -1;
    return 0;
}

static int is_memory_name(const Tok *t) {
    return t->type == T_STR && !t->esc && t->len == 8 && memcmp(t->p, "[memory]", 8) == 0;
}

static int parse_event(Scan *s) {
    Tok e[N_EV], a[N_ARGS];
    int mem_dup = 0;
    for (int k = 0; k < N_EV; k++) e[k].type = T_MISSING;
    for (int k = 0; k < N_ARGS; k++) a[k].type = T_MISSING;
    int r, place = 0;
    for (r = object_start(s); r == 0; r = member_end(s), place++) {
        Tok key;
        int which;
        if (member_key(s, &EV_SET, s->ev_memo, place, &key, &which)) return -1;
        if (which < 0) {
            if (skip_value(s, 1)) return -1;
        } else {
            if (e[which].type != T_MISSING) return -1;
            if (which == E_ARGS) {
                if (parse_args(s, a, &mem_dup)) return -1;
                e[which].type = T_COMPOUND;
            } else if (lex_value(s, &e[which], 1)) {
                return -1;
            }
        }
    }
    if (r < 0) return -1;
    /* the types msgspec's Event struct demands */
    if (e[E_PH].type != T_MISSING && (e[E_PH].type != T_STR || e[E_PH].esc)) return -1;
    for (int k = E_CAT; k <= E_BP; k++) {
        int ty = e[k].type;
        if (ty == T_MISSING || ty == T_NULL) continue;
        if (k == E_CAT || k == E_NAME || k == E_BP) { if (ty != T_STR) return -1; }
        else if (k == E_TS || k == E_DUR) { if (ty != T_INT && ty != T_FLOAT) return -1; }
        else if (ty != T_INT && ty != T_STR) return -1;
    }
    for (int k = A_EXT; k <= A_CORR; k++) {
        int ty = a[k].type;
        if (ty != T_MISSING && ty != T_NULL && ty != T_INT && ty != T_STR) return -1;
    }
    int64_t ts = 0, dur = 0;
    int has_ts = e[E_TS].type == T_INT || e[E_TS].type == T_FLOAT;
    if (has_ts && time_ns(s, &e[E_TS], 0, &ts)) return -1;
    if ((e[E_DUR].type == T_INT || e[E_DUR].type == T_FLOAT) && time_ns(s, &e[E_DUR], 1, &dur)) return -1;

    Tok *ph = &e[E_PH];
    if (ph->type == T_STR && !ph->esc && ph->len == 1 && ph->p[0] == 'X') {
        if (!has_ts || e[E_DUR].type == T_MISSING || e[E_DUR].type == T_NULL) return -1;
        if (e[E_DUR].neg || dur >= TWO33 * 1000) return -1;
        int64_t row = (int64_t)s->i64[C_TS].len, v;
        int32_t id;
        if (push_i64(s, C_TS, ts) || push_i64(s, C_DUR, dur)) goto nomem;
        if (intern_tok(s, &s->names, &e[E_NAME], &id) || VEC_PUSH(&s->name, int32_t, id)) goto nomem;
        if (intern_tok(s, &s->cats, &e[E_CAT], &id) || VEC_PUSH(&s->cat, int32_t, id)) goto nomem;
        if (intern_tok(s, &s->pids, &e[E_PID], &id) || VEC_PUSH(&s->pid, int32_t, id)) goto nomem;
        if (intern_tok(s, &s->tids, &e[E_TID], &id) || VEC_PUSH(&s->tid, int32_t, id)) goto nomem;
        static const int direct[][2] = {{A_CORR, C_CORR}, {A_SEQ, C_SEQ}, {A_FWD, C_FWD}, {A_PYID, C_PYID},
                                        {A_PYPID, C_PYPID}, {A_BYTES, C_BYTES}, {A_DEV, C_DEV}};
        for (size_t k = 0; k < sizeof(direct) / sizeof(direct[0]); k++) {
            if (arg_int(&a[direct[k][0]], 0, &v, &s->ignored[direct[k][1]])) return -1;
            if (push_i64(s, direct[k][1], v)) goto nomem;
        }
        Tok *ext = (a[A_EXT].type != T_MISSING && a[A_EXT].type != T_NULL) ? &a[A_EXT] : &a[A_EXT_LC];
        if (arg_int(ext, 1, &v, &s->ignored[C_EXT])) return -1;
        if (push_i64(s, C_EXT, v)) goto nomem;
        Tok *st = (a[A_STREAM].type != T_MISSING && a[A_STREAM].type != T_NULL) ? &a[A_STREAM] : &a[A_STREAM_ID];
        if (arg_int(st, 0, &v, &s->ignored[C_STREAM])) return -1;
        if (push_i64(s, C_STREAM, v)) goto nomem;
        Tok *fl = &a[A_FLOPS];
        double f = Py_NAN;
        if (fl->type == T_INT) {
            f = (double)fl->i;
        } else if (fl->type == T_FLOAT) {
            FloatFix fx = {row, fl->p, fl->len};
            if (VEC_PUSH(&s->fixes, FloatFix, fx)) goto nomem;
        } else if (fl->type != T_MISSING && fl->type != T_NULL) {
            return -1;
        }
        if (VEC_PUSH(&s->flops, double, f)) goto nomem;
        if (a[A_DIMS].type != T_MISSING || a[A_GRID].type != T_MISSING) {
            Shape sh;
            sh.row = row;
            static const int raw[5] = {A_DIMS, A_TYPE, A_GRID, A_BLOCK, A_CONC};
            for (int k = 0; k < 5; k++) {
                const Tok *t = &a[raw[k]];
                sh.text[k] = -1;
                if (t->type == T_MISSING || (k == 4 && blank_concrete(t->p, t->len))) continue;
                sh.text[k] = intern_id(&s->shape_texts, T_STR, t->p, t->len, 0);
                if (sh.text[k] < 0) goto nomem;
            }
            if (VEC_PUSH(&s->shapes, Shape, sh)) goto nomem;
        }
        if (a[A_DIR].type == T_STR) {   /* any other value the reference reads as absent too */
            Direction dr = {row, 0};
            if (intern_tok(s, &s->dir_texts, &a[A_DIR], &dr.text) || VEC_PUSH(&s->dirs, Direction, dr))
                goto nomem;
        }
        return 0;
    }
    /* every other phase is counted by its name */
    int32_t phid;
    Tok phk = *ph;
    if (phk.type == T_MISSING) { phk.type = T_STR; phk.p = ""; phk.len = 0; }
    if (intern_tok(s, &s->phs, &phk, &phid)) goto nomem;
    while (s->ph_counts.len <= (size_t)phid) if (VEC_PUSH(&s->ph_counts, int64_t, 0)) goto nomem;
    ((int64_t *)s->ph_counts.data)[phid]++;
    if (phk.len != 1 || phk.esc) return 0;
    char c = phk.p[0];
    if (c == 'M') {
        for (int k = A_NAME; k <= A_LABELS; k++) {
            int ty = a[k].type;
            if (ty != T_MISSING && ty != T_NULL && ty != T_STR && ty != T_INT) return -1;
        }
        Meta m = {e[E_PID], e[E_TID], e[E_NAME], a[A_NAME], a[A_LABELS]};
        if (VEC_PUSH(&s->metas, Meta, m)) goto nomem;
    } else if (c == 'i' || c == 'I') {
        int32_t id, pid, tid;
        int memory = is_memory_name(&e[E_NAME]), escaped_name = e[E_NAME].type == T_STR && e[E_NAME].esc;
        if (intern_tok(s, &s->names, &e[E_NAME], &id) || VEC_PUSH(&s->inst_name, int32_t, id)) goto nomem;
        if (escaped_name && is_memory_name(&e[E_NAME])) s->mem_defer = 1;   /* memory.py reads names as written */
        if (intern_tok(s, &s->cats, &e[E_CAT], &id) || VEC_PUSH(&s->inst_cat, int32_t, id)) goto nomem;
        if (VEC_PUSH(&s->inst_ts, int64_t, has_ts ? ts : 0)) goto nomem;
        if (intern_tok(s, &s->pids, &e[E_PID], &pid) || VEC_PUSH(&s->inst_pid, int32_t, pid)) goto nomem;
        if (intern_tok(s, &s->tids, &e[E_TID], &tid) || VEC_PUSH(&s->inst_tid, int32_t, tid)) goto nomem;
        if (memory && memory_row(s, e, a, has_ts, ts, mem_dup, pid, tid)) goto nomem;
    } else if (c == 's' || c == 'f' || c == 't') {
        if (!has_ts || e[E_ID].type == T_MISSING || e[E_ID].type == T_NULL) return 0;
        Flow fw;
        fw.ph = (int8_t)(c == 's' ? 0 : c == 'f' ? 1 : 2);
        fw.ts = ts;
        if (intern_tok(s, &s->fids, &e[E_ID], &fw.id)) goto nomem;
        if (intern_tok(s, &s->fcats, &e[E_CAT], &fw.cat)) goto nomem;
        if (intern_tok(s, &s->pids, &e[E_PID], &fw.pid) || intern_tok(s, &s->tids, &e[E_TID], &fw.tid)) goto nomem;
        if (VEC_PUSH(&s->flows, Flow, fw)) goto nomem;
    }
    return 0;
nomem:
    s->nomem = 1;
    return -1;
}

/* ---- the events array ----------------------------------------------------------------------- */

/* The events array from s->cur: on its '[' (open) or on an event inside it. Ends after its ']', or
 * with s->met set where the next event would begin exactly at stop_at. */
static int scan_array(Scan *s, int open, Py_ssize_t stop_at) {
    if (open) {
        if (s->cur >= s->end || *s->cur != '[') return -1;
        s->cur++;
        ws(s);
        if (s->cur < s->end && *s->cur == ']') { s->cur++; return 0; }
    }
    for (;;) {
        if (stop_at >= 0 && s->cur == s->buf + stop_at) { s->met = 1; return 0; }
        if (parse_event(s)) return -1;
        ws(s);
        if (s->cur >= s->end) return -1;
        if (*s->cur == ',') {
            s->cur++;
            ws(s);
            if (s->release && s->cur - s->released >= RELEASE_STEP + RELEASE_KEEP) release_behind(s, 0);
            continue;
        }
        if (*s->cur == ']') { s->cur++; return 0; }
        return -1;
    }
}

/* buffer[start:end] is the whole events array (start == 0) or its part from an event on. */
static int scan_events(Scan *s, Py_ssize_t start, Py_ssize_t stop_at) {
    s->cur = s->buf + start;
    if (scan_array(s, start == 0, stop_at)) return -1;
    if (s->met) return 0;
    ws(s);
    return s->cur == s->end ? 0 : -1;
}

typedef struct { const char *key; Py_ssize_t key_len, start, end; } Member;

/* Top-level members from s->cur (just after '{' or after a value), through the closing '}' and the
 * trailing whitespace; the traceEvents array is scanned in place (stopping at stop_at if met). */
static int scan_members(Scan *s, int first, Py_ssize_t stop_at, int *seen_events) {
    ws(s);
    if (first && s->cur < s->end && *s->cur == '}') { s->cur++; goto done; }
    if (!first) goto after_value;
    for (;;) {
        Tok key;
        if (s->cur >= s->end || *s->cur != '"' || lex_string(s, &key) || key.esc) return -1;
        ws(s);
        if (s->cur >= s->end || *s->cur != ':') return -1;
        s->cur++;
        ws(s);
        if (key_is(&key, "traceEvents")) {
            if (*seen_events || s->cur >= s->end || *s->cur != '[') return -1;
            *seen_events = 1;
            if (scan_array(s, 1, stop_at)) return -1;
            if (s->met) return 0;
        } else {
            Member m = {key.p, key.len, s->cur - s->buf, 0};
            s->top_level = 1;
            int bad = skip_value(s, 1);
            s->top_level = 0;
            if (bad) return -1;
            m.end = s->cur - s->buf;
            if (VEC_PUSH(&s->members, Member, m)) { s->nomem = 1; return -1; }
        }
    after_value:
        ws(s);
        if (s->cur >= s->end) return -1;
        if (*s->cur == ',') { s->cur++; ws(s); continue; }
        if (*s->cur == '}') { s->cur++; break; }
        return -1;
    }
done:
    ws(s);
    return s->cur == s->end && *seen_events ? 0 : -1;
}

/* A whole document: an object holding traceEvents, or a bare events array at byte 0. */
static int scan_document(Scan *s, Py_ssize_t stop_at) {
    s->cur = s->buf;
    if (s->cur < s->end && *s->cur == '[') return scan_events(s, 0, stop_at);
    ws(s);
    if (s->cur >= s->end || *s->cur != '{') return -1;
    s->cur++;
    int seen = 0;
    return scan_members(s, 1, stop_at, &seen);
}

static void scan_free(Scan *s) {
    arena_free(&s->arena);
    intern_free(&s->names); intern_free(&s->cats); intern_free(&s->pids); intern_free(&s->tids);
    intern_free(&s->phs); intern_free(&s->fcats); intern_free(&s->shape_texts); intern_free(&s->fids);
    intern_free(&s->dir_texts);
    for (int k = 0; k < N_I64; k++) vec_free(&s->i64[k]);
    for (int k = 0; k < N_MEM; k++) vec_free(&s->mem_v[k]);
    vec_free(&s->mem_ts); vec_free(&s->mem_pid); vec_free(&s->mem_tid);
    Vec *v[] = {&s->name, &s->cat, &s->pid, &s->tid, &s->flops, &s->shapes, &s->dirs, &s->fixes, &s->metas,
                &s->flows, &s->inst_name, &s->inst_cat, &s->inst_pid, &s->inst_tid, &s->inst_ts, &s->ph_counts};
    for (size_t k = 0; k < sizeof(v) / sizeof(v[0]); k++) vec_free(v[k]);
    vec_free(&s->members);
}

/* ---- phase 2: Python objects ---------------------------------------------------------------- */

static PyObject *str_of(const char *p, Py_ssize_t len, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8(p, len, "strict");
    char *tmp = (char *)malloc((size_t)len + 1);
    if (!tmp) return PyErr_NoMemory();
    PyObject *o = PyUnicode_DecodeUTF8(tmp, unescape(p, len, tmp), "strict");
    free(tmp);
    return o;
}

static PyObject *tok_obj(const Tok *t) {
    if (t->type == T_INT) return PyLong_FromLongLong(t->i);
    if (t->type == T_STR) return str_of(t->p, t->len, t->esc);
    Py_RETURN_NONE;
}

static PyObject *table_list(Intern *t) {
    Entry *e = (Entry *)t->entries.data;
    PyObject *out = PyList_New((Py_ssize_t)t->entries.len);
    if (!out) return NULL;
    for (size_t k = 0; k < t->entries.len; k++) {
        PyObject *o;
        if (e[k].type == T_INT) o = PyLong_FromLongLong(e[k].i);
        else if (e[k].type == T_STR) o = PyUnicode_DecodeUTF8(e[k].p, e[k].len, "strict");
        else { o = Py_None; Py_INCREF(o); }
        if (!o) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, o);
    }
    return out;
}

/* Flow ids as text, as the reference gives them: an integer id as str(int). */
static PyObject *flow_id_list(Intern *t) {
    Entry *e = (Entry *)t->entries.data;
    PyObject *out = PyList_New((Py_ssize_t)t->entries.len);
    if (!out) return NULL;
    for (size_t k = 0; k < t->entries.len; k++) {
        PyObject *o;
        if (e[k].type == T_INT) {
            char buf[32];
            int n = snprintf(buf, sizeof(buf), "%lld", (long long)e[k].i);
            o = PyUnicode_FromStringAndSize(buf, n);
        } else {
            o = PyUnicode_DecodeUTF8(e[k].p, e[k].len, "strict");
        }
        if (!o) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, (Py_ssize_t)k, o);
    }
    return out;
}

/* A column handed to Python without a copy: a read-only buffer over the scan's own array, freed with
 * the object (a copy into bytes, and its page faults, was ~60 ms of a 0.5 GB load, with the GIL held). */
typedef struct { PyObject_HEAD void *data; Py_ssize_t len; size_t mapped; Py_ssize_t exports; } Column;  /* mapped: as Vec's */

static int column_getbuffer(PyObject *o, Py_buffer *view, int flags) {
    Column *b = (Column *)o;
    static char empty[1];
    if (PyBuffer_FillInfo(view, o, b->data ? b->data : empty, b->len, 1, flags) < 0) return -1;
    b->exports++;
    return 0;
}
static void column_releasebuffer(PyObject *o, Py_buffer *view) {
    (void)view;
    ((Column *)o)->exports--;
}
static void column_dealloc(PyObject *o) {
    release(((Column *)o)->data, ((Column *)o)->mapped);
    Py_TYPE(o)->tp_free(o);
}
static Py_ssize_t column_length(PyObject *o) { return ((Column *)o)->len; }
static PyBufferProcs column_buffer = {column_getbuffer, column_releasebuffer};
static PySequenceMethods column_sequence = {.sq_length = column_length};
static PyTypeObject ColumnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profuse.trace._scan.Column",
    .tp_basicsize = sizeof(Column),
    .tp_dealloc = column_dealloc,
    .tp_as_sequence = &column_sequence,
    .tp_as_buffer = &column_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column of the scan: a read-only buffer of its bytes (len: their count).",
};

/* The array of v as a Column, which takes it over (cut to its length): v keeps its length, not its data. */
static PyObject *vec_bytes(Vec *v) {
    Column *b = PyObject_New(Column, &ColumnType);
    if (!b) return NULL;
    size_t n = v->len * v->item;
    void *data = v->data;
    if (data && !v->mapped && n < v->cap * v->item) {  /* a mapping's untouched pages cost no memory */
        void *cut = realloc(data, n ? n : 1);
        if (cut) data = cut;
    }
    b->data = data;
    b->len = (Py_ssize_t)n;
    b->mapped = v->mapped;
    b->exports = 0;
    v->data = NULL;
    v->cap = v->mapped = 0;
    return (PyObject *)b;
}

/* Steals o; 0 on success. */
static int put(PyObject *d, const char *key, PyObject *o) {
    if (!o) return -1;
    int r = PyDict_SetItemString(d, key, o);
    Py_DECREF(o);
    return r;
}

/* Sparse per-event values (Shape, Direction: an int64 event row, then its int32 codes at ``at``) as columns under
 * ``<prefix>_rows`` (int64), ``<prefix>_codes`` (``width`` bytes per row) and ``<prefix>_texts`` (the interned texts). */
static int put_sparse(PyObject *d, const void *data, size_t n, size_t stride, size_t at, size_t width,
                      const char *prefix, Intern *texts) {
    const char *base = (const char *)data;
    PyObject *rows = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(8 * n));
    PyObject *codes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(width * n));
    if (!rows || !codes) { Py_XDECREF(rows); Py_XDECREF(codes); return -1; }
    for (size_t k = 0; k < n; k++) {
        memcpy(PyBytes_AS_STRING(rows) + 8 * k, base + stride * k, 8);
        memcpy(PyBytes_AS_STRING(codes) + width * k, base + stride * k + at, width);
    }
    char key[32];
    snprintf(key, sizeof key, "%s_rows", prefix);
    if (put(d, key, rows)) { Py_DECREF(codes); return -1; }
    snprintf(key, sizeof key, "%s_codes", prefix);
    if (put(d, key, codes)) return -1;
    snprintf(key, sizeof key, "%s_texts", prefix);
    return put(d, key, table_list(texts));
}

static PyObject *members_list(Scan *s) {
    Member *m = (Member *)s->members.data;
    PyObject *l = PyList_New((Py_ssize_t)s->members.len);
    if (!l) return NULL;
    for (size_t k = 0; k < s->members.len; k++) {
        PyObject *t = Py_BuildValue("(s#nn)", m[k].key, m[k].key_len, m[k].start, m[k].end);
        if (!t) { Py_DECREF(l); return NULL; }
        PyList_SET_ITEM(l, (Py_ssize_t)k, t);
    }
    return l;
}

static PyObject *build(Scan *s) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (put(d, "names", table_list(&s->names)) || put(d, "cats", table_list(&s->cats)) ||
        put(d, "pids", table_list(&s->pids)) || put(d, "tids", table_list(&s->tids)))
        goto fail;
    for (int k = 0; k < N_I64; k++)
        if (put(d, I64_NAMES[k], vec_bytes(&s->i64[k]))) goto fail;
    {
        PyObject *ig = PyDict_New();
        if (put(d, "ignored_args", ig)) goto fail;
        for (int k = 0; k < N_I64; k++)
            if (s->ignored[k] && put(ig, IGNORED_NAMES[k], PyLong_FromLongLong(s->ignored[k]))) goto fail;
    }
    /* float flops written as text: converted here, where the C API may be called */
    FloatFix *fx = (FloatFix *)s->fixes.data;
    for (size_t k = 0; k < s->fixes.len; k++) {
        char tmp[64];
        if (fx[k].len >= (Py_ssize_t)sizeof(tmp)) { Py_DECREF(d); Py_RETURN_NONE; }
        memcpy(tmp, fx[k].p, (size_t)fx[k].len);
        tmp[fx[k].len] = 0;
        double f = PyOS_string_to_double(tmp, NULL, NULL);
        if (f == -1.0 && PyErr_Occurred()) goto fail;
        if (Py_IS_INFINITY(f)) { Py_DECREF(d); Py_RETURN_NONE; }
        ((double *)s->flops.data)[fx[k].row] = f;
    }
    if (put(d, "name", vec_bytes(&s->name)) || put(d, "cat", vec_bytes(&s->cat)) ||
        put(d, "pid", vec_bytes(&s->pid)) || put(d, "tid", vec_bytes(&s->tid)) ||
        put(d, "flops", vec_bytes(&s->flops)) ||
        put(d, "inst_name", vec_bytes(&s->inst_name)) || put(d, "inst_cat", vec_bytes(&s->inst_cat)) ||
        put(d, "inst_pid", vec_bytes(&s->inst_pid)) || put(d, "inst_tid", vec_bytes(&s->inst_tid)) ||
        put(d, "inst_ts", vec_bytes(&s->inst_ts)))
        goto fail;
    /* shapes: five codes per row into shape_texts (int32, -1: absent); args.direction: one into dir_texts */
    if (put_sparse(d, s->shapes.data, s->shapes.len, sizeof(Shape), offsetof(Shape, text), sizeof(((Shape *)0)->text),
                   "shape", &s->shape_texts) ||
        put_sparse(d, s->dirs.data, s->dirs.len, sizeof(Direction), offsetof(Direction, text), sizeof(int32_t),
                   "dir", &s->dir_texts))
        goto fail;
    {
        Meta *m = (Meta *)s->metas.data;
        PyObject *l = PyList_New((Py_ssize_t)s->metas.len);
        if (put(d, "metas", l)) goto fail;
        for (size_t k = 0; k < s->metas.len; k++) {
            PyObject *t = PyTuple_New(5);
            if (!t) goto fail;
            PyList_SET_ITEM(l, (Py_ssize_t)k, t);
            const Tok *toks[5] = {&m[k].pid, &m[k].tid, &m[k].name, &m[k].aname, &m[k].alabels};
            for (int j = 0; j < 5; j++) {
                PyObject *o = tok_obj(toks[j]);
                if (!o) goto fail;
                PyTuple_SET_ITEM(t, j, o);
            }
        }
    }
    {
        size_t n = s->flows.len;
        Flow *f = (Flow *)s->flows.data;
        PyObject *ph = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
        PyObject *ts = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
        PyObject *pid = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
        PyObject *tid = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
        /* flow ids: when every one is a JSON integer >= 0 (what Kineto writes), their values (int64 per flow);
           else their texts as the reference gives them (a list per flow). Categories: per flow a code into the
           table of distinct ones, in order of first use. */
        Entry *ids_e = (Entry *)s->fids.entries.data;
        int all_int = 1;
        for (size_t k = 0; k < s->fids.entries.len && all_int; k++)
            all_int = ids_e[k].type == T_INT && ids_e[k].i >= 0;
        PyObject *ints = all_int ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 8)) : (Py_INCREF(Py_None), Py_None);
        PyObject *texts = all_int ? PyList_New(0) : PyList_New((Py_ssize_t)n);
        PyObject *cats = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * 4));
        PyObject *fids = all_int ? (Py_INCREF(Py_None), Py_None) : flow_id_list(&s->fids);
        int bad = put(d, "flow_ph", ph) | put(d, "flow_ts", ts) | put(d, "flow_pid", pid) | put(d, "flow_tid", tid) |
                  put(d, "flow_id_ints", ints) | put(d, "flow_ids", texts) | put(d, "flow_cat_codes", cats) |
                  put(d, "flow_cat_table", table_list(&s->fcats));
        if (bad || !fids) { Py_XDECREF(fids); goto fail; }
        for (size_t k = 0; k < n; k++) {
            PyBytes_AS_STRING(ph)[k] = (char)f[k].ph;
            memcpy(PyBytes_AS_STRING(ts) + 8 * k, &f[k].ts, 8);
            memcpy(PyBytes_AS_STRING(pid) + 4 * k, &f[k].pid, 4);
            memcpy(PyBytes_AS_STRING(tid) + 4 * k, &f[k].tid, 4);
            memcpy(PyBytes_AS_STRING(cats) + 4 * k, &f[k].cat, 4);
            if (all_int) {
                memcpy(PyBytes_AS_STRING(ints) + 8 * k, &ids_e[f[k].id].i, 8);
            } else {
                PyObject *id = PyList_GET_ITEM(fids, f[k].id);
                Py_INCREF(id);
                PyList_SET_ITEM(texts, (Py_ssize_t)k, id);
            }
        }
        Py_DECREF(fids);
    }
    {
        PyObject *phs = table_list(&s->phs);
        PyObject *counts = PyDict_New();
        if (put(d, "phase_counts", counts) || !phs) { Py_XDECREF(phs); goto fail; }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(phs); k++) {
            PyObject *c = PyLong_FromLongLong(((int64_t *)s->ph_counts.data)[k]);
            if (!c || PyDict_SetItem(counts, PyList_GET_ITEM(phs, k), c)) { Py_XDECREF(c); Py_DECREF(phs); goto fail; }
            Py_DECREF(c);
        }
        Py_DECREF(phs);
    }
    for (int k = 0; k < N_MEM; k++)
        if (put(d, MEM_NAMES[k], vec_bytes(&s->mem_v[k]))) goto fail;
    if (put(d, "mem_ts", vec_bytes(&s->mem_ts)) || put(d, "mem_pid", vec_bytes(&s->mem_pid)) ||
        put(d, "mem_tid", vec_bytes(&s->mem_tid)) || put(d, "mem_skipped", PyLong_FromLongLong(s->mem_skipped)) ||
        put(d, "mem_defer", PyBool_FromLong(s->mem_defer)))
        goto fail;
    if (put(d, "members", members_list(s))) goto fail;
    if (put(d, "n", PyLong_FromSize_t(s->i64[C_TS].len)) || put(d, "met", PyBool_FromLong(s->met)) ||
        put(d, "small_noisy", PyBool_FromLong(s->small_noisy)) || put(d, "big", PyBool_FromLong(s->big)) ||
        put(d, "end", PyLong_FromSsize_t(s->cur - s->buf)))
        goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static void scan_init(Scan *s) {
    memset(s, 0, sizeof(*s));
    for (int k = 0; k < N_I64; k++) s->i64[k].item = 8;
    for (int k = 0; k < N_MEM; k++) s->mem_v[k].item = 8;
    s->mem_ts.item = 8;
    s->mem_pid.item = s->mem_tid.item = 4;
    Intern *tables[] = {&s->names, &s->cats, &s->pids, &s->tids, &s->phs, &s->fcats, &s->shape_texts, &s->fids,
                        &s->dir_texts};
    for (size_t k = 0; k < sizeof(tables) / sizeof(tables[0]); k++) tables[k]->entries.item = sizeof(Entry);
    s->name.item = s->cat.item = s->pid.item = s->tid.item = 4;
    s->inst_name.item = s->inst_cat.item = s->inst_pid.item = s->inst_tid.item = 4;
    s->flops.item = 8;
    s->inst_ts.item = 8;
    s->ph_counts.item = 8;
    s->shapes.item = sizeof(Shape);
    s->dirs.item = sizeof(Direction);
    s->fixes.item = sizeof(FloatFix);
    s->metas.item = sizeof(Meta);
    s->flows.item = sizeof(Flow);
    s->members.item = sizeof(Member);
}

PyDoc_STRVAR(scan_doc,
"scan(buffer, start, end, stop_at, mode=0) -> dict | None\n\n"
"Columns of the events in buffer[start:end], or None when the input is anything the scanner does not\n"
"accept (the caller then runs the reference decoder). The GIL is released while scanning.\n"
"mode 0: buffer[start:end] is the events array (start == 0) or its part from the event at start on.\n"
"mode 1: buffer[:end] is a whole trace document (start must be 0): an object with traceEvents, or a\n"
"bare array; its other top-level members come back as (key, start, end) in 'members'.\n"
"mode 2: from the event at start to the ']' closing the array; 'end' is the offset just past it.\n"
"stop_at >= 0 stops where the next event would begin exactly there ('met' is then True).\n"
"release: buffer is a file's read-only mapping, whose pages the scan lets go behind it (madvise\n"
"MADV_DONTNEED: out of this process, not out of the page cache); never for other memory.");

PyDoc_STRVAR(release_doc,
"release(buffer, start, end) -> bool\n\n"
"The whole pages of buffer[start:end] let go (madvise MADV_DONTNEED; a later read faults them in again\n"
"from the file): only for a file's read-only mapping, never for other memory. False where none were.");

static PyObject *release_pages(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, end;
    (void)self;
    if (!PyArg_ParseTuple(args, "Onn:release", &obj, &start, &end)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "span outside the buffer");
        return NULL;
    }
    int done = release_span((const char *)view.buf + start, (const char *)view.buf + end);
    PyBuffer_Release(&view);
    return PyBool_FromLong(done);
}

static PyObject *scan(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t start, end, stop_at;
    int mode = 0, release = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "Onnn|ip:scan", &obj, &start, &end, &stop_at, &mode, &release)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (start < 0 || end > view.len || start > end || mode < 0 || mode > 2 || (mode == 1 && start != 0)) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "span outside the buffer, or an unknown mode");
        return NULL;
    }
    Scan *s = (Scan *)malloc(sizeof(Scan));
    if (!s) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    scan_init(s);
    s->buf = (const char *)view.buf;
    s->end = s->buf + end;
    s->release = release;
    s->released = s->buf + start;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    if (mode == 1) rc = scan_document(s, stop_at);
    else if (mode == 2) { s->cur = s->buf + start; rc = scan_array(s, 0, stop_at); }
    else rc = scan_events(s, start, stop_at);
    if (!rc) release_behind(s, 1);
    Py_END_ALLOW_THREADS
    PyObject *out;
    if (rc) { out = Py_None; Py_INCREF(out); }
    else out = build(s);
    scan_free(s);
    free(s);
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(rest_doc,
"document_rest(buffer, pos) -> list | None\n\n"
"The top-level members after the traceEvents array that ends just before pos, through the closing\n"
"'}' and trailing whitespace, as (key, start, end); None if that part is not accepted.");

static PyObject *document_rest(PyObject *self, PyObject *args) {
    PyObject *obj;
    Py_ssize_t pos;
    (void)self;
    if (!PyArg_ParseTuple(args, "On:document_rest", &obj, &pos)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_SIMPLE) < 0) return NULL;
    if (pos < 0 || pos > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "position outside the buffer");
        return NULL;
    }
    Scan *s = (Scan *)malloc(sizeof(Scan));
    if (!s) { PyBuffer_Release(&view); return PyErr_NoMemory(); }
    scan_init(s);
    s->buf = (const char *)view.buf;
    s->end = s->buf + view.len;
    s->cur = s->buf + pos;
    int seen = 1;
    PyObject *out;
    if (view.len > 0 && s->buf[0] == '[') {  /* a bare array: only whitespace may follow it */
        ws(s);
        out = s->cur == s->end ? PyList_New(0) : (Py_INCREF(Py_None), Py_None);
    } else if (scan_members(s, 0, -1, &seen)) {
        out = Py_None;
        Py_INCREF(out);
    } else {
        out = members_list(s);
    }
    scan_free(s);
    free(s);
    PyBuffer_Release(&view);
    return out;
}

/* --- nesting: each thread's host events by an explicit stack (correlate.nesting's rule), in place --- */

PyDoc_STRVAR(nest_ids_doc,
"nest_ids(ids, thread, ts, dur, parent, depth, slack)\n\n"
"ids (int32 or int64) lists the events to nest, sorted by (thread, start, longer first, id); thread\n"
"(int32 or int64), ts and dur (int64) are every event's columns, an event's end ts + max(dur, 1).\n"
"Writes parent[id] (the innermost earlier listed event on the same thread still open at its start, -1\n"
"if none; int32 or int64) and depth[id] (int32) for each listed id, leaving the other rows as they are:\n"
"no sorted copy of the columns and no array per event beside them. An event ending more than slack ns\n"
"after its parent belongs to the nearest ancestor that holds it (within slack). ids must be distinct\n"
"and in range; the GIL is released.");

static inline int64_t at_int(const void *p, Py_ssize_t size, Py_ssize_t i) {
    return size == 4 ? (int64_t)((const int32_t *)p)[i] : ((const int64_t *)p)[i];
}

static inline int64_t end_of(const int64_t *ts, const int64_t *dur, int64_t i) {
    return ts[i] + (dur[i] > 1 ? dur[i] : 1);
}

static PyObject *nest_ids(PyObject *self, PyObject *args) {
    PyObject *objs[6];
    long long slack;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOL:nest_ids", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5], &slack))
        return NULL;
    /* ids, thread, ts, dur, parent, depth: the item sizes each may have */
    static const int sizes[6][2] = {{4, 8}, {4, 8}, {8, 8}, {8, 8}, {4, 8}, {4, 4}};
    Py_buffer v[6];
    int got = 0;
    for (; got < 6; got++) {
        int flags = got >= 4 ? (PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) : PyBUF_C_CONTIGUOUS;
        if (PyObject_GetBuffer(objs[got], &v[got], flags) < 0) break;
        Py_ssize_t sz = v[got].itemsize;
        int ok = (sz == sizes[got][0] || sz == sizes[got][1]) && v[got].len % sz == 0;
        if (ok && got >= 2) ok = v[got].len / sz == v[1].len / v[1].itemsize;  /* one row per event */
        if (!ok) {
            PyErr_SetString(PyExc_ValueError, "nest_ids: ids, thread, parent int32 or int64, ts and dur int64, "
                                              "depth int32; thread, ts, dur, parent and depth one row per event");
            PyBuffer_Release(&v[got]);
            break;
        }
    }
    if (got < 6) {
        while (got-- > 0) PyBuffer_Release(&v[got]);
        return NULL;
    }
    Py_ssize_t m = v[0].len / v[0].itemsize, n = v[1].len / v[1].itemsize;
    Py_ssize_t s_ids = v[0].itemsize, s_th = v[1].itemsize, s_par = v[4].itemsize;
    const void *ids = v[0].buf, *th = v[1].buf;
    const int64_t *ts = (const int64_t *)v[2].buf, *dur = (const int64_t *)v[3].buf;
    void *parent = v[4].buf;
    int32_t *depth = (int32_t *)v[5].buf;
    int bad = 0;
    for (Py_ssize_t k = 0; k < m && !bad; k++) {
        int64_t i = at_int(ids, s_ids, k);
        bad = i < 0 || i >= n;
    }
    int64_t *stack = bad ? NULL : (int64_t *)malloc(sizeof(int64_t) * (size_t)(m > 0 ? m : 1));
    if (bad || !stack) {
        for (int k = 0; k < 6; k++) PyBuffer_Release(&v[k]);
        if (bad) {
            PyErr_SetString(PyExc_ValueError, "nest_ids: an id outside the events");
            return NULL;
        }
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t top = 0;  /* stack[0 .. top): ids */
    int64_t prev_th = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        int64_t i = at_int(ids, s_ids, k), t = at_int(th, s_th, i);
        if (k > 0 && t != prev_th) top = 0;
        prev_th = t;
        while (top > 0 && end_of(ts, dur, stack[top - 1]) <= ts[i]) top--;
        int64_t p = top > 0 ? stack[top - 1] : -1;
        /* one that outlives its parent by more than slack belongs to the nearest ancestor that holds it:
           parents come earlier, so theirs are final (their depths too) */
        int64_t e = end_of(ts, dur, i);
        while (p >= 0) {
            int64_t pe = end_of(ts, dur, p);
            if (!(e > pe && e - pe > slack)) break;
            p = at_int(parent, s_par, p);
        }
        if (s_par == 4) ((int32_t *)parent)[i] = (int32_t)p;
        else ((int64_t *)parent)[i] = p;
        depth[i] = p >= 0 ? depth[p] + 1 : 0;
        stack[top++] = i;
    }
    Py_END_ALLOW_THREADS
    free(stack);
    for (int k = 0; k < 6; k++) PyBuffer_Release(&v[k]);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(join_doc,
"join(pairs[, split_from])\n\n"
"For each (a, b, remap) of the list pairs, Column a grows to hold its own values and then b's (b is left as\n"
"it is): the two halves of a split scan made one column without a third array, a's pages kept where they\n"
"are (a mapping grows by mremap). With remap (an int32 buffer; else None) a and b hold int32 codes and each\n"
"of b's codes c is appended as remap[c]. Every pair is checked before any is joined: ValueError where an a\n"
"is exported (a view of it alive) or appears twice, or a code falls outside its remap. From split_from bytes\n"
"of b's in all (64 MiB), a second thread copies the second half of every column: the copies write fresh\n"
"pages, whose faults are most of their cost.");

typedef struct { Column *a, *b; Py_buffer r; int remap; size_t old; } Pair;

#define JOIN_SPLIT_MIN ((size_t)64 << 20)

/* the items [lo, hi) of the pair's b appended at their place in its a (grown already) */
static void join_copy(Pair *p, size_t lo, size_t hi) {
    char *dst = (char *)p->a->data + p->old;
    if (p->remap) {
        const int32_t *codes = (const int32_t *)p->b->data, *table = (const int32_t *)p->r.buf;
        int32_t *out = (int32_t *)dst;
        for (size_t i = lo; i < hi; i++) out[i] = table[codes[i]];
    } else {
        memcpy(dst + lo, (const char *)p->b->data + lo, hi - lo);
    }
}

typedef struct { Pair *pairs; Py_ssize_t n; int half; } JoinPart;

/* every pair's first (half 0) or second (half 1) half of its items */
static void *join_part(void *arg) {
    JoinPart *w = (JoinPart *)arg;
    for (Py_ssize_t k = 0; k < w->n; k++) {
        Pair *p = &w->pairs[k];
        size_t items = (size_t)p->b->len / (p->remap ? 4 : 1), mid = items / 2;
        join_copy(p, w->half ? mid : 0, w->half ? items : mid);
    }
    return NULL;
}

#if defined(__linux__) || defined(__APPLE__)
#include <pthread.h>
#define JOIN_THREADS 1
#endif

/* the copies of every pair, on two threads where there is much to copy and a thread starts */
static void join_copies(Pair *pairs, Py_ssize_t n, size_t total, size_t split_from) {
    JoinPart first = {pairs, n, 0}, second = {pairs, n, 1};
#ifdef JOIN_THREADS
    pthread_t other;
    if (total >= split_from && pthread_create(&other, NULL, join_part, &second) == 0) {
        join_part(&first);
        pthread_join(other, NULL);
        return;
    }
#else
    (void)total;
    (void)split_from;
#endif
    join_part(&first);
    join_part(&second);
}

static int join_check(PyObject *item, Pair *p) {
    PyObject *ao, *bo, *ro;
    if (!PyArg_ParseTuple(item, "O!O!O:join", &ColumnType, &ao, &ColumnType, &bo, &ro)) return -1;
    p->a = (Column *)ao;
    p->b = (Column *)bo;
    p->remap = 0;
    if (p->a == p->b || p->a->exports) {
        PyErr_SetString(PyExc_ValueError, "join: a column to grow is in use");
        return -1;
    }
    if (ro == Py_None) return 0;
    if (PyObject_GetBuffer(ro, &p->r, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    p->remap = 1;
    const char *f = p->r.format;
    if (p->r.itemsize != 4 || !f || (strcmp(f, "i") && strcmp(f, "=i") && strcmp(f, "<i")) ||
        p->a->len % 4 || p->b->len % 4) {
        PyErr_SetString(PyExc_ValueError, "join: a remap takes int32 codes into an int32 table");
        return -1;
    }
    const int32_t *codes = (const int32_t *)p->b->data;
    Py_ssize_t n = p->b->len / 4, size = p->r.len / 4;
    for (Py_ssize_t k = 0; k < n; k++)
        if (codes[k] < 0 || codes[k] >= size) {
            PyErr_SetString(PyExc_ValueError, "join: a code outside its remap");
            return -1;
        }
    return 0;
}

static PyObject *join(PyObject *self, PyObject *args) {
    PyObject *list;
    Py_ssize_t split_from = (Py_ssize_t)JOIN_SPLIT_MIN;
    (void)self;
    if (!PyArg_ParseTuple(args, "O!|n:join", &PyList_Type, &list, &split_from)) return NULL;
    if (split_from < 0) split_from = 0;
    Py_ssize_t n = PyList_GET_SIZE(list), got = 0;
    Pair *pairs = (Pair *)calloc((size_t)(n ? n : 1), sizeof(Pair));
    if (!pairs) return PyErr_NoMemory();
    PyObject *result = NULL;
    for (; got < n; got++) {
        if (join_check(PyList_GET_ITEM(list, got), &pairs[got])) {
            if (pairs[got].remap) PyBuffer_Release(&pairs[got].r);
            goto done;
        }
        for (Py_ssize_t j = 0; j < got; j++)
            if (pairs[j].a == pairs[got].a) {
                if (pairs[got].remap) PyBuffer_Release(&pairs[got].r);
                PyErr_SetString(PyExc_ValueError, "join: a column to grow appears twice");
                goto done;
            }
    }
    /* every a grown first (a failure leaves each a's values as they were), then the copies */
    size_t total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        Pair *p = &pairs[k];
        size_t old = (size_t)p->a->len, add = (size_t)p->b->len;
        p->old = old;
        if (!add) continue;
        Vec v = {p->a->data, old, old, 1, p->a->mapped};  /* a's bytes as a Vec, grown as the scan grows its own */
        if (vec_grow(&v, old + add)) {
            PyErr_NoMemory();
            goto done;
        }
        p->a->data = v.data;
        p->a->mapped = v.mapped;
        total += add;
    }
    Py_BEGIN_ALLOW_THREADS
    join_copies(pairs, n, total, (size_t)split_from);
    Py_END_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++)
        pairs[k].a->len = (Py_ssize_t)(pairs[k].old + (size_t)pairs[k].b->len);
    Py_INCREF(Py_None);
    result = Py_None;
done:
    for (Py_ssize_t k = 0; k < got; k++)
        if (pairs[k].remap) PyBuffer_Release(&pairs[k].r);
    free(pairs);
    return result;
}

static PyMethodDef methods[] = {
    {"join", join, METH_VARARGS, join_doc},
    {"scan", scan, METH_VARARGS, scan_doc},
    {"document_rest", document_rest, METH_VARARGS, rest_doc},
    {"nest_ids", nest_ids, METH_VARARGS, nest_ids_doc},
    {"release", release_pages, METH_VARARGS, release_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "A compiled scanner for Kineto trace JSON (see trace/_scan.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    if (keyset_init(&ARG_SET, ARG_KEYS, N_ARGS) || keyset_init(&EV_SET, EV_KEYS, N_EV)) {
        PyErr_SetString(PyExc_ImportError, "_scan: the key sets do not fit their slots");
        return NULL;
    }
    if (PyType_Ready(&ColumnType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "SSE2", SCAN_SSE2)) { Py_DECREF(m); return NULL; }
    return m;
}
