/* Compiled parts of the load after the scan (loaded by trace/compiled.py; each has a numpy or
 * Python twin that runs where this extension is not built, and tests compare the two).
 *
 * arrow_stream(columns, length, batch): the events table's arrays as an Arrow C stream for DuckDB
 * (its twin: trace/_write.py's numpy frames; see the section below).
 *
 * memory_events(buffer): torch.profiler's [memory] instant events read straight into columns, the
 * compiled twin of trace/memory.py's quick path (_cut + _typed).
 *
 * Like _scan.c it is an accelerator, not a second decoder: memory_events(buffer) answers None on
 * anything the quick Python path might not read exactly so, and the caller then runs that path,
 * which accepts, falls back or refuses as it always did. It answers columns only when every
 * occurrence of the text "[memory]" (quoted) is the name of one flat event object
 *   - found as the Python cut finds it: the last '{' before the name, no '}' between, preceded by
 *     '[' or ',' (whitespace allowed);
 *   - whose values are plain scalars, but for one "args" object of plain scalars, with no brace
 *     in any string and no repeated key that is read;
 *   - with "ph" "i" or "I", "ts" a number without exponent, pid and tid integers, plain ASCII
 *     strings without escapes, null or absent, and the six figures (Bytes, Addr, Total Allocated,
 *     Total Reserved, Device Type, Device Id) integers that fit in 64 bits.
 * Each event's time comes back both as the double the text reads as (ts_us) and as exact ns from
 * the text (ts_ns: whole µs * 1000 + the first three decimals), for memory.py's rule between them.
 *
 * read_file(fd, n, parts): a plain trace file's bytes, read by several threads (see its section).
 *
 * map_file(fd, n, settled_ns): a plain trace file's bytes mapped read-only, guarded against the file being cut
 * short meanwhile (see its section).
 *
 * decimal_text(values): int64 values as decimal text, for an Arrow dictionary (trace/_write.py).
 *
 * op_memory(...): the op_memory table's figures (trace/memory.py; its numpy twin _op_memory_numpy).
 *
 * attribute(...): each op-table event's self CPU and device time (trace/correlate.py; twin _attribute_numpy).
 *
 * enclosing(...): each event's enclosing scope (trace/correlate.py; twin _enclosing_numpy).
 *
 * holders, started, covering, tally: which host interval holds each idle time, and the time per name
 * (analysis/diagnosis/levers.py; twins _holders_numpy, np.searchsorted, _covering_numpy, _tally_numpy).
 *
 * The buffer is read without the GIL; only the C API, the C standard library and (for read_file,
 * but for Windows) POSIX pread and threads, and (for map_file, on Linux) mmap and sigaction are used.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>

#define MAX_THREADS 1024
#define N_FIGS 6

typedef struct { void *data; size_t len, cap, item; } Vec;

static int vec_push(Vec *v, const void *x) {
    if (v->len == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        void *p = realloc(v->data, cap * v->item);
        if (!p) return -1;
        v->data = p;
        v->cap = cap;
    }
    memcpy((char *)v->data + v->len * v->item, x, v->item);
    v->len++;
    return 0;
}

typedef struct { size_t start, len; } Span;          /* text of a pid or tid ("" when len 0) */
typedef struct { Span pid, tid; } ThreadText;

typedef struct {
    const unsigned char *s;
    size_t n;
    Vec ts_us, ts_ns, figs[N_FIGS], thread;
    ThreadText threads[MAX_THREADS];
    size_t n_threads, last_thread;
    int oom;
} Scan;

static const char *const FIG_KEYS[N_FIGS] = {"Bytes", "Addr", "Total Allocated", "Total Reserved",
                                             "Device Type", "Device Id"};
static const char NAME[] = "\"[memory]\"";

static int is_ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const Scan *sc, size_t i) {
    while (i < sc->n && is_ws(sc->s[i])) i++;
    return i;
}

/* A string at i (its opening quote): end just past the closing quote, or 0 when it holds a brace
 * (the Python cut would not cut such an event as one), a control byte, or runs off the end.
 * *plain: no escape and no byte >= 0x80. */
static size_t string_end(const Scan *sc, size_t i, int *plain) {
    *plain = 1;
    for (i++; i < sc->n; i++) {
        unsigned char c = sc->s[i];
        if (c == '"') return i + 1;
        if (c == '{' || c == '}' || c < 0x20) return 0;
        if (c >= 0x80) *plain = 0;
        if (c == '\\') {
            *plain = 0;
            if (++i >= sc->n) return 0;
            if (sc->s[i] == '{' || sc->s[i] == '}' || sc->s[i] < 0x20) return 0;
        }
    }
    return 0;
}

/* A JSON number at i: end, or 0. *intlike: no fraction and no exponent; *expo: has an exponent. */
static size_t number_end(const Scan *sc, size_t i, int *intlike, int *expo) {
    size_t j = i;
    *intlike = 1;
    *expo = 0;
    if (j < sc->n && sc->s[j] == '-') j++;
    size_t d = j;
    while (j < sc->n && sc->s[j] >= '0' && sc->s[j] <= '9') j++;
    if (j == d) return 0;
    if (j < sc->n && sc->s[j] == '.') {
        *intlike = 0;
        size_t f = ++j;
        while (j < sc->n && sc->s[j] >= '0' && sc->s[j] <= '9') j++;
        if (j == f) return 0;
    }
    if (j < sc->n && (sc->s[j] == 'e' || sc->s[j] == 'E')) {
        *intlike = 0;
        *expo = 1;
        j++;
        if (j < sc->n && (sc->s[j] == '+' || sc->s[j] == '-')) j++;
        size_t e = j;
        while (j < sc->n && sc->s[j] >= '0' && sc->s[j] <= '9') j++;
        if (j == e) return 0;
    }
    return j;
}

/* A scalar value at i (string, number, true, false, null): end, or 0 (an array, an object, bad). */
static size_t scalar_end(const Scan *sc, size_t i) {
    if (i >= sc->n) return 0;
    unsigned char c = sc->s[i];
    int a, b;
    if (c == '"') return string_end(sc, i, &a);
    if (c == '-' || (c >= '0' && c <= '9')) return number_end(sc, i, &a, &b);
    static const char *const words[3] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t w = strlen(words[k]);
        if (i + w <= sc->n && memcmp(sc->s + i, words[k], w) == 0) return i + w;
    }
    return 0;
}

