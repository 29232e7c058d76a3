/*
 * A minimal bcryptprimitives.dll for wine prefixes that lack one (Debian 12's
 * wine 8.0). Rust's standard library (1.78 and later) gets its random bytes
 * from ProcessPrng in this DLL on Windows, so without it every Rust test
 * program fails to start under that wine. We only need that one export; it
 * is served from bcrypt.dll's system RNG, which wine does provide.
 *
 * Build: x86_64-w64-mingw32-gcc -shared -O2 -o bcryptprimitives.dll \
 *          bcryptprimitives.c -lbcrypt
 */
#include <windows.h>
#include <bcrypt.h>

/* Fills data[0..len) with random bytes. Like the real function, it is meant
 * never to fail; FALSE is returned only if the system RNG does. */
__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
    /* BCryptGenRandom takes a ULONG count: feed it in pieces. */
    const SIZE_T piece = 1u << 30;
    while (len != 0) {
        ULONG n = (ULONG)(len < piece ? len : piece);
        if (!BCRYPT_SUCCESS(BCryptGenRandom(NULL, data, n, BCRYPT_USE_SYSTEM_PREFERRED_RNG)))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
