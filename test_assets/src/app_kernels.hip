// app_pie / app_nopie: device code plus a host-side launch helper.
#include <hip/hip_runtime.h>

__global__ void app_iota_square(unsigned* out, unsigned start, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    unsigned v = start + (unsigned)i;
    out[i] = v * v;
  }
}

extern "C" int app_run(int n) {
  unsigned* d = nullptr;
  if (hipMalloc(&d, sizeof(unsigned) * (size_t)n) != hipSuccess) return -1;
  hipLaunchKernelGGL(app_iota_square, dim3((n + 63) / 64), dim3(64), 0, 0,
                     d, 7u, n);
  hipError_t e = hipDeviceSynchronize();
  hipFree(d);
  return e == hipSuccess ? 0 : -1;
}