/* A plain integer [i, end) that fits in int64 -> *out; 0 when it is not one. */
static int parse_int(const Scan *sc, size_t i, size_t end, int64_t *out) {
    int neg = sc->s[i] == '-';
    size_t j = i + neg;
    if (end - j > 19) return 0;
    uint64_t v = 0;
    for (; j < end; j++) {
        unsigned d = (unsigned)(sc->s[j] - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* A key at i compared with lit. */
static int key_is(const Scan *sc, size_t i, size_t end, const char *lit) {
    size_t w = strlen(lit);
    return end - i == w + 2 && memcmp(sc->s + i + 1, lit, w) == 0;
}

/* pid or tid value [i, end): an integer (not "-0", at most 18 digits), a plain string, or null. */
static int thread_text(const Scan *sc, size_t i, size_t end, Span *out) {
    unsigned char c = sc->s[i];
    if (c == 'n' && end - i == 4) { out->start = i; out->len = 0; return 1; }  /* null: "" */
    if (c == '"') {
        int plain;
        if (string_end(sc, i, &plain) != end || !plain) return 0;
        out->start = i + 1;
        out->len = end - i - 2;
        return 1;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        int intlike, expo;
        if (number_end(sc, i, &intlike, &expo) != end || !intlike || end - i > 18) return 0;
        if (end - i == 2 && c == '-' && sc->s[i + 1] == '0') return 0;
        out->start = i;
        out->len = end - i;
        return 1;
    }
    return 0;
}

static int same_span(const Scan *sc, Span a, Span b) {
    return a.len == b.len && memcmp(sc->s + a.start, sc->s + b.start, a.len) == 0;
}

static int32_t thread_code(Scan *sc, ThreadText t) {
    for (size_t k = 0; k < sc->n_threads; k++) {
        size_t at = (sc->last_thread + k) % sc->n_threads;
        if (same_span(sc, sc->threads[at].pid, t.pid) && same_span(sc, sc->threads[at].tid, t.tid)) {
            sc->last_thread = at;
            return (int32_t)at;
        }
    }
    if (sc->n_threads == MAX_THREADS) return -1;
    sc->threads[sc->n_threads] = t;
    sc->last_thread = sc->n_threads;
    return (int32_t)sc->n_threads++;
}

/* The args object at i: the six figures into figs; end past its '}', or 0. */
static size_t read_args(const Scan *sc, size_t i, int64_t *figs) {
    int seen[N_FIGS] = {0};
    i = skip_ws(sc, i + 1);
    if (i < sc->n && sc->s[i] == '}') return 0;  /* no figures */
    for (;;) {
        int plain;
        if (i >= sc->n || sc->s[i] != '"') return 0;
        size_t kend = string_end(sc, i, &plain);
        if (!kend || !plain) return 0;
        size_t v = skip_ws(sc, kend);
        if (v >= sc->n || sc->s[v] != ':') return 0;
        v = skip_ws(sc, v + 1);
        size_t vend = scalar_end(sc, v);
        if (!vend) return 0;
        for (int k = 0; k < N_FIGS; k++) {
            if (!key_is(sc, i, kend, FIG_KEYS[k])) continue;
            int intlike, expo;
            if (seen[k] || sc->s[v] == '"' || number_end(sc, v, &intlike, &expo) != vend || !intlike ||
                !parse_int(sc, v, vend, &figs[k]))
                return 0;
            seen[k] = 1;
        }
        i = skip_ws(sc, vend);
        if (i >= sc->n) return 0;
        if (sc->s[i] == '}') break;
        if (sc->s[i] != ',') return 0;
        i = skip_ws(sc, i + 1);
    }
    for (int k = 0; k < N_FIGS; k++)
        if (!seen[k]) return 0;
    return i + 1;
}

/* The time [i, end) as written: exact ns from the text and the double it reads as; 0 when it has
 * an exponent or more whole digits than 64-bit ns hold. */
static int read_ts(const Scan *sc, size_t i, size_t end, int64_t *ns, double *us) {
    int intlike, expo;
    if (number_end(sc, i, &intlike, &expo) != end || expo || end - i > 60) return 0;
    size_t j = i + (sc->s[i] == '-');
    uint64_t whole = 0;
    for (; j < end && sc->s[j] != '.'; j++) {
        if (whole > 9000000000000000ULL / 10) return 0;
        whole = whole * 10 + (uint64_t)(sc->s[j] - '0');
    }
    if (whole > 9000000000000000ULL) return 0;
    uint64_t frac = 0;
    int digits = 0;
    if (j < end) j++;  /* the '.' */
    for (; j < end && digits < 3; j++, digits++) frac = frac * 10 + (uint64_t)(sc->s[j] - '0');
    for (; digits < 3; digits++) frac *= 10;
    int64_t v = (int64_t)(whole * 1000 + frac);
    *ns = sc->s[i] == '-' ? -v : v;
    char buf[64];
    memcpy(buf, sc->s + i, end - i);
    buf[end - i] = 0;
    *us = strtod(buf, NULL);  /* correctly rounded in glibc, as msgspec's float */
    return 1;
}

/* The event object at start ('{') whose name is at pos: appended to the columns; end past its '}',
 * or 0 when this event is not one the quick path reads (see the top of the file). */
static size_t read_event(Scan *sc, size_t start, size_t pos) {
    int64_t figs[N_FIGS], ns = 0;
    double us = 0;
    ThreadText t = {{0, 0}, {0, 0}};
    int have_name = 0, have_ph = 0, have_ts = 0, have_pid = 0, have_tid = 0, have_args = 0;
    size_t i = skip_ws(sc, start + 1);
    for (;;) {
        int plain;
        if (i >= sc->n || sc->s[i] != '"') return 0;
        size_t kend = string_end(sc, i, &plain);
        if (!kend) return 0;
        size_t v = skip_ws(sc, kend);
        if (v >= sc->n || sc->s[v] != ':') return 0;
        v = skip_ws(sc, v + 1);
        size_t vend;
        if (plain && key_is(sc, i, kend, "args")) {
            if (have_args || v >= sc->n || sc->s[v] != '{') return 0;
            vend = read_args(sc, v, figs);
            have_args = 1;
        } else {
            vend = scalar_end(sc, v);
        }
        if (!vend) return 0;
        if (!plain) {
            /* an escaped key may spell a key read below: left to the Python path */
            return 0;
        } else if (key_is(sc, i, kend, "name")) {
            if (have_name++ || v != pos || vend - v != sizeof NAME - 1) return 0;
        } else if (key_is(sc, i, kend, "ph")) {
            if (have_ph++ || vend - v != 3 || sc->s[v] != '"' || (sc->s[v + 1] != 'i' && sc->s[v + 1] != 'I'))
                return 0;
        } else if (key_is(sc, i, kend, "ts")) {
            if (have_ts++ || !read_ts(sc, v, vend, &ns, &us)) return 0;
        } else if (key_is(sc, i, kend, "pid")) {
            if (have_pid++ || !thread_text(sc, v, vend, &t.pid)) return 0;
        } else if (key_is(sc, i, kend, "tid")) {
            if (have_tid++ || !thread_text(sc, v, vend, &t.tid)) return 0;
        }
        i = skip_ws(sc, vend);
        if (i >= sc->n) return 0;
        if (sc->s[i] == '}') break;
        if (sc->s[i] != ',') return 0;
        i = skip_ws(sc, i + 1);
    }
    if (!have_name || !have_ph || !have_ts || !have_args) return 0;
    int32_t code = thread_code(sc, t);
    if (code < 0) return 0;
    if (vec_push(&sc->ts_us, &us) || vec_push(&sc->ts_ns, &ns) || vec_push(&sc->thread, &code)) {
        sc->oom = 1;
        return 0;
    }
    for (int k = 0; k < N_FIGS; k++)
        if (vec_push(&sc->figs[k], &figs[k])) {
            sc->oom = 1;
            return 0;
        }
    return i + 1;
}

/* The next quoted "[memory]" from ``from``: found by its '[' (rare in a trace), portably. */
static const unsigned char *find(const unsigned char *s, size_t n, size_t from) {
    const size_t w = sizeof NAME - 1;
    size_t i = from + 1;
    while (i < n) {
        const unsigned char *p = memchr(s + i, '[', n - i);
        if (!p) return NULL;
        size_t at = (size_t)(p - s) - 1;
        if (at + w <= n && memcmp(s + at, NAME, w) == 0) return s + at;
        i = (size_t)(p - s) + 1;
    }
    return NULL;
}

/* Phase 1, without the GIL: 1 when every memory event was read, 0 to decline. */
static int scan(Scan *sc) {
    const unsigned char *hit = find(sc->s, sc->n, 0);
    while (hit) {
        size_t pos = (size_t)(hit - sc->s), start = pos;
        while (start > 0 && sc->s[start - 1] != '{') start--;
        if (start == 0) return 0;
        start--;
        if (memchr(sc->s + start, '}', pos - start)) return 0;
        size_t b = start;
        while (b > 0 && is_ws(sc->s[b - 1])) b--;
        if (b == 0 || (sc->s[b - 1] != '[' && sc->s[b - 1] != ',')) return 0;
        size_t end = read_event(sc, start, pos);
        if (!end) return 0;
        hit = find(sc->s, sc->n, end);
    }
    return 1;
}

static PyObject *column(const Vec *v) {
    return PyBytes_FromStringAndSize(v->data ? (const char *)v->data : "", (Py_ssize_t)(v->len * v->item));
}

static PyObject *text(const Scan *sc, Span span) {
    return PyUnicode_DecodeASCII((const char *)sc->s + span.start, (Py_ssize_t)span.len, "strict");
}

static PyObject *result(const Scan *sc) {
    PyObject *out = PyDict_New(), *threads = PyList_New((Py_ssize_t)sc->n_threads);
    if (!out || !threads) goto fail;
    for (size_t k = 0; k < sc->n_threads; k++) {
        PyObject *pid = text(sc, sc->threads[k].pid), *tid = pid ? text(sc, sc->threads[k].tid) : NULL;
        PyObject *pair = tid ? PyTuple_Pack(2, pid, tid) : NULL;
        Py_XDECREF(pid);
        Py_XDECREF(tid);
        if (!pair) goto fail;
        PyList_SET_ITEM(threads, (Py_ssize_t)k, pair);
    }
    static const char *const names[N_FIGS] = {"bytes", "addr", "total_allocated", "total_reserved",
                                              "device_type", "device"};
    struct { const char *key; const Vec *v; } cols[N_FIGS + 3] = {
        {"ts_us", &sc->ts_us}, {"ts_ns", &sc->ts_ns}, {"thread", &sc->thread}};
    for (int k = 0; k < N_FIGS; k++) {
        cols[3 + k].key = names[k];
        cols[3 + k].v = &sc->figs[k];
    }
    for (int k = 0; k < N_FIGS + 3; k++) {
        PyObject *c = column(cols[k].v);
        if (!c || PyDict_SetItemString(out, cols[k].key, c)) {
            Py_XDECREF(c);
            goto fail;
        }
        Py_DECREF(c);
    }
    if (PyDict_SetItemString(out, "threads", threads)) goto fail;
    Py_DECREF(threads);
    return out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(threads);
    return NULL;
}

static PyObject *memory_events(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE)) return NULL;
    Scan *sc = calloc(1, sizeof *sc);
    if (!sc) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    sc->s = buf.buf;
    sc->n = (size_t)buf.len;
    sc->ts_us.item = sizeof(double);
    sc->ts_ns.item = sizeof(int64_t);
    sc->thread.item = sizeof(int32_t);
    for (int k = 0; k < N_FIGS; k++) sc->figs[k].item = sizeof(int64_t);
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = scan(sc);
    Py_END_ALLOW_THREADS
    PyObject *out;
    if (sc->oom) out = PyErr_NoMemory();
    else if (!ok) out = Py_NewRef(Py_None);
    else out = result(sc);
    free(sc->ts_us.data);
    free(sc->ts_ns.data);
    free(sc->thread.data);
    for (int k = 0; k < N_FIGS; k++) free(sc->figs[k].data);
    free(sc);
    PyBuffer_Release(&buf);
    return out;
}

/* ---- ancestors ------------------------------------------------------------------------------ */

/* The index columns of ancestors, enclosing and attribute (event ids, -1 for none, and counts of events) are
 * int64, or int32 where the caller passes width 4 (a trace of fewer than 2^31 events: correlate builds its
 * columns so, half the bytes). Each pass is written once, for an index type T, and made for both. */
#define INDEX_WIDTH_OK(w) ((w) == 4 || (w) == 8)

#define DEFINE_ANCESTORS(NAME, T)                                                                          \
    static int NAME(const T *parent, const unsigned char *accept, T *out, size_t n) {                    \
        const T UNKNOWN = -2;                                                                             \
        for (size_t i = 0; i < n; i++) out[i] = UNKNOWN;                                                  \
        for (size_t i = 0; i < n; i++) {                                                                  \
            if (out[i] != UNKNOWN) continue;                                                              \
            int64_t j = (int64_t)i, answer = -1;                                                          \
            size_t steps = 0;                                                                             \
            for (;;) { /* the answer: an accepted event, one answered already, or the root's end */      \
                if (j < 0) { answer = -1; break; }                                                        \
                if (out[j] != UNKNOWN) { answer = out[j]; break; }                                        \
                if (accept[j]) { answer = j; break; }                                                     \
                int64_t p = parent[j];                                                                    \
                if (p < -1 || p >= (int64_t)n || ++steps > n) return 1;                                   \
                j = p;                                                                                    \
            }                                                                                             \
            for (int64_t k = (int64_t)i; k >= 0 && out[k] == UNKNOWN; k = parent[k]) {                    \
                out[k] = (T)answer; /* every event on the path up to the answer's has that answer */     \
                if (k == answer) break;                                                                   \
            }                                                                                             \
        }                                                                                                 \
        return 0;                                                                                         \
    }
DEFINE_ANCESTORS(ancestors64, int64_t)
DEFINE_ANCESTORS(ancestors32, int32_t)

/* ancestors(parent, accept, out[, width]): out[i] = the nearest of i and its ancestors (by parent, -1 ends)
 * for which accept holds, else -1 (correlate.nearest_ancestor with include_self). Each chain is walked
 * once: a walk stops at the first event already answered and writes its answer back along the path.
 * parent and out: index columns (int64, or int32 with width 4); accept: bool (one byte each); all of one
 * length, C-contiguous. */
static PyObject *ancestors(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer pb, ab, ob;
    int width = 8;
    if (!PyArg_ParseTuple(args, "y*y*w*|i", &pb, &ab, &ob, &width)) return NULL;
    PyObject *ret = NULL;
    if (!INDEX_WIDTH_OK(width)) {
        PyErr_SetString(PyExc_ValueError, "ancestors: width must be 4 or 8");
        goto done;
    }
    size_t n = (size_t)pb.len / (size_t)width;
    if ((size_t)pb.len != n * (size_t)width || (size_t)ab.len != n || (size_t)ob.len != n * (size_t)width) {
        PyErr_SetString(PyExc_ValueError, "ancestors: parent, accept and out differ in length");
        goto done;
    }
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = width == 8 ? ancestors64(pb.buf, ab.buf, ob.buf, n) : ancestors32(pb.buf, ab.buf, ob.buf, n);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "ancestors: a parent is out of range or the parents form a cycle");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&pb);
    PyBuffer_Release(&ab);
    PyBuffer_Release(&ob);
    return ret;
}

