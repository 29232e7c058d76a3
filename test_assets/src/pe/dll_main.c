/* Main TU of hip_one.dll / hip_two.dll: the DLL entry point.  Freestanding
 * (/nodefaultlib, no CRT); it has no device code itself. */
#include "crt_init.h"

int __stdcall _DllMainCRTStartup(void *instance, unsigned reason, void *reserved) {
  (void)instance; (void)reserved;
  if (reason == 1 /* DLL_PROCESS_ATTACH */)
    run_ctors();
  return 1;
}
