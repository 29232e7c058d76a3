// librdc.so (-fgpu-rdc), translation unit A: a device function and a kernel.
// rdc_poly is called from translation unit B, which needs device linking.
#include <hip/hip_runtime.h>

__device__ float rdc_poly(float x) { return ((0.5f * x + 1.25f) * x - 3.0f) * x + 0.125f; }

__global__ void rdc_apply_poly(float* y, const float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = rdc_poly(x[i]);
}

extern "C" int rdc_poly_launch(float* y, const float* x, int n) {
  hipLaunchKernelGGL(rdc_apply_poly, dim3((n + 255) / 256), dim3(256), 0, 0, y, x, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