/* Whether buffers b[0..] have the lengths `layout` gives them, one letter each: 'q' int64, 'x' an index
 * column (`width` bytes an item: 4 or 8) and 'b' bool (one byte) of n items, 'Q' int64 of m items; n and m
 * are read from the first 'q' or 'x' and the first 'Q'. */
static int column_lengths(const Py_buffer *b, const char *layout, size_t *n, size_t *m, int width) {
    int have_n = 0, have_m = 0;
    *n = *m = 0;
    for (int k = 0; layout[k]; k++) {
        size_t len = (size_t)b[k].len, *count = layout[k] == 'Q' ? m : n;
        int *have = layout[k] == 'Q' ? &have_m : &have_n;
        size_t item = layout[k] == 'b' ? 1 : layout[k] == 'x' ? (size_t)width : sizeof(int64_t);
        if (!*have && layout[k] != 'b') { *count = len / item; *have = 1; }
        if (len != *count * item || (layout[k] == 'b' && !have_n)) return 0;
    }
    return 1;
}

/* ---- enclosing ------------------------------------------------------------------------------ */

#define DEFINE_ENCLOSING(NAME, T)                                                                          \
    static int NAME(const T *held, const T *parent, const unsigned char *host, const T *launch, const T *op, \
                    T *out, size_t n) {                                                                   \
        for (size_t i = 0; i < n; i++) {                                                                  \
            int64_t src = host[i] ? parent[i] : (launch[i] >= 0 ? launch[i] : op[i]);                     \
            if (src >= (int64_t)n) return 1;                                                              \
            out[i] = src >= 0 ? held[src] : -1;                                                           \
        }                                                                                                 \
        return 0;                                                                                         \
    }
DEFINE_ENCLOSING(enclosing64, int64_t)
DEFINE_ENCLOSING(enclosing32, int32_t)

/* enclosing(held, parent, host, launch, op, out[, width]): trace/correlate.py's _enclosing_or_launchers from
 * held (the nearest accepted event among each event and its ancestors, as ancestors() gives it): a host
 * event's is its parent's, a device event's that of its launch call, else of its op, else -1. held, parent,
 * launch, op, out: index columns (int64, or int32 with width 4) of n; host: bool (n). */
static PyObject *enclosing(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[6];
    int width = 8;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*|i", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &width)) return NULL;
    PyObject *ret = NULL;
    size_t n, m;
    if (!INDEX_WIDTH_OK(width) || !column_lengths(b, "xxbxxx", &n, &m, width)) {
        PyErr_SetString(PyExc_ValueError, INDEX_WIDTH_OK(width) ? "enclosing: the columns differ in length"
                                                                : "enclosing: width must be 4 or 8");
        goto done;
    }
    int bad;
    Py_BEGIN_ALLOW_THREADS
    bad = width == 8 ? enclosing64(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, n)
                     : enclosing32(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, n);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "enclosing: a parent, launch or op is out of range");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 6; k++) PyBuffer_Release(&b[k]);
    return ret;
}

/* ---- attribute ------------------------------------------------------------------------------ */

/* The pass of attribute() below over index columns of type T (table parents, device ops and the two event
 * counts); 0, 1 (a parent or an op out of range) or 2 (a cycle). */
#define DEFINE_ATTRIBUTE(NAME, T)                                                                          \
    static int NAME(const int64_t *dur, const unsigned char *in_table, const T *up, const unsigned char *timed, \
                    const T *op, int64_t *self_cpu, int64_t *self_dev, int64_t *total, T *kern, T *kern_total, \
                    size_t n) {                                                                           \
        memset(self_cpu, 0, n * sizeof(int64_t)); /* children's time first, then self time in place */   \
        memset(self_dev, 0, n * sizeof(int64_t));                                                         \
        memset(total, 0, n * sizeof(int64_t));                                                            \
        memset(kern, 0, n * sizeof(T));                                                                   \
        memset(kern_total, 0, n * sizeof(T));                                                             \
        for (size_t i = 0; i < n; i++) {                                                                  \
            int64_t p = up[i];                                                                            \
            if (p < -1 || p >= (int64_t)n) return 1;                                                      \
            if (in_table[i] && p >= 0) self_cpu[p] += dur[i];                                             \
        }                                                                                                 \
        for (size_t i = 0; i < n; i++) {                                                                  \
            if (!timed[i]) continue;                                                                      \
            int64_t o = op[i];                                                                            \
            if (o < 0) continue;                                                                          \
            if (o >= (int64_t)n) return 1;                                                                \
            self_dev[o] += dur[i];                                                                        \
            kern[o] += 1;                                                                                 \
            size_t steps = 0;                                                                             \
            for (int64_t c = o; c >= 0; c = up[c]) { /* the op and every op-table event above it */      \
                total[c] += dur[i];                                                                       \
                kern_total[c] += 1;                                                                       \
                if (++steps > n) return 2;                                                                \
            }                                                                                             \
        }                                                                                                 \
        for (size_t i = 0; i < n; i++) {                                                                  \
            int64_t left = dur[i] - self_cpu[i]; /* improper nesting may give children more: never < 0 */ \
            self_cpu[i] = in_table[i] ? (left > 0 ? left : 0) : 0;                                        \
        }                                                                                                 \
        return 0;                                                                                         \
    }
DEFINE_ATTRIBUTE(attribute64, int64_t)
DEFINE_ATTRIBUTE(attribute32, int32_t)

/* attribute(dur, in_table, table_parent, timed, device_op, self_cpu, self_device, device_total, kernels,
 * kernels_total[, width]): the time columns of trace/correlate.py's attribute (its numpy twin
 * _attribute_numpy), in one pass over the events and one walk up the op-table tree per timed device event,
 * where the twin makes an n-long bincount per level of the tree. dur, self_cpu, self_device, device_total:
 * int64 (n); table_parent, device_op, kernels, kernels_total: index columns (int64, or int32 with width 4);
 * in_table, timed: bool (n). Sums are exact in int64 (the twin's float64 sums are exact below 2^53 ns). */
static PyObject *attribute(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[10];
    int width = 8;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*w*w*|i", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6], &b[7],
                          &b[8], &b[9], &width)) return NULL;
    PyObject *ret = NULL;
    size_t n, m;
    if (!INDEX_WIDTH_OK(width) || !column_lengths(b, "qbxbxqqqxx", &n, &m, width)) {
        PyErr_SetString(PyExc_ValueError, INDEX_WIDTH_OK(width) ? "attribute: the columns differ in length"
                                                                : "attribute: width must be 4 or 8");
        goto done;
    }
    int bad;
    Py_BEGIN_ALLOW_THREADS
    if (width == 8)
        bad = attribute64(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf,
                          b[9].buf, n);
    else
        bad = attribute32(b[0].buf, b[1].buf, b[2].buf, b[3].buf, b[4].buf, b[5].buf, b[6].buf, b[7].buf, b[8].buf,
                          b[9].buf, n);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, bad == 2 ? "attribute: the op-table parents form a cycle"
                                                   : "attribute: a parent or an op is out of range");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 10; k++) PyBuffer_Release(&b[k]);
    return ret;
}

/* ---- holders -------------------------------------------------------------------------------- */

/* holders(ts, end, depth, t, last, is_op, back, out): for each time t[i], out[i] = the interval j among the
 * `back` latest started by it (last[i], last[i] - 1, ...; intervals sorted by start) with ts[j] <= t[i] <
 * end[j] and the highest score (an op: 2^30 - depth, else depth; on a tie the later start), or -1
 * (analysis/diagnosis/levers.py _holders; its numpy twin is _holders_numpy). ts, end, depth (n) and t, last,
 * out (m): int64; is_op (n): bool; all C-contiguous.
 *
 * The intervals of the window that hold t are kept from one time to the next: while neither t nor last
 * goes back, those that held the last time and still hold this one (and are still in the window), and
 * those started since, are all that can hold it, so a time costs the holders it has (a few: the stack of
 * frames around it), not the whole window; a time that goes back starts the set again from its window. */
static int64_t holders_best(const int64_t *set, size_t c, const int64_t *depth, const unsigned char *is_op) {
    int64_t best = -1, best_score = -((int64_t)1 << 40);
    for (size_t k = c; k-- > 0;) {   /* the latest start first: a tie keeps it */
        int64_t j = set[k], score = is_op[j] ? ((int64_t)1 << 30) - depth[j] : depth[j];
        if (score > best_score) { best = j; best_score = score; }
    }
    return best;
}

