/* dlopen_driver LIB... : dlopen each argument with RTLD_NOW | RTLD_GLOBAL.
 * Prints the dlerror() text and exits 1 on the first failure, exits 0 when
 * all libraries loaded.  Libraries are not closed (their destructors run at
 * exit, like in a normal process). */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s LIB...\n", argv[0]);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) {
            const char *e = dlerror();
            fprintf(stderr, "dlopen_driver: %s: %s\n", argv[i], e ? e : "unknown error");
            return 1;
        }
    }
    return 0;
}
