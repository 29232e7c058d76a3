/*
 * hipstub.c - test stand-in for libamdhip64.so.5 (HIP 5.2 ABI) with an
 * independent implementation of the kpack code-object loader.
 *
 * Written from the format description in docs/formats.md (the HIP wrapper,
 * offload bundles and CCOB, the marker, the archive and both loader
 * generations); no upstream code was copied.  See README.md
 * for the environment variables, the log format and the build commands.
 *
 * Design rules: never crash the host process on bad input (every read from
 * process memory is bounded by /proc/self/maps, every length read from data
 * is checked against the bytes that remain), never return NULL from
 * __hipRegisterFatBinary, report every problem as a status in log.tsv.
 *
 * Compile-time options: -DHAVE_ZSTD (zstd CCOB bundles and zstd-per-kernel
 * archives), -DHAVE_ZLIB (zlib CCOB bundles), -DHIPSTUB_SELFTEST (the file
 * is #included by stubtest.c; nothing changes here except that the
 * self-test can reach the static functions).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef HAVE_ZSTD
#include <zstd.h>
#endif
#ifdef HAVE_ZLIB
#include <zlib.h>
#endif

#define HS_EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* Status codes.  0..14 are the kpack_error_t values (FORMATS 6.1); the rest
 * are stub-specific. */
enum {
    ST_OK = 0,
    ST_INVALID_ARGUMENT = 1,
    ST_FILE_NOT_FOUND = 2,
    ST_INVALID_FORMAT = 3,
    ST_UNSUPPORTED_VERSION = 4,
    ST_KERNEL_NOT_FOUND = 5,
    ST_DECOMPRESSION_FAILED = 6,
    ST_OUT_OF_MEMORY = 7,
    ST_NOT_IMPLEMENTED = 8,
    ST_IO_ERROR = 9,
    ST_MSGPACK_PARSE_FAILED = 10,
    ST_PATH_DISCOVERY_FAILED = 11,
    ST_INVALID_METADATA = 12,
    ST_ARCHIVE_NOT_FOUND = 13,
    ST_ARCH_NOT_FOUND = 14,
    ST_NO_ARCH,            /* KPACK_STUB_ARCH not set */
    ST_BAD_WRAPPER,        /* wrapper pointer NULL or not readable */
    ST_BAD_MAGIC,          /* wrapper magic neither HIPF nor HIPK */
    ST_BAD_POINTER,        /* HIPF binary pointer not in readable memory */
    ST_BAD_BUNDLE,         /* malformed offload bundle / CCOB header */
    ST_NO_BINARY_FOR_GPU,  /* HIPF: no compatible bundle entry */
    ST_WRITE_FAILED,       /* could not write <seq>.co */
    ST_COUNT
};

static const char *const hs_status_names[ST_COUNT] = {
    "OK", "INVALID_ARGUMENT", "FILE_NOT_FOUND", "INVALID_FORMAT",
    "UNSUPPORTED_VERSION", "KERNEL_NOT_FOUND", "DECOMPRESSION_FAILED",
    "OUT_OF_MEMORY", "NOT_IMPLEMENTED", "IO_ERROR", "MSGPACK_PARSE_FAILED",
    "PATH_DISCOVERY_FAILED", "INVALID_METADATA", "ARCHIVE_NOT_FOUND",
    "ARCH_NOT_FOUND", "NO_ARCH", "BAD_WRAPPER", "BAD_MAGIC", "BAD_POINTER",
    "BAD_BUNDLE", "NO_BINARY_FOR_GPU", "WRITE_FAILED",
};

static const char *hs_status_name(int st)
{
    return (st >= 0 && st < ST_COUNT) ? hs_status_names[st] : "UNKNOWN";
}

#define HIPF_MAGIC 0x48495046u
#define HIPK_MAGIC 0x4B504948u
#define MARKER_MAX (64u * 1024u)
#define MAX_ALLOC ((uint64_t)1 << 32)   /* refuse single buffers > 4 GiB */
#define AMDHSA_PREFIX "amdgcn-amd-amdhsa--"

/* Loader modes (KPACK_STUB_LOADER). */
enum { MODE_FEB2026 = 0, MODE_NEWEST = 1, MODE_NEWEST_STRICT = 2 };

/* Strict checks (KPACK_STUB_STRICT, default on): see README.md. */
static int hs_strict(void)
{
    const char *s = getenv("KPACK_STUB_STRICT");
    return !(s && s[0] == '0');
}

static int hs_debug_on(void)
{
    const char *s = getenv("KPACK_STUB_DEBUG");
    return s && s[0] && s[0] != '0';
}

__attribute__((format(printf, 1, 2)))
static void hs_dbg(const char *fmt, ...)
{
    if (!hs_debug_on())
        return;
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n > sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    ssize_t w = write(2, "hipstub: ", 9);
    w = write(2, buf, (size_t)n);
    (void)w;
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static char *hs_strndup0(const void *p, size_t n)
{
    char *s = malloc(n + 1);
    if (s) {
        memcpy(s, p, n);
        s[n] = 0;
    }
    return s;
}

/* Growable list of owned strings. */
typedef struct {
    char **v;
    size_t n, cap;
} strlist;

static int sl_push(strlist *l, char *s) /* takes ownership; NULL = OOM */
{
    if (!s)
        return -1;
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 8;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) {
            free(s);
            return -1;
        }
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = s;
    return 0;
}