static PyObject *holders(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer tsb, eb, db, tb, lb, ob, outb;
    Py_ssize_t back;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*nw*", &tsb, &eb, &db, &tb, &lb, &ob, &back, &outb)) return NULL;
    PyObject *ret = NULL;
    int64_t *set = NULL;
    size_t n = (size_t)tsb.len / sizeof(int64_t), m = (size_t)tb.len / sizeof(int64_t);
    if ((size_t)tsb.len != n * sizeof(int64_t) || (size_t)eb.len != n * sizeof(int64_t) ||
        (size_t)db.len != n * sizeof(int64_t) || (size_t)ob.len != n || (size_t)tb.len != m * sizeof(int64_t) ||
        (size_t)lb.len != m * sizeof(int64_t) || (size_t)outb.len != m * sizeof(int64_t) || back < 0) {
        PyErr_SetString(PyExc_ValueError, "holders: the arrays differ in length or back is negative");
        goto done;
    }
    set = malloc(((size_t)back + 1) * sizeof(int64_t));
    if (!set) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *ts = tsb.buf, *end = eb.buf, *depth = db.buf, *t = tb.buf, *last = lb.buf;
    const unsigned char *is_op = ob.buf;
    int64_t *out = outb.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t c = 0;                                  /* the window's intervals holding the previous time, in order */
    int64_t prev_t = 0, prev_last = -1;
    for (size_t i = 0; i < m; i++) {
        int64_t li = last[i], x = t[i], lo = li - (int64_t)back + 1, from;
        if (li < -1 || li >= (int64_t)n) { bad = 1; break; }
        /* afresh where the time or the window went back, or the last window held an interval started
         * after its time (a `last` not from a search: then the set may miss one) */
        if (i == 0 || x < prev_t || li < prev_last || (prev_last >= 0 && ts[prev_last] > prev_t)) {
            c = 0;
            from = lo;
        } else {                                   /* still holding, still in the window */
            size_t kept = 0;
            for (size_t k = 0; k < c; k++)
                if (set[k] >= lo && x < end[set[k]]) set[kept++] = set[k];
            c = kept;
            from = prev_last + 1 > lo ? prev_last + 1 : lo;
        }
        for (int64_t j = from < 0 ? 0 : from; j <= li; j++)   /* started since */
            if (ts[j] <= x && x < end[j]) set[c++] = j;
        out[i] = holders_best(set, c, depth, is_op);
        prev_t = x;
        prev_last = li;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "holders: a last index is out of range");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    free(set);
    PyBuffer_Release(&tsb);
    PyBuffer_Release(&eb);
    PyBuffer_Release(&db);
    PyBuffer_Release(&tb);
    PyBuffer_Release(&lb);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&outb);
    return ret;
}

/* ---- op_memory ------------------------------------------------------------------------------ */

/* The first position in the sorted a[0..m) whose value is not < x (right: not <= x), i.e. numpy's
 * searchsorted, found from the answer for the previous query (h): a gallop out from h, then a binary
 * search, so queries in nearly sorted order cost a few steps each instead of a full search. */
static size_t bound_near(const int64_t *a, size_t m, int64_t x, size_t h, int right) {
#define BELOW(i) (right ? a[i] <= x : a[i] < x)
    size_t lo, hi, step = 1;   /* the answer lies in [lo, hi] */
    if (h > m) h = m;
    if (h < m && BELOW(h)) {
        lo = h + 1;
        for (;;) {
            hi = lo + step - 1;
            if (hi >= m) { hi = m; break; }
            if (!BELOW(hi)) break;
            lo = hi + 1;
            step *= 2;
        }
    } else {
        hi = h;
        for (;;) {
            if (hi < step) { lo = 0; break; }
            size_t c = hi - step;
            if (BELOW(c)) { lo = c + 1; break; }
            hi = c;
            step *= 2;
        }
    }
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (BELOW(mid)) lo = mid + 1;
        else hi = mid;
    }
    return lo;
#undef BELOW
}

/* op_memory(ts, dur, in_table, table_parent, mem_ts, cpu, dev, rows, out_cpu, out_self_cpu, out_dev,
 * out_self_dev) -> count: torch's per-event memory (trace/memory.py _write_op_memory; its numpy twin is
 * _op_memory_numpy). For each op-table event i (in_table), the bytes of the memory events with
 * ts[i] <= mem_ts <= ts[i] + dur[i] (cpu and dev: each memory event's bytes counted as CPU or device
 * memory, else 0), and the self figures: those less the figures of the events whose nearest op-table
 * ancestor (table_parent) is i. The rows with any figure non-zero go, in order, into rows[0..count)
 * and the four outputs. ts, dur, table_parent (n) and mem_ts (sorted), cpu, dev (m): int64; in_table (n):
 * bool; the five outputs (n): int64. Sums wrap on overflow as numpy's do. */
static PyObject *op_memory(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[12];
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*w*w*w*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5], &b[6],
                          &b[7], &b[8], &b[9], &b[10], &b[11]))
        return NULL;
    PyObject *ret = NULL;
    size_t n, m;
    if (!column_lengths(b, "qqbqQQQqqqqq", &n, &m, 8)) {
        PyErr_SetString(PyExc_ValueError, "op_memory: the arrays differ in length");
        goto done;
    }
    const int64_t *ts = b[0].buf, *dur = b[1].buf, *tparent = b[3].buf, *mts = b[4].buf;
    const int64_t *cpu = b[5].buf, *dev = b[6].buf;
    const unsigned char *in_table = b[2].buf;
    int64_t *rows = b[7].buf, *tc = b[8].buf, *sc = b[9].buf, *td = b[10].buf, *sd = b[11].buf;
    uint64_t *cum = malloc(2 * (m + 1) * sizeof(uint64_t));
    if (!cum) { PyErr_NoMemory(); goto done; }
    int bad = 0, unsorted = 0;
    size_t count = 0;
    Py_BEGIN_ALLOW_THREADS
    uint64_t *cc = cum, *cd = cum + m + 1;
    cc[0] = cd[0] = 0;
    for (size_t j = 0; j < m; j++) {
        cc[j + 1] = cc[j] + (uint64_t)cpu[j];
        cd[j + 1] = cd[j] + (uint64_t)dev[j];
        if (j && mts[j] < mts[j - 1]) unsorted = 1;
    }
    size_t lo = 0, hi = 0;
    for (size_t i = 0; i < n && !unsorted; i++) {   /* the totals, and the children's sums zeroed */
        sc[i] = sd[i] = 0;
        if (!in_table[i]) { tc[i] = td[i] = 0; continue; }
        lo = bound_near(mts, m, ts[i], lo, 0);
        hi = bound_near(mts, m, (int64_t)((uint64_t)ts[i] + (uint64_t)dur[i]), hi, 1);
        tc[i] = (int64_t)(cc[hi] - cc[lo]);
        td[i] = (int64_t)(cd[hi] - cd[lo]);
    }
    for (size_t i = 0; i < n && !unsorted; i++) {   /* each table event's figures onto its table parent */
        int64_t p = tparent[i];
        if (p < -1 || p >= (int64_t)n) { bad = 1; break; }
        if (p < 0 || !in_table[i]) continue;
        sc[p] = (int64_t)((uint64_t)sc[p] + (uint64_t)tc[i]);
        sd[p] = (int64_t)((uint64_t)sd[p] + (uint64_t)td[i]);
    }
    for (size_t i = 0; i < n && !bad && !unsorted; i++) {   /* self = total - children; kept rows packed */
        if (!in_table[i]) continue;
        int64_t c = tc[i], d = td[i];
        int64_t s_c = (int64_t)((uint64_t)c - (uint64_t)sc[i]), s_d = (int64_t)((uint64_t)d - (uint64_t)sd[i]);
        if (!c && !d && !s_c && !s_d) continue;
        rows[count] = (int64_t)i;   /* count <= i: what is written was read already */
        tc[count] = c; sc[count] = s_c; td[count] = d; sd[count] = s_d;
        count++;
    }
    Py_END_ALLOW_THREADS
    free(cum);
    if (unsorted) {
        PyErr_SetString(PyExc_ValueError, "op_memory: the memory events' times are not sorted");
        goto done;
    }
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "op_memory: a table parent is out of range");
        goto done;
    }
    ret = PyLong_FromSize_t(count);
done:
    for (int k = 0; k < 12; k++) PyBuffer_Release(&b[k]);
    return ret;
}

/* ---- slot_codes -------------------------------------------------------------------------------- */

/* slot_codes(hashes, table, listed, shift, out) -> bool: analysis/_codes.py's hash_codes by its slot table in one
 * pass: out[i] = table[(hashes[i] >> shift) & (len(table) - 1)], the position of hashes[i] among the listed
 * values' hashes, where listed[out[i]] == hashes[i]; False at the first row that is not listed (out then
 * unfinished). hashes, listed: uint64; table: int32, a power of two long, -1 for an empty slot; out (as long
 * as hashes): int64. */
static PyObject *slot_codes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[4];
    int shift;
    if (!PyArg_ParseTuple(args, "y*y*y*iw*", &b[0], &b[1], &b[2], &shift, &b[3])) return NULL;
    PyObject *ret = NULL;
    size_t n = (size_t)b[0].len / 8, slots = (size_t)b[1].len / 4, listed = (size_t)b[2].len / 8;
    if ((size_t)b[0].len != n * 8 || (size_t)b[3].len != n * 8 || (size_t)b[1].len != slots * 4 ||
        (size_t)b[2].len != listed * 8 || slots == 0 || (slots & (slots - 1)) || shift < 0 || shift > 63) {
        PyErr_SetString(PyExc_ValueError, "slot_codes: hashes and out one length, a table of 2^k int32 slots");
        goto done;
    }
    const uint64_t *h = b[0].buf, *known = b[2].buf;
    const int32_t *table = b[1].buf;
    int64_t *out = b[3].buf;
    uint64_t mask = (uint64_t)slots - 1;
    int ok = 1;
    Py_BEGIN_ALLOW_THREADS
    for (size_t i = 0; i < n; i++) {
        int32_t code = table[(h[i] >> shift) & mask];
        if (code < 0 || (size_t)code >= listed || known[code] != h[i]) { ok = 0; break; }
        out[i] = code;
    }
    Py_END_ALLOW_THREADS
    ret = PyBool_FromLong(ok);
