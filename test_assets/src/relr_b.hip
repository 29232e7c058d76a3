// librelr.so (linked with -z pack-relative-relocs), translation unit B:
// 3-point stencil over a 1-D grid.
#include <hip/hip_runtime.h>

__global__ void relr_stencil3(float* out, const float* in, float w0, float w1, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) out[i] = w1 * in[i - 1] + w0 * in[i] + w1 * in[i + 1];
}

extern "C" int relr_stencil(float* out, const float* in, float w0, float w1, int n) {
  hipLaunchKernelGGL(relr_stencil3, dim3((n + 255) / 256), dim3(256), 0, 0, out, in, w0, w1, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
