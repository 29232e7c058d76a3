// libhost.so: host-only C++ library (no device code, no .hip_fatbin).
#include <string>

namespace demo_host {
std::string greeting(const std::string& who) { return "hello, " + who; }
}  // namespace demo_host

extern "C" unsigned demo_host_checksum(const unsigned char* p, unsigned long n) {
  unsigned h = 2166136261u;  // FNV-1a
  for (unsigned long i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
  return h;
}