done:
    for (int k = 0; k < 4; k++) PyBuffer_Release(&b[k]);
    return ret;
}

/* ---- started, covering ---------------------------------------------------------------------- */

/* started(ts, t, out): out[i] = how many of the sorted ts[0..n) are <= t[i] (numpy's searchsorted(ts, t,
 * side="right")), each found from the answer for the previous time (bound_near): a few steps per time for
 * times in order, a binary search at worst (analysis/diagnosis/levers.py _started; twin np.searchsorted).
 * ts (n), t and out (m): int64. */
static PyObject *started(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[3];
    if (!PyArg_ParseTuple(args, "y*y*w*", &b[0], &b[1], &b[2])) return NULL;
    PyObject *ret = NULL;
    size_t n, m;
    if (!column_lengths(b, "qQQ", &n, &m, 8)) {
        PyErr_SetString(PyExc_ValueError, "started: the arrays differ in length");
        goto done;
    }
    const int64_t *ts = b[0].buf, *t = b[1].buf;
    int64_t *out = b[2].buf;
    Py_BEGIN_ALLOW_THREADS
    size_t h = 0;
    for (size_t i = 0; i < m; i++) {
        h = bound_near(ts, n, t[i], h, 1);
        out[i] = (int64_t)h;
    }
    Py_END_ALLOW_THREADS
    ret = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 3; k++) PyBuffer_Release(&b[k]);
    return ret;
}

/* covering(end, keep, after, t, out[, walk]): for each time t[i], out[i] = among the intervals j < after[i]
 * (sorted by start: those started by t[i]) that keep selects, the one with the latest end (the later one on a
 * tie) if it ends after t[i], else -1 (analysis/diagnosis/levers.py _covering_after, its numpy twin). The
 * answer for the first k intervals is carried along for times in order of after, and read from a table of
 * all of them (n + 1 int64, made once) past the first time out of order. end (n), after, t, out (m): int64;
 * keep (n): bool. walk (3 int64, writable): k, the answer for the first k intervals and its end, read at the
 * start and written back at the end, so that calls for times in order (chunks of them) walk the intervals
 * once in all, not once each; (0, -1, INT64_MIN) to begin. */
static PyObject *covering(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[5], w = {0};
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*|w*", &b[0], &b[1], &b[2], &b[3], &b[4], &w)) return NULL;
    PyObject *ret = NULL;
    size_t n, m;
    int64_t *walk = w.buf;
    if (!column_lengths(b, "qbQQQ", &n, &m, 8)) {
        PyErr_SetString(PyExc_ValueError, "covering: the arrays differ in length");
        goto done;
    }
    if (walk && (w.len != 3 * (Py_ssize_t)sizeof(int64_t) || walk[0] < 0 || (uint64_t)walk[0] > n ||
                 walk[1] < -1 || walk[1] >= walk[0])) {
        PyErr_SetString(PyExc_ValueError, "covering: walk is not 3 int64 (k, its answer, its end) for these intervals");
        goto done;
    }
    const int64_t *end = b[0].buf, *after = b[2].buf, *t = b[3].buf;
    const unsigned char *keep = b[1].buf;
    int64_t *out = b[4].buf, *table = NULL;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    size_t k = walk ? (size_t)walk[0] : 0;  /* intervals looked at so far */
    int64_t best = walk ? walk[1] : -1, reach = walk ? walk[2] : INT64_MIN;
    for (size_t i = 0; i < m; i++) {
        int64_t a = after[i];
        if (a < 0 || (uint64_t)a > n) { bad = 1; break; }
        if ((size_t)a < k && !table) {  /* a time out of order: the answers for every prefix, once */
            table = malloc((n + 1) * sizeof(int64_t));
            if (!table) { bad = 2; break; }
            int64_t b_ = -1, r = INT64_MIN;
            table[0] = -1;
            for (size_t j = 0; j < n; j++) {
                if (keep[j] && end[j] >= r) { r = end[j]; b_ = (int64_t)j; }
                table[j + 1] = b_;
            }
        }
        int64_t found;
        if (table) found = table[a];
        else {
            for (; k < (size_t)a; k++)
                if (keep[k] && end[k] >= reach) { reach = end[k]; best = (int64_t)k; }
            found = best;
        }
        out[i] = found >= 0 && end[found] > t[i] ? found : -1;
    }
    if (walk) {  /* still the answer for the first k intervals (a table, where made, did not move it) */
        walk[0] = (int64_t)k;
        walk[1] = best;
        walk[2] = reach;
    }
    Py_END_ALLOW_THREADS
    free(table);
    if (bad) {
        PyErr_SetString(bad == 2 ? PyExc_MemoryError : PyExc_ValueError,
                        bad == 2 ? "covering: no memory for the table" : "covering: an after count is out of range");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (int k = 0; k < 5; k++) PyBuffer_Release(&b[k]);
    if (w.obj) PyBuffer_Release(&w);
    return ret;
}

/* tally(code, ns, sel, totals, first): for each name code c (0 <= c < k), totals[c] = the sum of ns[i] over
 * the pieces i with code[i] == c and sel[i], and first[c] = the first such i (-1: none); a code of -1 is no
 * name (analysis/diagnosis/levers.py _ns_by_code; its numpy twin is _tally_numpy). code (m): int32; ns (m):
 * int64; sel (m): bool; totals, first (k): int64. Sums wrap on overflow as numpy's do. */
static PyObject *tally(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b[5];
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*", &b[0], &b[1], &b[2], &b[3], &b[4])) return NULL;
    PyObject *ret = NULL;
    size_t m = (size_t)b[1].len / sizeof(int64_t), k = (size_t)b[3].len / sizeof(int64_t);
    if ((size_t)b[0].len != m * sizeof(int32_t) || (size_t)b[1].len != m * sizeof(int64_t) || (size_t)b[2].len != m ||
        (size_t)b[3].len != k * sizeof(int64_t) || (size_t)b[4].len != k * sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "tally: the arrays differ in length");
        goto done;
    }
    const int32_t *code = b[0].buf;
    const int64_t *ns = b[1].buf;
    const unsigned char *sel = b[2].buf;
    int64_t *totals = b[3].buf, *first = b[4].buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t c = 0; c < k; c++) { totals[c] = 0; first[c] = -1; }
    for (size_t i = 0; i < m; i++) {
        int32_t c = code[i];
        if (c < 0 || !sel[i]) continue;
        if ((size_t)c >= k) { bad = 1; break; }
        totals[c] = (int64_t)((uint64_t)totals[c] + (uint64_t)ns[i]);
        if (first[c] < 0) first[c] = (int64_t)i;
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "tally: a code is out of range");
        goto done;
    }
    ret = Py_NewRef(Py_None);
done:
    for (int j = 0; j < 5; j++) PyBuffer_Release(&b[j]);
    return ret;
}

/* ---- decimal_text --------------------------------------------------------------------------- */

/* decimal_text(values) -> (offsets, text) or None: int64 values as their decimal text (what DuckDB's
 * CAST(... AS VARCHAR) and Python's str write), one after another in `text`, value i in
 * text[offsets[i]:offsets[i + 1]] (offsets: n + 1 int32); None where the text would pass 2 GB
 * (int32 offsets). trace/_write.py decimal_dictionary, whose numpy twin made it 10x slower. */
static PyObject *decimal_text(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer vb;
    if (PyObject_GetBuffer(arg, &vb, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    PyObject *ret = NULL, *offs = NULL, *text = NULL;
    size_t n = (size_t)vb.len / sizeof(int64_t);
    if ((size_t)vb.len != n * sizeof(int64_t) || n >= (size_t)INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "decimal_text: not int64 values, or too many");
        goto done;
    }
    const int64_t *v = vb.buf;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t u = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
        size_t digits = 1;
        while (u >= 10) { u /= 10; digits++; }
        total += digits + (v[i] < 0);
    }
    if (total > (size_t)INT32_MAX) { ret = Py_NewRef(Py_None); goto done; }
    offs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)((n + 1) * sizeof(int32_t)));
    text = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!offs || !text) goto done;
    int32_t *o = (int32_t *)PyBytes_AS_STRING(offs);
    char *t = PyBytes_AS_STRING(text);
    size_t at = 0;
    o[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char digits[24];
        int k = 0;
        uint64_t u = v[i] < 0 ? (uint64_t)0 - (uint64_t)v[i] : (uint64_t)v[i];
        do { digits[k++] = (char)('0' + u % 10); u /= 10; } while (u);
        if (v[i] < 0) t[at++] = '-';
        while (k) t[at++] = digits[--k];
        o[i + 1] = (int32_t)at;
    }
    ret = PyTuple_Pack(2, offs, text);
done:
    Py_XDECREF(offs);
    Py_XDECREF(text);
    PyBuffer_Release(&vb);
    return ret;
}

/* ---- arrow_stream --------------------------------------------------------------------------- */

/* arrow_stream(columns, length, batch) -> PyCapsule "arrow_array_stream": the columns as an Arrow C
 * stream (the Arrow C data interface), in batches of `batch` rows, for DuckDB to scan without the GIL
 * and without a Python object per value (trace/_write.py's ArrowFrame). columns: a list of
 * (name: str, kind: 'l' int64 | 'i' int32 | 'g' float64 | 'd' int32 codes into a utf8 dictionary,
 * values, validity or None (a bitmap: bit i of byte i/8, set = valid), dictionary offsets (int32,
 * entries + 1; 'd' only, else None), dictionary bytes ('d' only, else None)); buffers C-contiguous.
 * Every code is checked to index the dictionary and every offset to lie in its bytes, so nothing the
 * consumer reads lies outside a buffer. The buffers are held (and the columns list referenced) until
 * the stream and every array it gave out are released; the last release takes the GIL to let them go. */

