// libtwo.so, translation unit A: element-wise vector addition.
#include <hip/hip_runtime.h>

__global__ void two_vec_add(int* c, const int* a, const int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" int two_add(int* c, const int* a, const int* b, int n) {
  hipLaunchKernelGGL(two_vec_add, dim3((n + 127) / 128), dim3(128), 0, 0,
                     c, a, b, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
