// librdc.so (-fgpu-rdc), translation unit B: calls rdc_poly from unit A.
#include <hip/hip_runtime.h>

extern __device__ float rdc_poly(float x);

__global__ void rdc_clamped_poly(float* y, const float* x, float lo, float hi, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fminf(fmaxf(rdc_poly(x[i]), lo), hi);
}

extern "C" int rdc_clamped_launch(float* y, const float* x, float lo, float hi, int n) {
  hipLaunchKernelGGL(rdc_clamped_poly, dim3((n + 127) / 128), dim3(128), 0, 0, y, x, lo, hi, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
