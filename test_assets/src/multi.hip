// libmulti.so: one translation unit, built for four target IDs
// (gfx90a:xnack-, gfx90a:xnack+, gfx1030, gfx906).
#include <hip/hip_runtime.h>

__global__ void multi_scale_bias(float* out, const float* in, float scale,
                                 float bias, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * scale + bias;
}

extern "C" int multi_launch(float* out, const float* in, float scale,
                            float bias, int n) {
  hipLaunchKernelGGL(multi_scale_bias, dim3((n + 255) / 256), dim3(256), 0, 0,
                     out, in, scale, bias, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
