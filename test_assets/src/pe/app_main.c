/* Main TU of hip_app.exe: a console entry point.  Freestanding
 * (/nodefaultlib, no CRT); like app_main.cpp of the Linux app it has no
 * device code itself. */
#include "crt_init.h"

int mainCRTStartup(void) {
  run_ctors();
  return 0;
}