struct ArrowSchema {
    const char *format, *name, *metadata;
    int64_t flags, n_children;
    struct ArrowSchema **children, *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children, *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

struct ArrowArrayStream {
    int (*get_schema)(struct ArrowArrayStream *, struct ArrowSchema *);
    int (*get_next)(struct ArrowArrayStream *, struct ArrowArray *);
    const char *(*get_last_error)(struct ArrowArrayStream *);
    void (*release)(struct ArrowArrayStream *);
    void *private_data;
};

#define ARROW_FLAG_NULLABLE 2
enum { B_VALUES, B_VALID, B_OFFSETS, B_BYTES, N_BUFS };

typedef struct {
    char *name;
    char kind;
    Py_buffer buf[N_BUFS];
    int has[N_BUFS];
    int64_t dict_len;
} Col;

typedef struct {
    long refs;              /* the stream and every array given out hold one */
    PyObject *keep;         /* the columns list */
    Py_ssize_t ncols;
    Col *cols;
    int64_t length, batch, next;
} Shared;

static void shared_free_locked(Shared *sh) {  /* with the GIL */
    for (Py_ssize_t c = 0; c < sh->ncols; c++) {
        for (int b = 0; b < N_BUFS; b++)
            if (sh->cols[c].has[b]) PyBuffer_Release(&sh->cols[c].buf[b]);
        free(sh->cols[c].name);
    }
    free(sh->cols);
    Py_XDECREF(sh->keep);
    free(sh);
}

static void shared_decref(Shared *sh) {
    if (__atomic_sub_fetch(&sh->refs, 1, __ATOMIC_ACQ_REL) != 0) return;
    PyGILState_STATE g = PyGILState_Ensure();
    shared_free_locked(sh);
    PyGILState_Release(g);
}

static void shared_incref(Shared *sh) { __atomic_add_fetch(&sh->refs, 1, __ATOMIC_ACQ_REL); }

/* schemas own only malloc'd memory */
static void schema_release(struct ArrowSchema *s) {
    for (int64_t i = 0; i < s->n_children; i++) {
        struct ArrowSchema *ch = s->children[i];
        if (ch->release) ch->release(ch);
        free(ch);
    }
    free(s->children);
    if (s->dictionary) {
        if (s->dictionary->release) s->dictionary->release(s->dictionary);
        free(s->dictionary);
    }
    free((void *)s->name);
    s->release = NULL;
}

static int schema_leaf(struct ArrowSchema *s, const char *format, const char *name) {
    memset(s, 0, sizeof *s);
    s->format = format;
    s->name = strdup(name ? name : "");
    s->flags = ARROW_FLAG_NULLABLE;
    s->release = schema_release;
    return s->name ? 0 : -1;
}

static int stream_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
    Shared *sh = st->private_data;
    memset(out, 0, sizeof *out);
    if (schema_leaf(out, "+s", "") != 0) return ENOMEM;
    out->flags = 0;
    out->children = calloc((size_t)sh->ncols ? (size_t)sh->ncols : 1, sizeof *out->children);
    if (!out->children) { schema_release(out); return ENOMEM; }
    for (Py_ssize_t c = 0; c < sh->ncols; c++) {
        Col *col = &sh->cols[c];
        struct ArrowSchema *ch = calloc(1, sizeof *ch);
        if (!ch) { schema_release(out); return ENOMEM; }
        out->children[c] = ch;
        out->n_children = c + 1;
        static const char fmt_l[] = "l", fmt_i[] = "i", fmt_g[] = "g", fmt_u[] = "u";
        const char *fmt = col->kind == 'l' ? fmt_l : col->kind == 'g' ? fmt_g : fmt_i;
        if (schema_leaf(ch, fmt, col->name) != 0) { schema_release(out); return ENOMEM; }
        if (col->kind == 'd') {
            ch->dictionary = calloc(1, sizeof *ch->dictionary);
            if (!ch->dictionary || schema_leaf(ch->dictionary, fmt_u, "") != 0) { schema_release(out); return ENOMEM; }
        }
    }
    return 0;
}

typedef struct {
    Shared *sh;
    const void *buffers[3];
} ArrayPriv;

static void array_release(struct ArrowArray *a) {
    ArrayPriv *p = a->private_data;
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *ch = a->children[i];
        if (ch && ch->release) ch->release(ch);
        free(ch);
    }
    free(a->children);
    if (a->dictionary) {
        if (a->dictionary->release) a->dictionary->release(a->dictionary);
        free(a->dictionary);
    }
    Shared *sh = p->sh;
    free(p);
    a->release = NULL;
    shared_decref(sh);
}

static int array_init(struct ArrowArray *a, Shared *sh, int64_t length, int64_t offset, int64_t null_count,
                      int n_buffers) {
    memset(a, 0, sizeof *a);
    ArrayPriv *p = calloc(1, sizeof *p);
    if (!p) return -1;
    p->sh = sh;
    shared_incref(sh);
    a->length = length;
    a->offset = offset;
    a->null_count = null_count;
    a->n_buffers = n_buffers;
    a->buffers = p->buffers;
    a->private_data = p;
    a->release = array_release;
    return 0;
}

static int stream_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
    Shared *sh = st->private_data;
    memset(out, 0, sizeof *out);
    int64_t len = sh->length - sh->next;
    if (len <= 0) return 0;  /* the end: out->release stays NULL */
    if (len > sh->batch) len = sh->batch;
    int64_t off = sh->next;
    if (array_init(out, sh, len, 0, 0, 1) != 0) return ENOMEM;
    out->children = calloc((size_t)sh->ncols ? (size_t)sh->ncols : 1, sizeof *out->children);
    if (!out->children) { out->release(out); return ENOMEM; }
    for (Py_ssize_t c = 0; c < sh->ncols; c++) {
        Col *col = &sh->cols[c];
        struct ArrowArray *ch = calloc(1, sizeof *ch);
        if (!ch) { out->release(out); return ENOMEM; }
        out->children[c] = ch;
        out->n_children = c + 1;
        if (array_init(ch, sh, len, off, col->has[B_VALID] ? -1 : 0, 2) != 0) { out->release(out); return ENOMEM; }
        ((ArrayPriv *)ch->private_data)->buffers[0] = col->has[B_VALID] ? col->buf[B_VALID].buf : NULL;
        ((ArrayPriv *)ch->private_data)->buffers[1] = col->buf[B_VALUES].buf;
        if (col->kind == 'd') {
            struct ArrowArray *d = calloc(1, sizeof *d);
            if (!d) { out->release(out); return ENOMEM; }
            ch->dictionary = d;
            if (array_init(d, sh, col->dict_len, 0, 0, 3) != 0) { out->release(out); return ENOMEM; }
            ArrayPriv *dp = d->private_data;
            dp->buffers[0] = NULL;
            dp->buffers[1] = col->buf[B_OFFSETS].buf;
            dp->buffers[2] = col->buf[B_BYTES].len ? col->buf[B_BYTES].buf : (const void *)"";
        }
    }
    sh->next += len;
    return 0;
}

static const char *stream_last_error(struct ArrowArrayStream *st) {
    (void)st;
    return "out of memory";
}

static void stream_release(struct ArrowArrayStream *st) {
    Shared *sh = st->private_data;
    st->release = NULL;
    shared_decref(sh);
}

static void capsule_free(PyObject *capsule) {
    struct ArrowArrayStream *st = PyCapsule_GetPointer(capsule, "arrow_array_stream");
    if (!st) { PyErr_Clear(); return; }
    if (st->release) {  /* never taken by a consumer: this thread holds the GIL, so drop the ref here */
        Shared *sh = st->private_data;
        st->release = NULL;
        if (__atomic_sub_fetch(&sh->refs, 1, __ATOMIC_ACQ_REL) == 0) shared_free_locked(sh);
    }
    free(st);
}

static int col_buffer(PyObject *obj, Py_buffer *b, int *has, int64_t need, int exact, const char *what,
                      const char *name) {
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS) != 0) return -1;
    *has = 1;
    if (exact ? b->len != need : b->len < need) {
        PyErr_Format(PyExc_ValueError, "arrow_stream: column %s: %s holds %zd bytes, %s%lld expected", name, what,
                     b->len, exact ? "" : "at least ", (long long)need);
        return -1;
    }
    return 0;
}

