/* One HIP translation unit's host-side fat-binary glue, written out in plain
 * C the way clang emits it for x86_64-pc-windows-msvc (hipcc on Windows).
 *
 * ../../build_pe.sh compiles this once per bundle with
 *   -DTU=<n>              suffix of the exported getter (unique per module)
 *   -DBLOB_INC="<file>"   the bundle bytes as a comma-separated list,
 *                         cut from a committed Linux fat binary
 *   -DHIP_TU_EXPORT=      (EXE only) do not export the getter
 *
 * As in clang's output:
 *  - the bundle is a 4096-aligned constant in `.hip_fat` (read-only data)
 *    followed by one NUL byte (FORMATS.md §1.4); the linker concatenates the
 *    TUs' blobs in link order;
 *  - the 24-byte wrapper { HIPF, 1, &blob, 0 } is in `.hipFatB` (read/write
 *    data); its pointer is an absolute address, so the linker emits an
 *    IMAGE_REL_BASED_DIR64 base relocation for it;
 *  - a module constructor, listed in `.CRT$XCU`, passes the wrapper to
 *    amdhip64.dll's __hipRegisterFatBinary.
 * The device code is real; the host code is a stub (no kernels are
 * registered and nothing is launched). */

#pragma section(".hip_fat", read)
#pragma section(".hipFatB", read, write)
#pragma section(".CRT$XCU", read)

#ifndef HIP_TU_EXPORT
#define HIP_TU_EXPORT __declspec(dllexport)
#endif
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

struct hip_fatbin_wrapper {
  unsigned magic;        /* 0x48495046, bytes "FPIH" */
  unsigned version;      /* 1 */
  const void *binary;    /* -> this TU's bundle in .hip_fat */
  void *reserved1;       /* 0 */
};

/* The HIP runtime (amdhip64.dll); imported through an import library made
 * from amdhip64.def. */
__declspec(dllimport) void **__hipRegisterFatBinary(const void *wrapper);

__declspec(allocate(".hip_fat")) __declspec(align(4096))
static const unsigned char __hip_fatbin[] = {
#include BLOB_INC
  0 /* trailing NUL, as clang emits the blob */
};

__declspec(allocate(".hipFatB")) __declspec(align(8))
static struct hip_fatbin_wrapper __hip_fatbin_wrapper = {
  0x48495046u, 1, __hip_fatbin, 0
};

static void **__hip_gpubin_handle;

static void __cdecl __hip_module_ctor(void) {
  __hip_gpubin_handle = __hipRegisterFatBinary(&__hip_fatbin_wrapper);
}

__declspec(allocate(".CRT$XCU")) __attribute__((used))
static void(__cdecl *const __hip_module_ctor_ptr)(void) = __hip_module_ctor;

/* Keeps the wrapper reachable from outside (and is handy for tests). */
HIP_TU_EXPORT const void *CAT(hip_fatbin_binary_, TU)(void) {
  return __hip_fatbin_wrapper.binary;
}
