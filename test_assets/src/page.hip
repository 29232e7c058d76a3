// libpage.so (-fgpu-rdc, one TU): sized so that .hip_fatbin ends exactly on
// a 4096-byte page boundary.  An RDC fat binary has no trailing NUL after the
// bundle, so the section ends where the last code object (gfx90a:xnack-)
// ends.  PAGE_BLOB_SIZE moves the code object size in 0x100 steps and the
// kernel name length in 8-byte steps (symbol string table); both were tuned
// for hipcc/clang 15.0.6 (Debian 12).  build.sh warns if the section no
// longer ends on a page with another toolchain.
#include <hip/hip_runtime.h>

#define PAGE_BLOB_SIZE 2552
__device__ const unsigned char page_blob[PAGE_BLOB_SIZE] = {0x6b, 0x70, 0x61, 0x63, 0x6b};

__global__ void
page_gather_kernel_with_a_long_name_that_pads_the_code_object_symbol_tables_so_the_fatbin_ends_on_a_memory_page(
    unsigned char* out, const int* idx, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = page_blob[idx[i] % PAGE_BLOB_SIZE];
}

extern "C" int page_launch(unsigned char* out, const int* idx, int n) {
  hipLaunchKernelGGL(
      page_gather_kernel_with_a_long_name_that_pads_the_code_object_symbol_tables_so_the_fatbin_ends_on_a_memory_page,
      dim3((n + 255) / 256), dim3(256), 0, 0, out, idx, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