static PyObject *arrow_stream(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *columns;
    long long length, batch;
    if (!PyArg_ParseTuple(args, "O!LL", &PyList_Type, &columns, &length, &batch)) return NULL;
    if (length < 0 || batch <= 0) {
        PyErr_SetString(PyExc_ValueError, "arrow_stream: length must be >= 0 and batch > 0");
        return NULL;
    }
    Shared *sh = calloc(1, sizeof *sh);
    if (!sh) return PyErr_NoMemory();
    sh->refs = 1;
    sh->length = length;
    sh->batch = batch;
    sh->keep = Py_NewRef(columns);
    Py_ssize_t ncols = PyList_GET_SIZE(columns);
    sh->cols = calloc((size_t)ncols ? (size_t)ncols : 1, sizeof *sh->cols);
    if (!sh->cols) { shared_free_locked(sh); return PyErr_NoMemory(); }
    for (Py_ssize_t c = 0; c < ncols; c++) {
        Col *col = &sh->cols[c];
        sh->ncols = c + 1;
        PyObject *item = PyList_GET_ITEM(columns, c), *bufs[N_BUFS];
        const char *name, *kind;
        if (!PyArg_ParseTuple(item, "ssOOOO", &name, &kind, &bufs[B_VALUES], &bufs[B_VALID], &bufs[B_OFFSETS],
                              &bufs[B_BYTES]))
            goto fail;
        col->name = strdup(name);
        if (!col->name) { PyErr_NoMemory(); goto fail; }
        col->kind = kind[0];
        if (strlen(kind) != 1 || !strchr("ligd", col->kind)) {
            PyErr_Format(PyExc_ValueError, "arrow_stream: column %s: unknown kind %s", name, kind);
            goto fail;
        }
        int64_t item_size = col->kind == 'l' || col->kind == 'g' ? 8 : 4;
        int dict = col->kind == 'd';
        if ((dict ? bufs[B_OFFSETS] == Py_None || bufs[B_BYTES] == Py_None
                  : bufs[B_OFFSETS] != Py_None || bufs[B_BYTES] != Py_None) || bufs[B_VALUES] == Py_None) {
            PyErr_Format(PyExc_ValueError, "arrow_stream: column %s: values, and a dictionary exactly for kind d", name);
            goto fail;
        }
        if (col_buffer(bufs[B_VALUES], &col->buf[B_VALUES], &col->has[B_VALUES], length * item_size, 1, "values",
                       name) ||
            col_buffer(bufs[B_VALID], &col->buf[B_VALID], &col->has[B_VALID], (length + 7) / 8, 0, "validity", name) ||
            col_buffer(bufs[B_OFFSETS], &col->buf[B_OFFSETS], &col->has[B_OFFSETS], 4, 0, "offsets", name) ||
            col_buffer(bufs[B_BYTES], &col->buf[B_BYTES], &col->has[B_BYTES], 0, 0, "bytes", name))
            goto fail;
        if (dict) {
            const int32_t *offs = col->buf[B_OFFSETS].buf, *codes = col->buf[B_VALUES].buf;
            int64_t entries = col->buf[B_OFFSETS].len / 4 - 1, bytes = col->buf[B_BYTES].len;
            if (col->buf[B_OFFSETS].len % 4 || entries > INT32_MAX) {
                PyErr_Format(PyExc_ValueError, "arrow_stream: column %s: offsets are not whole int32s", name);
                goto fail;
            }
            int bad = offs[0] != 0;
            for (int64_t i = 0; i < entries && !bad; i++) bad = offs[i + 1] < offs[i] || offs[i + 1] > bytes;
            for (int64_t i = 0; i < length && !bad; i++) bad = codes[i] < 0 || codes[i] >= entries;
            if (bad) {
                PyErr_Format(PyExc_ValueError, "arrow_stream: column %s: a code or offset lies outside its dictionary",
                             name);
                goto fail;
            }
            col->dict_len = entries;
        }
    }
    struct ArrowArrayStream *st = calloc(1, sizeof *st);
    if (!st) { PyErr_NoMemory(); goto fail; }
    st->get_schema = stream_get_schema;
    st->get_next = stream_get_next;
    st->get_last_error = stream_last_error;
    st->release = stream_release;
    st->private_data = sh;
    PyObject *capsule = PyCapsule_New(st, "arrow_array_stream", capsule_free);
    if (!capsule) { free(st); goto fail; }
    return capsule;
fail:
    shared_free_locked(sh);
    return NULL;
}

/* ---- read_file ------------------------------------------------------------------------------ */

/* read_file(fd, n, parts) -> bytes, or None where this build cannot (no pread: Windows).
 * The first n bytes of the regular file open as fd (fewer where it ends first), read from offset 0
 * into one new bytes object by `parts` threads, each pread()ing its share. Most of reading a trace
 * that is in the page cache goes to faulting in the fresh buffer's pages, and those faults run on
 * every core at once (a 0.5 GB trace on 2 cores: 313-339 ms for one read() into bytes, 93-109 ms so).
 * The file offset of fd is left as it was. OSError on a failed read; a share that meets the end of
 * the file ends the result there (a file cut short since its size was taken). */
#if defined(_WIN32)
static PyObject *read_file(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    Py_RETURN_NONE;
}
#else
#include <pthread.h>
#include <unistd.h>
#include <sys/mman.h>

#define READ_PARTS_MAX 16

typedef struct { int fd; char *buf; size_t start, end, got; int err; } ReadPart;

static void *read_part(void *arg) {
    ReadPart *r = arg;
    size_t at = r->start;
    while (at < r->end) {
        size_t want = r->end - at;
        if (want > ((size_t)1 << 30)) want = (size_t)1 << 30;  /* one pread moves at most ~2 GB on Linux */
        ssize_t k = pread(r->fd, r->buf + at, want, (off_t)at);
        if (k < 0) {
            if (errno == EINTR) continue;
            r->err = errno;
            break;
        }
        if (k == 0) break;  /* the end of the file */
        at += (size_t)k;
    }
    r->got = at - r->start;
    return NULL;
}

static PyObject *read_file(PyObject *self, PyObject *args) {
    (void)self;
    int fd, parts;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "ini", &fd, &n, &parts)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "read_file: n must not be negative");
        return NULL;
    }
    if (parts < 1) parts = 1;
    if (parts > READ_PARTS_MAX) parts = READ_PARTS_MAX;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n);
    if (!out) return NULL;
    ReadPart part[READ_PARTS_MAX];
    size_t total = (size_t)n, share = (total / (size_t)parts + 4095) & ~(size_t)4095;  /* whole pages each */
    for (int k = 0; k < parts; k++) {
        size_t a = share * (size_t)k, b = a + share;
        if (a > total) a = total;
        if (b > total || k == parts - 1) b = total;
        part[k] = (ReadPart){fd, PyBytes_AS_STRING(out), a, b, 0, 0};
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_t th[READ_PARTS_MAX];
    int started[READ_PARTS_MAX] = {0};
    for (int k = 1; k < parts; k++)
        started[k] = part[k].start < part[k].end && pthread_create(&th[k], NULL, read_part, &part[k]) == 0;
    read_part(&part[0]);
    for (int k = 1; k < parts; k++) {
        if (started[k]) pthread_join(th[k], NULL);
        else read_part(&part[k]);  /* no thread could start: this share here, in turn */
    }
    Py_END_ALLOW_THREADS
    size_t len = total;
    for (int k = 0; k < parts; k++) {
        if (part[k].err) {
            Py_DECREF(out);
            errno = part[k].err;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        if (part[k].got < part[k].end - part[k].start) {  /* the file ends in this share */
            len = part[k].start + part[k].got;
            break;
        }
    }
    if (len < total && _PyBytes_Resize(&out, (Py_ssize_t)len)) return NULL;
    return out;
}
#endif

/* ---- map_file ------------------------------------------------------------------------------- */

/* map_file(fd, n, settled_ns) -> Mapped, or None where this build or this file cannot be mapped.
 *
 * A plain trace's first n bytes as the page cache's own pages (mmap, read-only) instead of a copy into
 * fresh memory. On these machines a copy's cost is mostly the fresh buffer's first touch (zeroing, and
 * its pages' faults): a 50 MB trace from the page cache took 40-100 ms to read, 6 ms to map; 1 GB
 * 0.15-1.1 s (read_file, 2 threads) or 0.76 s (one read). The pages are not populated up front
 * (MAP_POPULATE would make the whole file resident at once): each comes in as the scan reaches it
 * (the kernel's readahead ahead of it, MADV_WILLNEED) and the scan and the hash let it go behind them.
 *
 * A mapping sees the file as it is now, not as it was: a file cut short leaves pages past its new
 * end that raise SIGBUS when read. The first mapping installs a SIGBUS handler (once, chained to
 * the one it found) that answers a fault inside a live mapping by mapping zero-filled pages over
 * the rest of that mapping and marking it cut, so the reader goes on over zeros; any other SIGBUS
 * goes to the handling found (its handler, or the default or ignoring, as before). Where another
 * handler has taken its place since, nothing more is mapped (None: the caller reads).
 * Mapped.intact() is false once a mapping was cut, and where fstat of the file now shows another
 * size, inode, modification or change time than when it was mapped: the caller then reads the
 * file again (trace/build.py). Only a file last written or changed `settled_ns` ago or more is
 * mapped (the cache's stat entries' "racily clean" rule): a write in the same clock tick as the one
 * before leaves both times as they were. What the check cannot see: bytes changed in place through
 * another process's shared mapping of pages it had already dirtied, which moves neither time until
 * the kernel writes them back (profilers write traces with write(), each call of which moves mtime).
 *
 * Linux only, and only on the local filesystems listed in local_fs (a network filesystem may change
 * the pages under a mapping without any of those signs); elsewhere None, and the caller reads. */
#if defined(__linux__)
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#define GUARD_SLOTS 64

/* A live mapping's range. `gen` is odd while the slot changes (with the GIL held): the handler takes a
 * range only between two equal, even readings of it, so never the `lo` of one mapping with the `hi` of
 * the next one in the slot. lo == 0 and hi == 0: a free slot (hi alone: taken, not yet mapped). */
typedef struct { atomic_uint gen; _Atomic uintptr_t lo, hi; atomic_int cut; } Guard;
static Guard guards[GUARD_SLOTS];
static struct sigaction bus_before;   /* the SIGBUS handling found when ours went in */
static int bus_installed;             /* set (with the GIL held) once ours is in place */
static uintptr_t page_size;

typedef struct {
    PyObject_HEAD
    char *addr;
    Py_ssize_t len;
    int fd, slot;
    struct stat st;   /* the file as it was when mapped */
} Mapped;

static void guard_set(int k, uintptr_t lo, uintptr_t hi) {
    atomic_fetch_add(&guards[k].gen, 1);   /* odd: changing */
    atomic_store(&guards[k].cut, 0);
    atomic_store(&guards[k].hi, hi);
    atomic_store(&guards[k].lo, lo);
    atomic_fetch_add(&guards[k].gen, 1);
}

/* What SIGBUS did before ours, for a signal that is not a fault in a live mapping: the handler found
 * (its mask held meanwhile), else the default action. A fault with SIGBUS ignored ends the process as
 * the kernel would (the default put back, the fault happens again on return); a signal sent to the
 * process is ignored where it was ignored, else sent again under the default. */
static void bus_forward(int sig, siginfo_t *info, void *context) {
    int fault = info && info->si_code > 0;
    void (*plain)(int) = (bus_before.sa_flags & SA_SIGINFO) ? NULL : bus_before.sa_handler;
    if ((bus_before.sa_flags & SA_SIGINFO) ? bus_before.sa_sigaction != NULL : (plain != SIG_DFL && plain != SIG_IGN)) {
        sigset_t old;
        pthread_sigmask(SIG_BLOCK, &bus_before.sa_mask, &old);
        if (bus_before.sa_flags & SA_SIGINFO) bus_before.sa_sigaction(sig, info, context);
        else plain(sig);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return;
    }
    if (plain == SIG_IGN && !fault) return;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGBUS, &dfl, NULL);
    if (!fault) raise(sig);
}