static void sl_free(strlist *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = l->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* /proc/self/maps (FORMATS 6.4). */

typedef struct {
    uintptr_t start, end;   /* the mapping that contains the address */
    uintptr_t rd_end;       /* end of the readable run starting there (0 if
                               the mapping is not readable) */
    uint64_t file_off;
    char *path;             /* NULL when the mapping has no file path */
} maps_hit;

static char *read_whole_fd(int fd, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *b = malloc(cap + 1);
    if (!b)
        return NULL;
    for (;;) {
        if (n == cap) {
            char *nb = realloc(b, cap * 2 + 1);
            if (!nb) {
                free(b);
                return NULL;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, b + n, cap - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            free(b);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    b[n] = 0;
    *len = n;
    return b;
}

/* Parse one maps line.  Returns 0 on success. */
static int maps_parse_line(char *line, uintptr_t *s, uintptr_t *e, char perms[5],
                           uint64_t *off, char **path)
{
    char *p = line, *q;
    errno = 0;
    unsigned long long a = strtoull(p, &q, 16);
    if (q == p || *q != '-')
        return -1;
    p = q + 1;
    unsigned long long b = strtoull(p, &q, 16);
    if (q == p || *q != ' ')
        return -1;
    p = q + 1;
    for (int i = 0; i < 4; i++) {
        if (!p[i] || p[i] == ' ')
            return -1;
        perms[i] = p[i];
    }
    perms[4] = 0;
    p += 4;
    if (*p != ' ')
        return -1;
    p++;
    unsigned long long o = strtoull(p, &q, 16);
    if (q == p || *q != ' ')
        return -1;
    p = q + 1;
    while (*p && *p != ' ') /* dev */
        p++;
    while (*p == ' ')
        p++;
    while (*p && *p != ' ') /* inode */
        p++;
    while (*p == ' ')
        p++;
    *s = (uintptr_t)a;
    *e = (uintptr_t)b;
    *off = o;
    *path = p; /* rest of line (may be empty) */
    return 0;
}

/* Returns 1 if a mapping contains addr, 0 otherwise (or on error). */
static int maps_lookup(uintptr_t addr, maps_hit *h)
{
    memset(h, 0, sizeof *h);
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len;
    char *buf = read_whole_fd(fd, &len);
    close(fd);
    if (!buf)
        return 0;
    int found = 0;
    char *line = buf;
    while (line < buf + len) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        uintptr_t s, e;
        uint64_t off;
        char perms[5], *path;
        if (maps_parse_line(line, &s, &e, perms, &off, &path) == 0) {
            if (!found && addr >= s && addr < e) {
                found = 1;
                h->start = s;
                h->end = e;
                h->file_off = off;
                h->rd_end = perms[0] == 'r' ? e : 0;
                if (path[0] && path[0] != '[')
                    h->path = strdup(path);
            } else if (found && h->rd_end && s == h->rd_end && perms[0] == 'r') {
                h->rd_end = e; /* contiguous readable continuation */
            } else if (found) {
                break;
            }
        }
        if (!nl)
            break;
        line = nl + 1;
    }
    free(buf);
    return found;
}

/* Bytes readable at addr (0 if none). */
static size_t mem_avail(const void *addr)
{
    maps_hit h;
    if (!addr || !maps_lookup((uintptr_t)addr, &h))
        return 0;
    free(h.path);
    return h.rd_end ? (size_t)(h.rd_end - (uintptr_t)addr) : 0;
}

/* ------------------------------------------------------------------------ */
/* MessagePack decoder: strict, bounded, depth-limited, builds a small DOM.
 * Supported: nil, bool, positive/negative fixint, uint8-64, int8-64,
 * float32/64, fixstr/str8/16/32, bin8/16/32, fixarray/array16/32,
 * fixmap/map16/32.  Anything else (ext types, 0xc1) is a parse error. */

enum { MP_NIL, MP_BOOL, MP_UINT, MP_NINT, MP_FLOAT, MP_STR, MP_BIN, MP_ARR, MP_MAP };

typedef struct {
    uint8_t t;
    uint8_t b;          /* bool */
    uint32_t n;         /* element count (ARR) or pair count (MAP) */
    uint64_t u;         /* UINT (also non-negative signed encodings) */
    int64_t i;          /* NINT */
    double f;
    const uint8_t *s;   /* STR/BIN bytes */
    size_t len;
    size_t kids;        /* first child index; MAP children are key,value,... */
} mp_node;

typedef struct {
    const uint8_t *buf;
    size_t len, pos;
    mp_node *nodes;
    size_t nn, cap;
} mp_doc;

#define MP_MAX_DEPTH 32

static void mp_free(mp_doc *d)
{
    free(d->nodes);
    d->nodes = NULL;
    d->nn = d->cap = 0;
}

static int mp_reserve(mp_doc *d, size_t k, size_t *first)
{
    if (k > SIZE_MAX / 2 - d->nn)
        return -1;
    size_t need = d->nn + k;
    if (need > d->cap) {
        size_t nc = d->cap ? d->cap : 16;
        while (nc < need)
            nc *= 2;
        if (nc > SIZE_MAX / sizeof(mp_node))
            return -1;
        mp_node *nv = realloc(d->nodes, nc * sizeof(mp_node));
        if (!nv)
            return -1;
        d->nodes = nv;
        d->cap = nc;
    }
    *first = d->nn;
    memset(d->nodes + d->nn, 0, k * sizeof(mp_node));
    d->nn = need;
    return 0;
}

static int mp_take(mp_doc *d, size_t n, const uint8_t **p)
{
    if (d->len - d->pos < n)
        return -1;
    *p = d->buf + d->pos;
    d->pos += n;
    return 0;
}

static int mp_uN(mp_doc *d, int bytes, uint64_t *v)
{
    const uint8_t *p;
    if (mp_take(d, (size_t)bytes, &p))
        return -1;
    uint64_t x = 0;
    for (int k = 0; k < bytes; k++)
        x = x << 8 | p[k];
    *v = x;
    return 0;
}

static int mp_parse_node(mp_doc *d, size_t idx, int depth);

static int mp_parse_container(mp_doc *d, size_t idx, int t, uint64_t n, int depth)
{
    if (depth >= MP_MAX_DEPTH)
        return -1;
    size_t rem = d->len - d->pos;
    uint64_t slots = t == MP_MAP ? n * 2 : n; /* n <= 2^32-1, no overflow */
    if (slots > rem) /* every element needs at least one byte */
        return -1;
    size_t first;
    if (mp_reserve(d, (size_t)slots, &first))
        return -1;
    d->nodes[idx].t = (uint8_t)t;
    d->nodes[idx].n = (uint32_t)n;
    d->nodes[idx].kids = first;
    for (uint64_t k = 0; k < slots; k++)
        if (mp_parse_node(d, first + (size_t)k, depth + 1))
            return -1;
    return 0;
}

static int mp_parse_bytes(mp_doc *d, size_t idx, int t, uint64_t n)
{
    const uint8_t *p;
    if (n > d->len - d->pos || mp_take(d, (size_t)n, &p))
        return -1;
    d->nodes[idx].t = (uint8_t)t;
    d->nodes[idx].s = p;
    d->nodes[idx].len = (size_t)n;
    return 0;
}

static int mp_set_int(mp_doc *d, size_t idx, int64_t v)
{
    if (v >= 0) {
        d->nodes[idx].t = MP_UINT;
        d->nodes[idx].u = (uint64_t)v;
    } else {
        d->nodes[idx].t = MP_NINT;
        d->nodes[idx].i = v;
    }
    return 0;
}

static int mp_parse_node(mp_doc *d, size_t idx, int depth)
{
    const uint8_t *p;
    uint64_t v;
    if (mp_take(d, 1, &p))
        return -1;
    uint8_t c = *p;
    if (c <= 0x7f) {
        d->nodes[idx].t = MP_UINT;
        d->nodes[idx].u = c;
        return 0;
    }
    if (c >= 0xe0)
        return mp_set_int(d, idx, (int8_t)c);
    if ((c & 0xf0) == 0x80)
        return mp_parse_container(d, idx, MP_MAP, c & 0x0f, depth);
    if ((c & 0xf0) == 0x90)
        return mp_parse_container(d, idx, MP_ARR, c & 0x0f, depth);
    if ((c & 0xe0) == 0xa0)
        return mp_parse_bytes(d, idx, MP_STR, c & 0x1f);
    switch (c) {
    case 0xc0:
        d->nodes[idx].t = MP_NIL;
        return 0;
    case 0xc2:
    case 0xc3:
        d->nodes[idx].t = MP_BOOL;
        d->nodes[idx].b = c == 0xc3;
        return 0;
    case 0xc4: case 0xc5: case 0xc6:
        if (mp_uN(d, 1 << (c - 0xc4), &v))
            return -1;
        return mp_parse_bytes(d, idx, MP_BIN, v);
    case 0xca: {
        if (mp_uN(d, 4, &v))
            return -1;
        uint32_t w = (uint32_t)v;
        float f;
        memcpy(&f, &w, 4);
        d->nodes[idx].t = MP_FLOAT;
        d->nodes[idx].f = f;
        return 0;
    }
    case 0xcb: {
        if (mp_uN(d, 8, &v))
            return -1;
        double f;
        memcpy(&f, &v, 8);
        d->nodes[idx].t = MP_FLOAT;
        d->nodes[idx].f = f;
        return 0;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
        if (mp_uN(d, 1 << (c - 0xcc), &v))
            return -1;
        d->nodes[idx].t = MP_UINT;
        d->nodes[idx].u = v;
        return 0;
    case 0xd0:
        if (mp_uN(d, 1, &v))
            return -1;
        return mp_set_int(d, idx, (int8_t)(uint8_t)v);
    case 0xd1:
        if (mp_uN(d, 2, &v))
            return -1;
        return mp_set_int(d, idx, (int16_t)(uint16_t)v);
    case 0xd2:
        if (mp_uN(d, 4, &v))
            return -1;
        return mp_set_int(d, idx, (int32_t)(uint32_t)v);
    case 0xd3:
        if (mp_uN(d, 8, &v))
            return -1;
        return mp_set_int(d, idx, (int64_t)v);
    case 0xd9: case 0xda: case 0xdb:
        if (mp_uN(d, 1 << (c - 0xd9), &v))
            return -1;
        return mp_parse_bytes(d, idx, MP_STR, v);
    case 0xdc: case 0xdd:
        if (mp_uN(d, c == 0xdc ? 2 : 4, &v))
            return -1;
        return mp_parse_container(d, idx, MP_ARR, v, depth);
    case 0xde: case 0xdf:
        if (mp_uN(d, c == 0xde ? 2 : 4, &v))
            return -1;
        return mp_parse_container(d, idx, MP_MAP, v, depth);
    default: /* 0xc1, ext types 0xc7-0xc9, 0xd4-0xd8 */
        return -1;
    }
}

/* Decode the first object of buf[0..len).  Root is node 0.  d->pos is the
 * number of bytes consumed.  Returns 0 on success. */
static int mp_parse(const uint8_t *buf, size_t len, mp_doc *d)
{
    memset(d, 0, sizeof *d);
    d->buf = buf;
    d->len = len;
    size_t root;
    if (mp_reserve(d, 1, &root) || mp_parse_node(d, root, 0)) {
        mp_free(d);
        return -1;
    }
    return 0;
}

static const mp_node *mp_at(const mp_doc *d, long idx)
{
    return (idx >= 0 && (size_t)idx < d->nn) ? &d->nodes[idx] : NULL;
}

static int mp_is_str(const mp_node *n, const char *s)
{
    size_t l = strlen(s);
    return n && n->t == MP_STR && n->len == l && memcmp(n->s, s, l) == 0;
}

/* Value index of the first entry whose key is the string `key`, or -1. */
static long mp_map_get(const mp_doc *d, long map, const char *key)
{
    const mp_node *m = mp_at(d, map);
    if (!m || m->t != MP_MAP)
        return -1;
    for (uint32_t k = 0; k < m->n; k++)
        if (mp_is_str(&d->nodes[m->kids + 2 * (size_t)k], key))
            return (long)(m->kids + 2 * (size_t)k + 1);
    return -1;
}

static int mp_get_uint(const mp_doc *d, long idx, uint64_t *out)
{
    const mp_node *n = mp_at(d, idx);
    if (!n || n->t != MP_UINT)
        return -1;
    *out = n->u;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Targets (FORMATS 1.2, 6.3). */

static const char *strip_amdhsa(const char *isa)
{
    size_t l = strlen(AMDHSA_PREFIX);
    return strncmp(isa, AMDHSA_PREFIX, l) == 0 ? isa + l : isa;
}

#define MAX_FEATURES 8

/* Split "proc:f1:f2" into processor and non-empty features.  Returns the
 * feature count or -1 (too many / too long).  Writes into `store`. */
static int split_target(const char *t, char *store, size_t storesz,
                        const char **proc, const char *feat[MAX_FEATURES])
{
    size_t l = strlen(t);
    if (l + 1 > storesz)
        return -1;
    memcpy(store, t, l + 1);
    int n = 0;
    char *save = NULL, *tok = strtok_r(store, ":", &save);
    /* strtok_r skips empty tokens; the processor must be the first part */
    if (!tok || store[0] == ':')
        return -1;
    *proc = tok;
    while ((tok = strtok_r(NULL, ":", &save))) {
        if (n == MAX_FEATURES)
            return -1;
        feat[n++] = tok;
    }
    return n;
}

/* Compatible targets of one ISA, most specific first (FORMATS 6.3). */
static int compat_targets(const char *isa, strlist *out)
{
    char store[512];
    const char *proc, *feat[MAX_FEATURES];
    int n = split_target(strip_amdhsa(isa), store, sizeof store, &proc, feat);
    if (n < 0)
        return ST_INVALID_ARGUMENT;
    for (long mask = (1L << n) - 1; mask >= 0; mask--) {
        char buf[600];
        size_t o = (size_t)snprintf(buf, sizeof buf, "%s", proc);
        for (int j = 0; j < n; j++)
            if (mask & (1L << (n - 1 - j)))
                o += (size_t)snprintf(buf + o, sizeof buf - o, ":%s", feat[j]);
        if (o >= sizeof buf)
            return ST_INVALID_ARGUMENT;
        if (sl_push(out, strdup(buf)))
            return ST_OUT_OF_MEMORY;
    }
    return ST_OK;
}

/* ------------------------------------------------------------------------ */
/* Paths (FORMATS 5.8). */

static int path_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* Lexical normalisation of an absolute or relative component list joined to
 * `base` (already canonical): "." dropped, "x/.." removed, "/.." -> "/". */
static char *lexical_join(const char *base, const char *rest)
{
    size_t cap = strlen(base) + strlen(rest) + 3;
    char *out = malloc(cap);
    if (!out)
        return NULL;
    strcpy(out, base);
    size_t ol = strlen(out);
    int absolute = out[0] == '/';
    const char *p = rest;
    while (*p) {
        while (*p == '/')
            p++;
        if (!*p)
            break;
        const char *e = strchr(p, '/');
        size_t cl = e ? (size_t)(e - p) : strlen(p);
        if (cl == 1 && p[0] == '.') {
            /* skip */
        } else if (cl == 2 && p[0] == '.' && p[1] == '.') {
            /* pop last component unless it is ".." or we are at the root */
            char *last = strrchr(out, '/');
            const char *lc = last ? last + 1 : out;
            if (ol == 0 || (absolute && ol == 1)) {
                if (!absolute) {
                    memcpy(out + ol, "..", 3);
                    ol += 2;
                }
            } else if (strcmp(lc, "..") == 0) {
                memcpy(out + ol, "/..", 4);
                ol += 3;
            } else if (last) {
                ol = (size_t)(last - out);
                if (ol == 0 && absolute)
                    ol = 1;
                out[ol] = 0;
            } else {
                ol = 0;
                out[0] = 0;
            }
        } else {
            if (ol > 0 && out[ol - 1] != '/')
                out[ol++] = '/';
            memcpy(out + ol, p, cl);
            ol += cl;
            out[ol] = 0;
        }
        p += cl;
    }
    if (ol == 0) {
        out[0] = '.';
        out[1] = 0;
    }
    return out;
}

/* std::filesystem::weakly_canonical: realpath() of the longest existing
 * prefix, then the rest appended and lexically normalised. */
static char *weakly_canonical(const char *path)
{
    char *abs;
    if (path[0] == '/') {
        abs = strdup(path);
    } else {
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return NULL;
        if (asprintf(&abs, "%s/%s", cwd, path) < 0)
            abs = NULL;
    }
    if (!abs)
        return NULL;
    /* walk components while the prefix exists */
    size_t len = strlen(abs), cut = 1; /* prefix = abs[0..cut) */
    size_t i = 1;
    while (i <= len) {
        size_t j = i;
        while (j < len && abs[j] != '/')
            j++;
        if (j > i) {
            char save = abs[j];
            abs[j] = 0;
            int ex = path_exists(abs);
            abs[j] = save;
            if (!ex)
                break;
            cut = j;
        }
        i = j + 1;
    }
    char save = abs[cut];
    abs[cut] = 0;
    char *canon = realpath(abs, NULL);
    abs[cut] = save;
    if (!canon) {
        free(abs);
        return NULL;
    }
    char *res = lexical_join(canon, abs + cut);
    free(canon);
    free(abs);
    return res;
}

static char *dir_of(const char *path)
{
    const char *s = strrchr(path, '/');
    if (!s)
        return strdup(".");
    if (s == path)
        return strdup("/");
    return hs_strndup0(path, (size_t)(s - path));
}

/* Replace the first "@GFXARCH@" in s by t. */
static char *subst_gfxarch(const char *s, const char *t)
{
    const char *m = strstr(s, "@GFXARCH@");
    char *r;
    if (!m)
        return strdup(s);
    if (asprintf(&r, "%.*s%s%s", (int)(m - s), s, t, m + 9) < 0)
        return NULL;
    return r;
}

/* ------------------------------------------------------------------------ */
/* .kpack archive reader (FORMATS 5). */

typedef struct {
    char *path;        /* path as opened (candidate string) */
    char *canon;       /* realpath, cache key */
    FILE *f;
    uint64_t file_size, toc_off;
    uint8_t *toc;
    mp_doc doc;
    long arches;       /* gfx_arches array node, or -1 */
    long tocmap;       /* toc map node, or -1 */
    int zstd;          /* compression_scheme == zstd-per-kernel */
    long blobs;        /* blobs array node (none), or -1 */
    uint8_t *zr;       /* zstd region */
    uint64_t zoff, zsize;
    uint32_t nk;
    uint64_t *fr_off;  /* frame offsets inside zr */
    uint32_t *fr_len;
} kp_archive;

static void kp_close(kp_archive *a)
{
    if (a->f)
        fclose(a->f);
    mp_free(&a->doc);
    free(a->toc);
    free(a->zr);
    free(a->fr_off);
    free(a->fr_len);
    free(a->path);
    free(a->canon);
    memset(a, 0, sizeof *a);
    a->arches = a->tocmap = a->blobs = -1;
}

static int kp_read_at(FILE *f, uint64_t off, void *dst, size_t n)
{
    if (off > (uint64_t)INT64_MAX || fseeko(f, (off_t)off, SEEK_SET) != 0)
        return -1;
    return fread(dst, 1, n, f) == n ? 0 : -1;
}

/* Open `path`; on failure returns a status and leaves *a closed. */
static int kp_open(const char *path, kp_archive *a)
{
    int strict = hs_strict(), st;
    memset(a, 0, sizeof *a);
    a->arches = a->tocmap = a->blobs = -1;
    a->path = strdup(path);
    if (!a->path)
        return ST_OUT_OF_MEMORY;
    a->f = fopen(path, "rb");
    if (!a->f) {
        st = errno == ENOENT ? ST_FILE_NOT_FOUND : ST_IO_ERROR;
        goto fail;
    }
    struct stat sb;
    if (fstat(fileno(a->f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = ST_IO_ERROR;
        goto fail;
    }
    a->file_size = (uint64_t)sb.st_size;
    if (a->file_size == 0) {
        st = ST_IO_ERROR;
        goto fail;
    }
    uint8_t hdr[16];
    if (a->file_size < 16 || kp_read_at(a->f, 0, hdr, 16)) {
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    if (memcmp(hdr, "KPAK", 4) != 0) {
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    if (rd32(hdr + 4) != 1) {
        st = ST_UNSUPPORTED_VERSION;
        goto fail;
    }
    a->toc_off = rd64(hdr + 8);
    if (a->toc_off >= a->file_size || (strict && a->toc_off < 16)) {
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    uint64_t tl = a->file_size - a->toc_off;
    if (tl > MAX_ALLOC || !(a->toc = malloc((size_t)tl))) {
        st = ST_OUT_OF_MEMORY;
        goto fail;
    }
    if (kp_read_at(a->f, a->toc_off, a->toc, (size_t)tl)) {
        st = ST_IO_ERROR;
        goto fail;
    }
    if (mp_parse(a->toc, (size_t)tl, &a->doc) || a->doc.nodes[0].t != MP_MAP) {
        st = ST_MSGPACK_PARSE_FAILED;
        goto fail;
    }
    if (strict && a->doc.pos != tl) {
        hs_dbg("%s: %zu trailing bytes after the TOC", path, (size_t)(tl - a->doc.pos));
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    a->arches = mp_map_get(&a->doc, 0, "gfx_arches");
    const mp_node *an = mp_at(&a->doc, a->arches);
    if (!an || an->t != MP_ARR) {
        a->arches = -1;
        if (strict) {
            st = ST_INVALID_FORMAT;
            goto fail;
        }
    } else if (strict) {
        for (uint32_t k = 0; k < an->n; k++)
            if (a->doc.nodes[an->kids + k].t != MP_STR) {
                st = ST_INVALID_FORMAT;
                goto fail;
            }
    }
    a->tocmap = mp_map_get(&a->doc, 0, "toc");
    const mp_node *tn = mp_at(&a->doc, a->tocmap);
    if (!tn || tn->t != MP_MAP) {
        a->tocmap = -1;
        if (strict) {
            st = ST_INVALID_FORMAT;
            goto fail;
        }
    }
    long cs = mp_map_get(&a->doc, 0, "compression_scheme");
    const mp_node *cn = mp_at(&a->doc, cs);
    if (cn && mp_is_str(cn, "zstd-per-kernel")) {
        a->zstd = 1;
    } else if (cn && !mp_is_str(cn, "none") && strict) {
        hs_dbg("%s: unknown compression_scheme", path);
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    if (!a->zstd) {
        a->blobs = mp_map_get(&a->doc, 0, "blobs");
        const mp_node *bn = mp_at(&a->doc, a->blobs);
        if (!bn || bn->t != MP_ARR) {
            a->blobs = -1;
            if (strict) {
                st = ST_INVALID_FORMAT;
                goto fail;
            }
        }
        return ST_OK;
    }
    /* zstd-per-kernel: read and index the whole region now (FORMATS 5.4) */
    if (mp_get_uint(&a->doc, mp_map_get(&a->doc, 0, "zstd_offset"), &a->zoff) ||
        mp_get_uint(&a->doc, mp_map_get(&a->doc, 0, "zstd_size"), &a->zsize) ||
        a->zsize > ((uint64_t)1 << 32) || a->zsize < 4 ||
        a->zoff > a->file_size || a->zsize > a->file_size - a->zoff ||
        (strict && (a->zoff < 16 || a->zoff + a->zsize > a->toc_off))) {
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    if (!(a->zr = malloc((size_t)a->zsize))) {
        st = ST_OUT_OF_MEMORY;
        goto fail;
    }
    if (kp_read_at(a->f, a->zoff, a->zr, (size_t)a->zsize)) {
        st = ST_IO_ERROR;
        goto fail;
    }
    a->nk = rd32(a->zr);
    if (a->nk > (1u << 20) || a->nk > (a->zsize - 4) / 4) {
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    a->fr_off = calloc(a->nk ? a->nk : 1, sizeof *a->fr_off);
    a->fr_len = calloc(a->nk ? a->nk : 1, sizeof *a->fr_len);
    if (!a->fr_off || !a->fr_len) {
        st = ST_OUT_OF_MEMORY;
        goto fail;
    }
    uint64_t pos = 4;
    for (uint32_t k = 0; k < a->nk; k++) {
        if (a->zsize - pos < 4) {
            st = ST_INVALID_FORMAT;
            goto fail;
        }
        uint32_t fl = rd32(a->zr + pos);
        pos += 4;
        if (fl > a->zsize - pos) {
            st = ST_INVALID_FORMAT;
            goto fail;
        }
        a->fr_off[k] = pos;
        a->fr_len[k] = fl;
        pos += fl;
    }
    if (strict && pos != a->zsize) {
        hs_dbg("%s: %llu unused bytes in the zstd region", path,
               (unsigned long long)(a->zsize - pos));
        st = ST_INVALID_FORMAT;
        goto fail;
    }
    return ST_OK;
fail:
    hs_dbg("open %s: %s", path, hs_status_name(st));
    kp_close(a);
    return st;
}

static int kp_has_arch(const kp_archive *a, const char *arch)
{
    const mp_node *an = mp_at(&a->doc, a->arches);
    if (!an)
        return 0;
    for (uint32_t k = 0; k < an->n; k++)
        if (mp_is_str(&a->doc.nodes[an->kids + k], arch))
            return 1;
    return 0;
}

/* kpack_get_kernel: malloc'd copy of the code object for (key, arch). */
static int kp_get_kernel(kp_archive *a, const char *key, const char *arch,
                         uint8_t **out, size_t *outlen)
{
    int strict = hs_strict();
    *out = NULL;
    *outlen = 0;
    long bk = mp_map_get(&a->doc, a->tocmap, key);
    const mp_node *bn = mp_at(&a->doc, bk);
    if (!bn || bn->t != MP_MAP)
        return ST_KERNEL_NOT_FOUND;
    long ek = mp_map_get(&a->doc, bk, arch);
    const mp_node *en = mp_at(&a->doc, ek);
    if (!en || en->t != MP_MAP)
        return ST_KERNEL_NOT_FOUND;
    uint64_t ord, osz = 0;
    if (mp_get_uint(&a->doc, mp_map_get(&a->doc, ek, "ordinal"), &ord))
        return ST_INVALID_FORMAT;
    long oszk = mp_map_get(&a->doc, ek, "original_size");
    int have_osz = mp_get_uint(&a->doc, oszk, &osz) == 0;
    if (oszk >= 0 && !have_osz && strict)
        return ST_INVALID_FORMAT;

    if (!a->zstd) {
        const mp_node *bl = mp_at(&a->doc, a->blobs);
        if (!bl || ord >= bl->n)
            return ST_KERNEL_NOT_FOUND;
        long b = (long)(bl->kids + (size_t)ord);
        uint64_t off, size;
        if (mp_get_uint(&a->doc, mp_map_get(&a->doc, b, "offset"), &off) ||
            mp_get_uint(&a->doc, mp_map_get(&a->doc, b, "size"), &size))
            return ST_INVALID_FORMAT;
        if (strict && (off < 16 || off > a->toc_off || size > a->toc_off - off)) {
            hs_dbg("%s: blob %llu [%llu,+%llu) outside the blob region", a->path,
                   (unsigned long long)ord, (unsigned long long)off,
                   (unsigned long long)size);
            return ST_INVALID_FORMAT;
        }
        if (strict && have_osz && osz != size) {
            hs_dbg("%s: original_size %llu != blob size %llu", a->path,
                   (unsigned long long)osz, (unsigned long long)size);
            return ST_INVALID_FORMAT;
        }
        if (size > MAX_ALLOC)
            return ST_OUT_OF_MEMORY;
        uint8_t *buf = malloc(size ? (size_t)size : 1);
        if (!buf)
            return ST_OUT_OF_MEMORY;
        if (size && kp_read_at(a->f, off, buf, (size_t)size)) {
            free(buf);
            return ST_IO_ERROR;
        }
        *out = buf;
        *outlen = (size_t)size;
        return ST_OK;
    }

    if (ord >= a->nk)
        return ST_KERNEL_NOT_FOUND;
    if (!have_osz)
        return ST_INVALID_FORMAT;
    if (osz > MAX_ALLOC)
        return ST_OUT_OF_MEMORY;
#ifdef HAVE_ZSTD
    const uint8_t *fr = a->zr + a->fr_off[ord];
    size_t fl = a->fr_len[ord];
    if (strict) {
        size_t cs = ZSTD_findFrameCompressedSize(fr, fl);
        if (ZSTD_isError(cs) || cs != fl) {
            hs_dbg("%s: frame %llu is not exactly one zstd frame", a->path,
                   (unsigned long long)ord);
            return ST_DECOMPRESSION_FAILED;
        }
    }
    uint8_t *buf = malloc(osz ? (size_t)osz : 1);
    if (!buf)
        return ST_OUT_OF_MEMORY;
    size_t r = ZSTD_decompress(buf, (size_t)osz, fr, fl);
    if (ZSTD_isError(r) || r != osz) {
        hs_dbg("%s: zstd frame %llu: %s", a->path, (unsigned long long)ord,
               ZSTD_isError(r) ? ZSTD_getErrorName(r) : "size mismatch");
        free(buf);
        return ST_DECOMPRESSION_FAILED;
    }
    *out = buf;
    *outlen = (size_t)osz;
    return ST_OK;
#else
    return ST_NOT_IMPLEMENTED;
#endif
}

/* ------------------------------------------------------------------------ */
/* Loader (FORMATS 6.2; UPSTREAM-NEWEST 1.2). */

typedef struct {
    int status;
    char *key;        /* lookup key, or NULL */
    char *source;     /* archive path chosen/tried last, or NULL */
    char *arch;       /* TOC arch key chosen/tried last, or NULL */
    uint8_t *data;
    size_t size;
} kp_result;

static void kp_result_free(kp_result *r)
{
    free(r->key);
    free(r->source);
    free(r->arch);
    free(r->data);
    memset(r, 0, sizeof *r);
}

static int env_truthy(const char *name)
{
    const char *s = getenv(name);
    return s && s[0] && s[0] != '0';
}

static int split_env_list(const char *v, strlist *out)
{
    const char *p = v;
    while (*p) {
        const char *e = strchr(p, ':');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l && sl_push(out, hs_strndup0(p, l)))
            return -1;
        p += l;
        if (*p == ':')
            p++;
    }
    return 0;
}

/* Build the candidate path list (FORMATS 5.8, 6.2 step 4). */
static int kp_candidates(const mp_doc *md, long paths, const char *binary_path,
                         const char *const *arch_list, size_t narch, strlist *cand)
{
    const char *ov = getenv("ROCM_KPACK_PATH");
    if (ov && *ov)
        return split_env_list(ov, cand) ? ST_OUT_OF_MEMORY : ST_OK;
    const char *pre = getenv("ROCM_KPACK_PATH_PREFIX");
    if (pre && *pre && split_env_list(pre, cand))
        return ST_OUT_OF_MEMORY;

    char *bdir = dir_of(binary_path);
    if (!bdir)
        return ST_OUT_OF_MEMORY;
    int st = ST_OK;
    const mp_node *pn = mp_at(md, paths);
    for (uint32_t k = 0; k < pn->n && st == ST_OK; k++) {
        const mp_node *sn = &md->nodes[pn->kids + k];
        if (sn->t != MP_STR || memchr(sn->s, 0, sn->len))
            continue;
        char *raw = hs_strndup0(sn->s, sn->len), *res;
        if (!raw) {
            st = ST_OUT_OF_MEMORY;
            break;
        }
        if (raw[0] == '/') {
            res = raw;
        } else {
            char *joined;
            if (asprintf(&joined, "%s/%s", bdir, raw) < 0)
                joined = NULL;
            free(raw);
            res = joined ? weakly_canonical(joined) : NULL;
            free(joined);
        }
        if (!res) {
            st = ST_OUT_OF_MEMORY; /* or getcwd/realpath failure */
            break;
        }
        if (!strstr(res, "@GFXARCH@")) {
            if (sl_push(cand, res))
                st = ST_OUT_OF_MEMORY;
            continue;
        }
        for (size_t ai = 0; ai < narch && st == ST_OK; ai++) {
            strlist ts = {0};
            st = compat_targets(arch_list[ai], &ts);
            for (size_t ti = 0; ti < ts.n && st == ST_OK; ti++)
                if (sl_push(cand, subst_gfxarch(res, ts.v[ti])))
                    st = ST_OUT_OF_MEMORY;
            sl_free(&ts);
        }
        free(res);
    }
    free(bdir);
    return st;
}

static int set_str(char **dst, const char *s)
{
    free(*dst);
    *dst = s ? strdup(s) : NULL;
    return s && !*dst ? -1 : 0;
}

/* kpack_load_code_object.  marker: at most marker_len readable bytes. */
static void kp_load(const uint8_t *marker, size_t marker_len, const char *binary_path,
                    uint32_t co_index, const char *const *arch_list, size_t narch,
                    int mode, kp_result *r)
{
    memset(r, 0, sizeof *r);
    kp_archive *arcs = NULL;
    size_t narc = 0;
    strlist cand = {0};
    mp_doc md;
    memset(&md, 0, sizeof md);

    if (!marker || !marker_len || !binary_path || !arch_list || !narch) {
        r->status = ST_INVALID_ARGUMENT;
        return;
    }
    if (env_truthy("ROCM_KPACK_DISABLE")) {
        r->status = ST_NOT_IMPLEMENTED;
        return;
    }
    /* 2. marker */
    if (marker_len > MARKER_MAX)
        marker_len = MARKER_MAX;
    if (mp_parse(marker, marker_len, &md) || md.nodes[0].t != MP_MAP) {
        r->status = ST_INVALID_METADATA;
        goto out;
    }
    long kn = mp_map_get(&md, 0, "kernel_name");
    long pk = mp_map_get(&md, 0, "kpack_search_paths");
    const mp_node *knn = mp_at(&md, kn), *pkn = mp_at(&md, pk);
    if (!knn || knn->t != MP_STR || !pkn || pkn->t != MP_ARR) {
        r->status = ST_INVALID_METADATA;
        goto out;
    }
    int nstr = 0;
    for (uint32_t k = 0; k < pkn->n; k++)
        nstr += md.nodes[pkn->kids + k].t == MP_STR;
    if (!nstr) {
        r->status = ST_INVALID_METADATA;
        goto out;
    }
    /* 3. key */
    if (asprintf(&r->key, "%.*s#%u", (int)knn->len, (const char *)knn->s,
                 co_index) < 0) {
        r->key = NULL;
        r->status = ST_OUT_OF_MEMORY;
        goto out;
    }
    /* 4. candidates */
    r->status = kp_candidates(&md, pk, binary_path, arch_list, narch, &cand);
    if (r->status)
        goto out;
    /* 5. open usable archives, dedup by canonical path */
    arcs = calloc(cand.n ? cand.n : 1, sizeof *arcs);
    if (!arcs) {
        r->status = ST_OUT_OF_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < cand.n; i++) {
        struct stat st;
        hs_dbg("candidate %s", cand.v[i]);
        if (stat(cand.v[i], &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        char *canon = realpath(cand.v[i], NULL);
        if (!canon)
            continue;
        int dup = 0;
        for (size_t j = 0; j < narc && !dup; j++)
            dup = strcmp(arcs[j].canon, canon) == 0;
        if (dup) {
            free(canon);
            continue;
        }
        int os = kp_open(cand.v[i], &arcs[narc]);
        if (os != ST_OK) {
            free(canon);
            if (hs_strict()) {
                /* the real runtime skips it silently; an oracle should not */
                r->status = os;
                set_str(&r->source, cand.v[i]);
                goto out;
            }
            continue;
        }
        arcs[narc++].canon = canon;
        hs_dbg("opened %s", cand.v[i]);
    }
    if (!narc) {
        r->status = ST_ARCHIVE_NOT_FOUND;
        goto out;
    }
    /* 6./7. selection */
    int tried = 0, last = ST_ARCH_NOT_FOUND;
    for (size_t ai = 0; ai < narch; ai++) {
        strlist ts = {0};
        int cs = compat_targets(arch_list[ai], &ts);
        if (cs) {
            sl_free(&ts);
            r->status = cs;
            goto out;
        }
        for (size_t ti = 0; ti < ts.n; ti++) {
            for (size_t j = 0; j < narc; j++) {
                if (!kp_has_arch(&arcs[j], ts.v[ti]))
                    continue;
                tried = 1;
                int gs = kp_get_kernel(&arcs[j], r->key, ts.v[ti], &r->data, &r->size);
                hs_dbg("try %s [%s] %s: %s", arcs[j].path, ts.v[ti], r->key,
                       hs_status_name(gs));
                if (set_str(&r->source, arcs[j].path) || set_str(&r->arch, ts.v[ti]))
                    gs = ST_OUT_OF_MEMORY;
                last = gs;
                if (gs == ST_OK || mode == MODE_FEB2026 ||
                    (mode == MODE_NEWEST_STRICT && gs != ST_KERNEL_NOT_FOUND)) {
                    sl_free(&ts);
                    r->status = gs;
                    goto out;
                }
            }
        }
        sl_free(&ts);
    }
    r->status = tried ? last : ST_ARCH_NOT_FOUND;
out:
    if (r->status != ST_OK) {
        free(r->data);
        r->data = NULL;
        r->size = 0;
    }
    for (size_t j = 0; j < narc; j++)
        kp_close(&arcs[j]);
    free(arcs);
    sl_free(&cand);
    mp_free(&md);
}

/* ------------------------------------------------------------------------ */
/* Offload bundles (FORMATS 1). */

static const char BUNDLE_MAGIC[24] = "__CLANG_OFFLOAD_BUNDLE__";

typedef struct {
    const char *id;
    size_t idlen;
    uint64_t off, size;
} bentry;

/* Parse an uncompressed bundle at p (avail readable bytes).  *ents is
 * malloc'd.  Returns a status. */
static int bundle_parse(const uint8_t *p, size_t avail, bentry **ents, size_t *nents)
{
    *ents = NULL;
    *nents = 0;
    if (avail < 32 || memcmp(p, BUNDLE_MAGIC, 24) != 0)
        return ST_BAD_BUNDLE;
    uint64_t n = rd64(p + 24);
    if (n == 0 || n > (avail - 32) / 24)
        return ST_BAD_BUNDLE;
    bentry *e = calloc((size_t)n, sizeof *e);
    if (!e)
        return ST_OUT_OF_MEMORY;
    size_t pos = 32;
    for (uint64_t k = 0; k < n; k++) {
        if (avail - pos < 24)
            goto bad;
        e[k].off = rd64(p + pos);
        e[k].size = rd64(p + pos + 8);
        uint64_t il = rd64(p + pos + 16);
        pos += 24;
        if (il > avail - pos)
            goto bad;
        e[k].id = (const char *)p + pos;
        e[k].idlen = (size_t)il;
        pos += (size_t)il;
        if (e[k].off == 0 || e[k].off > avail || e[k].size > avail - e[k].off)
            goto bad;
    }
    *ents = e;
    *nents = (size_t)n;
    return ST_OK;
bad:
    free(e);
    return ST_BAD_BUNDLE;
}

/* Decode a CCOB (FORMATS 1.3) into a malloc'd uncompressed bundle. */
static int ccob_decode(const uint8_t *p, size_t avail, uint8_t **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (avail < 8 || memcmp(p, "CCOB", 4) != 0)
        return ST_BAD_BUNDLE;
    unsigned ver = (unsigned)p[4] | (unsigned)p[5] << 8;
    unsigned method = (unsigned)p[6] | (unsigned)p[7] << 8;
    size_t hsz;
    uint64_t total = 0, usz;
    switch (ver) {
    case 1:
        hsz = 20;
        if (avail < hsz)
            return ST_BAD_BUNDLE;
        usz = rd32(p + 8);
        break;
    case 2:
        hsz = 24;
        if (avail < hsz)
            return ST_BAD_BUNDLE;
        total = rd32(p + 8);
        usz = rd32(p + 12);
        break;
    case 3:
        hsz = 32;
        if (avail < hsz)
            return ST_BAD_BUNDLE;
        total = rd64(p + 8);
        usz = rd64(p + 16);
        break;
    default:
        return ST_BAD_BUNDLE;
    }
    if (method > 1)
        return ST_BAD_BUNDLE;
    size_t plen;
    if (ver == 1) {
        plen = avail - hsz; /* the decoder finds the end of the stream */
    } else {
        if (total < hsz || total > avail)
            return ST_BAD_BUNDLE;
        plen = (size_t)(total - hsz);
    }
    if (usz > MAX_ALLOC)
        return ST_OUT_OF_MEMORY;
    const uint8_t *src = p + hsz;
    uint8_t *buf = malloc(usz ? (size_t)usz : 1);
    if (!buf)
        return ST_OUT_OF_MEMORY;
    int st = ST_NOT_IMPLEMENTED;
    (void)src; /* unused when built without any decompressor */
    (void)plen;
    if (method == 1) {
#ifdef HAVE_ZSTD
        if (ver == 1) {
            size_t fs = ZSTD_findFrameCompressedSize(src, plen);
            if (ZSTD_isError(fs)) {
                st = ST_DECOMPRESSION_FAILED;
                goto done;
            }
            plen = fs;
        }
        size_t r = ZSTD_decompress(buf, (size_t)usz, src, plen);
        st = (ZSTD_isError(r) || r != usz) ? ST_DECOMPRESSION_FAILED : ST_OK;
#endif
    } else {
#ifdef HAVE_ZLIB
        uLongf dl = (uLongf)usz;
        uLong sl = (uLong)plen;
        int zr = uncompress2(buf, &dl, src, &sl);
        st = (zr != Z_OK || dl != usz) ? ST_DECOMPRESSION_FAILED : ST_OK;
#endif
    }
#ifdef HAVE_ZSTD
done:
#endif
    if (st != ST_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *outlen = (size_t)usz;
    return ST_OK;
}

/* Entry ID -> arch string, for GPU entries of a HIP kind; NULL otherwise. */
static char *entry_arch(const bentry *e)
{
    static const char *const kinds[] = {"hipv4-" AMDHSA_PREFIX, "hip-" AMDHSA_PREFIX};
    for (size_t k = 0; k < 2; k++) {
        size_t l = strlen(kinds[k]);
        if (e->idlen > l && memcmp(e->id, kinds[k], l) == 0 &&
            !memchr(e->id, 0, e->idlen))
            return hs_strndup0(e->id + l, e->idlen - l);
    }
    return NULL;
}

/* The portable SPIR-V identity: the arch a SPIR-V entry is reported as,
 * and the name appended last to the kpack arch list (docs/research/spirv.md
 * section 5.4: a runtime that JIT-compiles SPIR-V from archives asks for it
 * after the native and generic ISAs). */
#define SPIRV_ARCH "amdgcnspirv"

/* Whether the runtime modelled here JIT-compiles SPIR-V (default yes;
 * KPACK_STUB_SPIRV=0 models a runtime that cannot). */
static int spirv_enabled(void)
{
    const char *s = getenv("KPACK_STUB_SPIRV");
    return !(s && strcmp(s, "0") == 0);
}

/* Is bundle entry `e` a portable SPIR-V code object?  Offload kind hip,
 * hipv4 or hcc; triple spirv64-amd-amdhsa with an empty or "unknown"
 * environment; processor amdgcnspirv; no features. */
static int entry_is_spirv(const bentry *e)
{
    static const char *const kinds[] = {"hip-", "hipv4-", "hcc-"};
    static const char *const rests[] = {"spirv64-amd-amdhsa--" SPIRV_ARCH,
                                        "spirv64-amd-amdhsa-unknown-" SPIRV_ARCH};
    for (size_t k = 0; k < 3; k++) {
        size_t kl = strlen(kinds[k]);
        if (e->idlen <= kl || memcmp(e->id, kinds[k], kl) != 0)
            continue;
        for (size_t r = 0; r < 2; r++) {
            size_t rl = strlen(rests[r]);
            if (e->idlen == kl + rl && memcmp(e->id + kl, rests[r], rl) == 0)
                return 1;
        }
    }
    return 0;
}

/* Does a code object start with the SPIR-V magic (0x07230203, little
 * endian)?  Such a blob is what the runtime would JIT-compile. */
static int is_spirv_blob(const uint8_t *d, size_t n)
{
    return n >= 4 && d[0] == 0x03 && d[1] == 0x02 && d[2] == 0x23 && d[3] == 0x07;
}

/* Is code-object target `co` usable on device ISA `dev`?  Returns the
 * number of features of `co` (specificity) or -1. */
static int target_match(const char *co, const char *dev)
{
    char s1[512], s2[512];
    const char *p1, *p2, *f1[MAX_FEATURES], *f2[MAX_FEATURES];
    int n1 = split_target(co, s1, sizeof s1, &p1, f1);
    int n2 = split_target(strip_amdhsa(dev), s2, sizeof s2, &p2, f2);
    if (n1 < 0 || n2 < 0 || strcmp(p1, p2) != 0)
        return -1;
    for (int i = 0; i < n1; i++) {
        size_t l = strlen(f1[i]);
        if (l < 2 || (f1[i][l - 1] != '+' && f1[i][l - 1] != '-'))
            return -1;
        int ok = 0;
        for (int j = 0; j < n2 && !ok; j++)
            ok = strcmp(f1[i], f2[j]) == 0;
        if (!ok)
            return -1; /* entry names a feature value the device lacks */
    }
    return n1;
}

/* Choose the entry the fat HIP runtime would load: native ISA before the
 * generic one, most specific compatible entry, first one on ties; with
 * neither, the first SPIR-V entry (which the runtime would JIT-compile). */
static int fat_select(const bentry *e, size_t n, const char *const *isas, size_t nisa,
                      size_t *chosen, char **arch)
{
    *arch = NULL;
    for (size_t i = 0; i < nisa; i++) {
        long best = -1;
        int best_spec = -1;
        for (size_t k = 0; k < n; k++) {
            char *a = entry_arch(&e[k]);
            if (!a)
                continue;
            int spec = target_match(a, isas[i]);
            if (spec > best_spec) {
                best_spec = spec;
                best = (long)k;
            }
            free(a);
        }
        if (best >= 0) {
            *chosen = (size_t)best;
            *arch = entry_arch(&e[best]);
            return *arch ? ST_OK : ST_OUT_OF_MEMORY;
        }
    }
    for (size_t k = 0; nisa && spirv_enabled() && k < n; k++) {
        if (entry_is_spirv(&e[k])) {
            *chosen = k;
            *arch = hs_strndup0(SPIRV_ARCH, strlen(SPIRV_ARCH));
            return *arch ? ST_OK : ST_OUT_OF_MEMORY;
        }
    }
    return ST_NO_BINARY_FOR_GPU;
}

typedef struct {
    int status;
    char *arch;
    uint8_t *data;  /* malloc'd copy */
    size_t size;
} fat_result;

/* Process a HIPF binary: p points at a bundle or CCOB, avail readable. */
static void fat_load(const uint8_t *p, size_t avail, const char *const *isas, size_t nisa,
                     fat_result *r)
{
    memset(r, 0, sizeof *r);
    uint8_t *dec = NULL;
    const uint8_t *b = p;
    size_t blen = avail;
    bentry *ents = NULL;
    size_t n = 0, k = 0;
    if (avail >= 4 && memcmp(p, "CCOB", 4) == 0) {
        r->status = ccob_decode(p, avail, &dec, &blen);
        if (r->status)
            return;
        b = dec;
    }
    r->status = bundle_parse(b, blen, &ents, &n);
    if (r->status == ST_OK)
        r->status = fat_select(ents, n, isas, nisa, &k, &r->arch);
    if (r->status == ST_OK) {
        r->size = (size_t)ents[k].size;
        r->data = malloc(r->size ? r->size : 1);
        if (r->data)
            memcpy(r->data, b + ents[k].off, r->size);
        else
            r->status = ST_OUT_OF_MEMORY;
    }
    free(ents);
    free(dec);
}

/* ------------------------------------------------------------------------ */
/* Output. */

static void write_all(int fd, const void *p, size_t n, int *err)
{
    const uint8_t *q = p;
    while (n) {
        ssize_t w = write(fd, q, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            *err = 1;
            return;
        }
        q += w;
        n -= (size_t)w;
    }
}

static int write_co(const char *dir, unsigned seq, const uint8_t *d, size_t n)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%u.co", dir, seq) >= sizeof path)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int err = 0;
    write_all(fd, d, n, &err);
    if (close(fd) != 0)
        err = 1;
    return err ? -1 : 0;
}

/* Copy a field into the log line, replacing tabs/newlines. */
static size_t put_field(char *buf, size_t o, size_t cap, const char *s)
{
    if (!s || !*s)
        s = "-";
    for (; *s && o + 1 < cap; s++)
        buf[o++] = (*s == '\t' || *s == '\n' || *s == '\r') ? '?' : *s;
    if (o + 1 < cap)
        buf[o++] = '\t';
    return o;
}

static void log_line(const char *dir, unsigned seq, const char *magic, const char *bpath,
                     const char *co_index, const char *source, const char *key,
                     const char *arch, size_t size, int status)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/log.tsv", dir) >= sizeof path)
        return;
    size_t cap = 3 * PATH_MAX + 1024;
    char *buf = malloc(cap);
    if (!buf)
        return;
    size_t o = (size_t)snprintf(buf, cap, "%u\t", seq);
    o = put_field(buf, o, cap, magic);
    o = put_field(buf, o, cap, bpath);
    o = put_field(buf, o, cap, co_index);
    o = put_field(buf, o, cap, source);
    o = put_field(buf, o, cap, key);
    o = put_field(buf, o, cap, arch);
    if (o < cap)
        o += (size_t)snprintf(buf + o, cap - o, "%zu\t%s\n", size, hs_status_name(status));
    if (o > cap - 1) { /* truncated: keep the line terminated */
        o = cap - 1;
        buf[o - 1] = '\n';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, o); /* one write() per line */
        (void)w;
        close(fd);
    }
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* __hipRegisterFatBinary. */

static unsigned hs_seq;
static void *hs_dummy_slot = &hs_dummy_slot;

static int loader_mode(void)
{
    const char *m = getenv("KPACK_STUB_LOADER");
    if (!m || !*m || strcmp(m, "feb2026") == 0)
        return MODE_FEB2026;
    if (strcmp(m, "newest") == 0)
        return MODE_NEWEST;
    if (strcmp(m, "newest-strict") == 0)
        return MODE_NEWEST_STRICT;
    hs_dbg("unknown KPACK_STUB_LOADER=%s, using feb2026", m);
    return MODE_FEB2026;
}

/* Records that the code object of call `seq` is SPIR-V the runtime would
 * JIT-compile: `<seq>.jit` holds the device ISA it would compile for. */
static int write_jit(const char *dir, unsigned seq, const char *isa)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%u.jit", dir, seq) >= sizeof path)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int err = 0;
    write_all(fd, isa, strlen(isa), &err);
    write_all(fd, "\n", 1, &err);
    if (close(fd) != 0)
        err = 1;
    return err ? -1 : 0;
}

static void hs_register(unsigned seq, const void *wrapper, const char *outdir)
{
    const char *archs[3];
    size_t narch = 0;
    const char *a1 = getenv("KPACK_STUB_ARCH"), *a2 = getenv("KPACK_STUB_ARCH2");
    if (a1 && *a1)
        archs[narch++] = strip_amdhsa(a1);
    if (narch && a2 && *a2)
        archs[narch++] = strip_amdhsa(a2);
    /* The kpack path asks for SPIR-V last; the fat path looks for it in
     * fat_select.  `nkarch` is the kpack arch list's length. */
    size_t nkarch = narch;
    if (narch && spirv_enabled())
        archs[nkarch++] = SPIRV_ARCH;

    char magic_s[16] = "-", co_s[16] = "-";
    const char *source = NULL, *key = NULL, *arch = NULL;
    char *bpath = NULL;
    uint8_t *data = NULL;
    size_t size = 0;
    int st;
    kp_result kr;
    fat_result fr;
    memset(&kr, 0, sizeof kr);
    memset(&fr, 0, sizeof fr);

    if (mem_avail(wrapper) < 24) {
        st = ST_BAD_WRAPPER;
        goto log;
    }
    const uint8_t *w = wrapper;
    uint32_t magic = rd32(w);
    uint64_t binary = rd64(w + 8), res1 = rd64(w + 16);
    snprintf(co_s, sizeof co_s, "%u", (unsigned)(uint32_t)res1);
    if (magic == HIPF_MAGIC) {
        strcpy(magic_s, "HIPF");
        maps_hit h;
        if (maps_lookup((uintptr_t)wrapper, &h))
            bpath = h.path;
        source = "fat";
        size_t avail = mem_avail((const void *)(uintptr_t)binary);
        if (!narch) {
            st = ST_NO_ARCH;
        } else if (!avail) {
            st = ST_BAD_POINTER;
        } else {
            fat_load((const uint8_t *)(uintptr_t)binary, avail, archs, narch, &fr);
            st = fr.status;
            arch = fr.arch;
            data = fr.data;
            size = fr.size;
        }
    } else if (magic == HIPK_MAGIC) {
        strcpy(magic_s, "HIPK");
        maps_hit h;
        size_t avail = 0;
        if (binary && maps_lookup((uintptr_t)binary, &h)) {
            bpath = h.path;
            avail = h.rd_end ? (size_t)(h.rd_end - (uintptr_t)binary) : 0;
        }
        if (!bpath || !avail) {
            st = ST_PATH_DISCOVERY_FAILED;
        } else if (!narch) {
            st = ST_NO_ARCH;
        } else {
            kp_load((const uint8_t *)(uintptr_t)binary, avail, bpath, (uint32_t)res1,
                    archs, nkarch, loader_mode(), &kr);
            st = kr.status;
            source = kr.source;
            key = kr.key;
            arch = kr.arch;
            data = kr.data;
            size = kr.size;
        }
    } else {
        snprintf(magic_s, sizeof magic_s, "0x%08x", magic);
        st = ST_BAD_MAGIC;
    }
    if (st == ST_OK && write_co(outdir, seq, data, size) != 0)
        st = ST_WRITE_FAILED;
    /* No JIT here: a SPIR-V blob is recorded as "would JIT" and the call
     * succeeds, with the SPIR-V bytes in <seq>.co. */
    if (st == ST_OK && is_spirv_blob(data, size) && write_jit(outdir, seq, archs[0]) != 0)
        st = ST_WRITE_FAILED;
    if (st != ST_OK)
        size = 0;
log:
    log_line(outdir, seq, magic_s, bpath, co_s, source, key, arch, size, st);
    hs_dbg("#%u %s %s: %s", seq, magic_s, bpath ? bpath : "-", hs_status_name(st));
    free(bpath);
    kp_result_free(&kr);
    free(fr.arch);
    free(fr.data);
}

HS_EXPORT void **__hipRegisterFatBinary(const void *data)
{
    unsigned seq = __atomic_fetch_add(&hs_seq, 1u, __ATOMIC_SEQ_CST);
    const char *out = getenv("KPACK_STUB_OUT");
    if (out && *out) {
        int saved = errno;
        hs_register(seq, data, out);
        errno = saved;
    }
    return &hs_dummy_slot;
}

/* ------------------------------------------------------------------------ */
/* Other hand-written entry points (no-ops that let host code run). */

typedef struct {
    uint32_t x, y, z;
} hs_dim3;

typedef struct {
    hs_dim3 grid, block;
    size_t shmem;
    void *stream;
} hs_launch_cfg;

#define HS_CFG_DEPTH 16
static __thread hs_launch_cfg hs_cfg[HS_CFG_DEPTH];
static __thread int hs_cfg_n;

HS_EXPORT void __hipUnregisterFatBinary(void **modules)
{
    (void)modules;
}

HS_EXPORT void __hipRegisterFunction(void **modules, const void *hostFunction,
                                     char *deviceFunction, const char *deviceName,
                                     unsigned int threadLimit, void *tid, void *bid,
                                     void *blockDim, void *gridDim, int *wSize)
{
    (void)modules, (void)hostFunction, (void)deviceFunction, (void)deviceName;
    (void)threadLimit, (void)tid, (void)bid, (void)blockDim, (void)gridDim, (void)wSize;
}

HS_EXPORT void __hipRegisterVar(void **modules, void *var, char *hostVar, char *deviceVar,
                                int ext, size_t size, int constant, int global)
{
    (void)modules, (void)var, (void)hostVar, (void)deviceVar;
    (void)ext, (void)size, (void)constant, (void)global;
}

HS_EXPORT void __hipRegisterManagedVar(void *hipModule, void **pointer, void *init_value,
                                       const char *name, size_t size, unsigned align)
{
    (void)hipModule, (void)name, (void)align;
    if (pointer) {
        void *p = calloc(1, size ? size : 1);
        if (p && init_value && size)
            memcpy(p, init_value, size);
        *pointer = p;
    }
}

HS_EXPORT void __hipRegisterSurface(void **modules, void *var, char *hostVar,
                                    char *deviceVar, int type, int ext)
{
    (void)modules, (void)var, (void)hostVar, (void)deviceVar, (void)type, (void)ext;
}

HS_EXPORT void __hipRegisterTexture(void **modules, void *var, char *hostVar,
                                    char *deviceVar, int type, int norm, int ext)
{
    (void)modules, (void)var, (void)hostVar, (void)deviceVar;
    (void)type, (void)norm, (void)ext;
}

HS_EXPORT void __hipGetPCH(const char **pch, unsigned int *size)
{
    if (pch)
        *pch = NULL;
    if (size)
        *size = 0;
}

HS_EXPORT int __hipPushCallConfiguration(hs_dim3 gridDim, hs_dim3 blockDim,
                                         size_t sharedMem, void *stream)
{
    if (hs_cfg_n == HS_CFG_DEPTH)
        return 9; /* hipErrorInvalidConfiguration */
    hs_launch_cfg *c = &hs_cfg[hs_cfg_n++];
    c->grid = gridDim;
    c->block = blockDim;
    c->shmem = sharedMem;
    c->stream = stream;
    return 0;
}

HS_EXPORT int __hipPopCallConfiguration(hs_dim3 *gridDim, hs_dim3 *blockDim,
                                        size_t *sharedMem, void **stream)
{
    if (hs_cfg_n == 0)
        return 9;
    hs_launch_cfg *c = &hs_cfg[--hs_cfg_n];
    if (gridDim)
        *gridDim = c->grid;
    if (blockDim)
        *blockDim = c->block;
    if (sharedMem)
        *sharedMem = c->shmem;
    if (stream)
        *stream = c->stream;
    return 0;
}

HS_EXPORT int hipLaunchKernel(const void *function_address, hs_dim3 numBlocks,
                              hs_dim3 dimBlocks, void **args, size_t sharedMemBytes,
                              void *stream)
{
    (void)function_address, (void)numBlocks, (void)dimBlocks, (void)args;
    (void)sharedMemBytes, (void)stream;
    return 0;
}

/* Host memory instead of device memory: enough for test programs that
 * allocate, launch (a no-op) and free. */
HS_EXPORT int hipMalloc(void **ptr, size_t size)
{
    if (!ptr)
        return 1; /* hipErrorInvalidValue */
    *ptr = calloc(1, size ? size : 1);
    return *ptr ? 0 : 2; /* hipErrorOutOfMemory */
}

HS_EXPORT int hipFree(void *ptr)
{
    free(ptr);
    return 0;
}

HS_EXPORT int hipDeviceSynchronize(void)
{
    return 0;
}

typedef struct {
    int x, y, z, w;
    int f; /* enum hipChannelFormatKind */
} hs_channel_desc;

HS_EXPORT hs_channel_desc hipCreateChannelDesc(int x, int y, int z, int w, int f)
{
    hs_channel_desc d = {x, y, z, w, f};
    return d;
}

HS_EXPORT const char *hipGetErrorName(int e)
{
    switch (e) {
    case 0: return "hipSuccess";
    case 801: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
    }
}

HS_EXPORT const char *hipGetErrorString(int e)
{
    switch (e) {
    case 0: return "no error";
    case 801: return "operation not supported (kpack test HIP stub)";
    default: return "unknown error (kpack test HIP stub)";
    }
}

/* ------------------------------------------------------------------------ */
/* Generated stubs for the rest of the HIP 5.2 ABI (see gen_syms.py). */

#define HS_STUB_IMPL(name)
#define HS_STUB_ERR(name)   HS_EXPORT int name(void) { return 801; }
#define HS_STUB_OK(name)    HS_EXPORT int name(void) { return 0; }
#define HS_STUB_NEG1(name)  HS_EXPORT int name(void) { return -1; }
#define HS_STUB_RTC(name)   HS_EXPORT int name(void) { return 11; }
#define HS_STUB_NULLP(name) HS_EXPORT void *name(void) { return NULL; }
#define HIPSTUB_SYM(cls, name, ver) HS_STUB_##cls(name)
#include "hipstub_syms.h"
#undef HIPSTUB_SYM
