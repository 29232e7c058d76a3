/*
 * stubtest.c - unit tests for hipstub.c's internals.
 *
 *   cc -Wall -Wextra -Werror -O1 -g -DHAVE_ZSTD -DHAVE_ZLIB \
 *      -o stubtest stubtest.c -lzstd -lz -pthread
 *   ./stubtest [VECTORS]
 *
 * VECTORS is the compatibility-vector directory (test_assets/vectors of the
 * repository). Without it, the path is derived from where this source file
 * was compiled from (__FILE__), so it works from any build directory as long
 * as the checkout has not moved since.
 *
 * The library source is #included, so the static functions are reachable.
 * Prints one line per failed check and a summary; exits 0 iff all passed.
 */
#define HIPSTUB_SELFTEST 1
#include "hipstub.c"

#include <pthread.h>
#include <sys/mman.h>

static int g_fail, g_pass;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (cond) {                                                          \
            g_pass++;                                                        \
        } else {                                                             \
            g_fail++;                                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);             \
            fprintf(stderr, __VA_ARGS__);                                    \
            fputc('\n', stderr);                                             \
        }                                                                    \
    } while (0)

#define CHECK_ST(got, want, what)                                            \
    CHECK((got) == (want), "%s: got %s, want %s", what, hs_status_name(got), \
          hs_status_name(want))

static const char *g_vec;   /* vectors dir */
static char g_vec_default[1024];
static char g_tmp[256];     /* scratch dir */

/* ------------------------------------------------------------------------ */
/* The helpers and tests are kept in their own files and compiled here, as
 * one translation unit (like hipstub.c's parts), so that they reach the
 * library's static functions and each other.  Order matters: the util part
 * comes first. */
#include "stubtest_util.inc"     /* buffers, writers, files, archives, load() */
#include "stubtest_formats.inc"  /* MessagePack, targets, paths */
#include "stubtest_loader.inc"   /* the kpack loader: vectors, synthetic */
#include "stubtest_fat.inc"      /* offload bundles, CCOB, fuzz */
#include "stubtest_register.inc" /* __hipRegisterFatBinary e2e, threads */

int main(int argc, char **argv)
{
    if (argc > 1) {
        g_vec = argv[1];
    } else {
        /* <dir of this file>/../../test_assets/vectors; __FILE__ may be a bare
         * file name when compiled in tests/hip-stub itself. */
        const char *f = __FILE__, *slash = strrchr(f, '/');
        int dl = slash ? (int)(slash - f) : 1;
        const char *dir = slash ? f : ".";
        int n = snprintf(g_vec_default, sizeof g_vec_default, "%.*s/../../test_assets/vectors", dl, dir);
        if (n < 0 || (size_t)n >= sizeof g_vec_default) {
            fprintf(stderr, "stubtest: source path too long; pass the vectors directory\n");
            return 2;
        }
        g_vec = g_vec_default;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/stubtest.XXXXXX");
    if (!mkdtemp(g_tmp)) {
        perror("mkdtemp");
        return 2;
    }
    unsetenv("ROCM_KPACK_PATH");
    unsetenv("ROCM_KPACK_PATH_PREFIX");
    unsetenv("ROCM_KPACK_DISABLE");
    unsetenv("KPACK_STUB_STRICT");
    unsetenv("KPACK_STUB_SPIRV");
    test_msgpack();
    test_targets();
    test_paths();
    test_upstream_vectors();
    test_loader_synthetic();
    test_fat();
    test_register();
    test_threads();
    test_fuzz();
    printf("stubtest: %d passed, %d failed (scratch %s)\n", g_pass, g_fail, g_tmp);
    if (!g_fail) {
        char cmd[400];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_tmp);
    }
    return g_fail ? 1 : 0;
}