static void on_bus(int sig, siginfo_t *info, void *context) {
    if (info && info->si_code > 0) {  /* raised by a fault, not sent */
        uintptr_t at = (uintptr_t)info->si_addr;
        for (int k = 0; k < GUARD_SLOTS; k++) {
            unsigned g = atomic_load(&guards[k].gen);
            uintptr_t lo = atomic_load(&guards[k].lo), hi = atomic_load(&guards[k].hi);
            if ((g & 1u) || g != atomic_load(&guards[k].gen) || !lo || at < lo || at >= hi) continue;
            uintptr_t page = at & ~(page_size - 1);
            /* zeros from the faulting page to the mapping's end: the read goes on, the caller reads again */
            if (mmap((void *)page, hi - page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
                break;
            atomic_store(&guards[k].cut, 1);
            return;
        }
    }
    bus_forward(sig, info, context);
}

/* Ours installed once (the handling found kept for bus_forward); 0 where it is the one in place now,
 * -1 where it cannot be, or where another has taken its place since (faulthandler enabled or disabled
 * later, signal.signal): a file cut short would then not be answered, so nothing more is mapped (put
 * back on top of that one, ours would chain to a handler that may chain back to it). */
static int bus_handler_in_place(void) {
    struct sigaction now;
    if (sigaction(SIGBUS, NULL, &now)) return -1;
    if (bus_installed) return (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_bus ? 0 : -1;
    struct sigaction mine;
    memset(&mine, 0, sizeof mine);
    mine.sa_sigaction = on_bus;
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&mine.sa_mask);
    bus_before = now;
    if (sigaction(SIGBUS, &mine, NULL)) return -1;
    bus_installed = 1;
    return 0;
}

/* Filesystems whose mapped pages change only with a write, a truncation or the file's own end. */
static int local_fs(int fd) {
    struct statfs fs;
    if (fstatfs(fd, &fs)) return 0;
    switch ((unsigned long)fs.f_type) {
    case 0xEF53UL:      /* ext2, ext3, ext4 */
    case 0x58465342UL:  /* xfs */
    case 0x9123683EUL:  /* btrfs */
    case 0x794C7630UL:  /* overlayfs */
    case 0xF2F52010UL:  /* f2fs */
    case 0x2FC12FC1UL:  /* zfs */
        return 1;
    default:
        return 0;
    }
}

static void mapped_dealloc(PyObject *o) {
    Mapped *m = (Mapped *)o;
    if (m->addr) {
        guard_set(m->slot, 0, (uintptr_t)1);   /* no longer answered for (still taken), then gone */
        munmap(m->addr, (size_t)m->len);
        guard_set(m->slot, 0, 0);
    }
    if (m->fd >= 0) close(m->fd);
    Py_TYPE(o)->tp_free(o);
}

static int mapped_getbuffer(PyObject *o, Py_buffer *view, int flags) {
    Mapped *m = (Mapped *)o;
    return PyBuffer_FillInfo(view, o, m->addr, m->len, 1, flags);
}

static Py_ssize_t mapped_length(PyObject *o) { return ((Mapped *)o)->len; }

static PyObject *mapped_intact(PyObject *o, PyObject *unused) {
    (void)unused;
    Mapped *m = (Mapped *)o;
    struct stat now;
    if (atomic_load(&guards[m->slot].cut) || fstat(m->fd, &now)) Py_RETURN_FALSE;
    int same = now.st_size == m->st.st_size && now.st_ino == m->st.st_ino && now.st_dev == m->st.st_dev &&
               now.st_mtim.tv_sec == m->st.st_mtim.tv_sec && now.st_mtim.tv_nsec == m->st.st_mtim.tv_nsec &&
               now.st_ctim.tv_sec == m->st.st_ctim.tv_sec && now.st_ctim.tv_nsec == m->st.st_ctim.tv_nsec;
    return PyBool_FromLong(same);
}

static PyMethodDef mapped_methods[] = {
    {"intact", mapped_intact, METH_NOARGS,
     "intact() -> whether no page was cut off since the file was mapped and fstat shows it unchanged."},
    {NULL, NULL, 0, NULL},
};
static PyBufferProcs mapped_buffer = {mapped_getbuffer, NULL};
static PySequenceMethods mapped_sequence = {.sq_length = mapped_length};
static PyTypeObject MappedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "profuse.trace._accel.Mapped",
    .tp_basicsize = sizeof(Mapped),
    .tp_dealloc = mapped_dealloc,
    .tp_as_buffer = &mapped_buffer,
    .tp_as_sequence = &mapped_sequence,
    .tp_methods = mapped_methods,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A file's bytes mapped read-only (map_file); a read-only buffer.",
};

/* Whether the file was last written or changed (mtime, ctime) at least `settled_ns` ago: any later write
 * then moves one of them (a write in the same clock tick as the last one would not). */
static int settled_for(const struct stat *st, long long settled_ns) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now)) return 0;
    long long t = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
    long long m = (long long)st->st_mtim.tv_sec * 1000000000LL + st->st_mtim.tv_nsec;
    long long c = (long long)st->st_ctim.tv_sec * 1000000000LL + st->st_ctim.tv_nsec;
    return t - (m > c ? m : c) >= settled_ns;
}

static PyObject *map_file(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    Py_ssize_t n;
    long long settled;
    if (!PyArg_ParseTuple(args, "inL", &fd, &n, &settled)) return NULL;
    struct stat st;
    if (n <= 0 || fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size != (off_t)n || !local_fs(fd) ||
        !settled_for(&st, settled))
        Py_RETURN_NONE;
    int slot = -1;
    for (int k = 0; k < GUARD_SLOTS && slot < 0; k++)
        if (!atomic_load(&guards[k].lo) && !atomic_load(&guards[k].hi)) slot = k;
    if (slot < 0) Py_RETURN_NONE;  /* every slot taken: read instead */
    if (!page_size) page_size = (uintptr_t)sysconf(_SC_PAGESIZE);
    if (bus_handler_in_place()) Py_RETURN_NONE;
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) Py_RETURN_NONE;
    Mapped *m = PyObject_New(Mapped, &MappedType);
    if (!m) { close(own); return NULL; }
    m->addr = NULL; m->len = n; m->fd = own; m->slot = slot; m->st = st;
    guard_set(slot, 0, (uintptr_t)1);  /* taken (lo stays 0: not yet answered for) while the GIL is let go */
    void *addr;
    Py_BEGIN_ALLOW_THREADS
    addr = mmap(NULL, (size_t)n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr != MAP_FAILED) (void)madvise(addr, (size_t)n, MADV_WILLNEED);
    Py_END_ALLOW_THREADS
    if (addr == MAP_FAILED) {
        guard_set(slot, 0, 0);
        Py_DECREF(m);
        Py_RETURN_NONE;
    }
    guard_set(slot, (uintptr_t)addr, (uintptr_t)addr + (uintptr_t)n);
    m->addr = (char *)addr;
    return (PyObject *)m;
}
#else
static PyObject *map_file(PyObject *self, PyObject *args) {
    (void)self;
    (void)args;
    Py_RETURN_NONE;
}
#endif

static PyMethodDef methods[] = {
    {"ancestors", ancestors, METH_VARARGS,
     "ancestors(parent, accept, out[, width]): the nearest accepted event among each event and its ancestors."},
    {"enclosing", enclosing, METH_VARARGS,
     "enclosing(held, parent, host, launch, op, out[, width]): each event's enclosing scope (trace/correlate.py)."},
    {"attribute", attribute, METH_VARARGS,
     "attribute(dur, in_table, table_parent, timed, device_op, self_cpu, self_device, device_total, kernels,"
     " kernels_total[, width]): the op-table time columns (trace/correlate.py)."},
    {"holders", holders, METH_VARARGS,
     "holders(ts, end, depth, t, last, is_op, back, out): the interval holding each time (analysis/diagnosis/levers.py)."},
    {"slot_codes", slot_codes, METH_VARARGS,
     "slot_codes(hashes, table, listed, shift, out) -> bool: each row's code by a slot table (analysis/_codes.py)."},
    {"started", started, METH_VARARGS,
     "started(ts, t, out): how many of the sorted ts each time follows or equals (analysis/diagnosis/levers.py)."},
    {"tally", tally, METH_VARARGS,
     "tally(code, ns, sel, totals, first): ns per name code, and each code's first piece (levers.py)."},
    {"covering", covering, METH_VARARGS,
     "covering(end, keep, after, t, out): the kept interval holding each time, with the latest end (levers.py)."},
    {"op_memory", op_memory, METH_VARARGS,
     "op_memory(ts, dur, in_table, table_parent, mem_ts, cpu, dev, rows, out_cpu, out_self_cpu, out_dev, out_self_dev)"
     " -> count: torch's memory per op-table event (trace/memory.py)."},
    {"decimal_text", decimal_text, METH_O,
     "decimal_text(values) -> (int32 offsets, text) of int64 values as decimal text, or None past 2 GB."},
    {"arrow_stream", arrow_stream, METH_VARARGS,
     "arrow_stream(columns, length, batch) -> PyCapsule of an Arrow C stream over the columns (trace/_write.py)."},
    {"memory_events", memory_events, METH_O,
     "memory_events(buffer) -> dict of columns, or None where trace/memory.py's Python path must read them."},
    {"map_file", map_file, METH_VARARGS,
     "map_file(fd, n, settled_ns) -> the file's n bytes mapped read-only (Mapped), or None where it cannot be mapped."},
    {"read_file", read_file, METH_VARARGS,
     "read_file(fd, n, parts) -> the file's first n bytes, read by parts threads (None where it cannot: Windows)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_accel", "Compiled parts of the load after the scan (see trace/_accel.c).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__accel(void) {
#if defined(__linux__)
    if (PyType_Ready(&MappedType) < 0) return NULL;
#endif
    return PyModule_Create(&module);
}
