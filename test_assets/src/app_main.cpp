// app_pie / app_nopie: plain host entry point (no device code in this TU).
#include <cstdio>

extern "C" int app_run(int n);

int main() {
  int rc = app_run(1024);
  std::printf("app_run: %s\n", rc == 0 ? "ok" : "failed");
  return rc == 0 ? 0 : 1;
}
