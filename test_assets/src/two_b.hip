// libtwo.so, translation unit B: block-wide sum reduction in shared memory.
#include <hip/hip_runtime.h>

__global__ void two_block_sum(double* partial, const double* x, int n) {
  __shared__ double tile[256];
  int t = threadIdx.x;
  int i = blockIdx.x * blockDim.x + t;
  tile[t] = (i < n) ? x[i] : 0.0;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) tile[t] += tile[t + s];
    __syncthreads();
  }
  if (t == 0) partial[blockIdx.x] = tile[0];
}

extern "C" int two_sum(double* partial, const double* x, int n) {
  hipLaunchKernelGGL(two_block_sum, dim3((n + 255) / 256), dim3(256), 0, 0,
                     partial, x, n);
  return hipGetLastError() == hipSuccess ? 0 : -1;
}
