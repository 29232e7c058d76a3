// librelr.so (linked with -z pack-relative-relocs), translation unit A:
// strided copy with a bit-reversal permutation.
#include <hip/hip_runtime.h>

__global__ void relr_bitrev_copy(unsigned* dst, const unsigned* src, int log2n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned n = 1u << log2n;
  if (i < n) dst[__brev(i) >> (32 - log2n)] = src[i];
}

extern "C" int relr_bitrev(unsigned* dst, const unsigned* src, int log2n) {
  int n = 1 << log2n;
  hipLaunchKernelGGL(relr_bitrev_copy, dim3((n + 255) / 256), dim3(256), 0, 0, dst, src, log2n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
