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
/* The parts below are kept in their own files and compiled here, as one
 * translation unit, so that every function stays static (the library's
 * symbols are exactly the HIP ABI of hipstub.map) and stubtest.c, which
 * #includes this file, still reaches them. */
#include "maps_msgpack.inc" /* /proc/self/maps, MessagePack */
#include "archive.inc"      /* targets, paths, the .kpack archive reader */
#include "loaders.inc"      /* the kpack loader, offload bundles, HIPF */

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

/* Writes one of a call's output files, `<dir>/<seq>.<ext>` (created or
 * truncated): `n` bytes of `d`, then the string `tail`.  One function for
 * the code object and the "would JIT" record, so both are written, and fail,
 * the same way.  0 on success, -1 if any step failed. */
static int write_out(const char *dir, unsigned seq, const char *ext, const void *d, size_t n,
                     const char *tail)
{
    char path[PATH_MAX];
    if ((size_t)snprintf(path, sizeof path, "%s/%u.%s", dir, seq, ext) >= sizeof path)
        return -1;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    int err = 0;
    write_all(fd, d, n, &err);
    write_all(fd, tail, strlen(tail), &err);
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
    if (st == ST_OK && write_out(outdir, seq, "co", data, size, "") != 0)
        st = ST_WRITE_FAILED;
    /* No JIT here: a SPIR-V blob is recorded as "would JIT" and the call
     * succeeds, with the SPIR-V bytes in <seq>.co and, in <seq>.jit, the
     * device ISA the runtime would compile it for. */
    if (st == ST_OK && is_spirv_blob(data, size) &&
        write_out(outdir, seq, "jit", archs[0], strlen(archs[0]), "\n") != 0)
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
