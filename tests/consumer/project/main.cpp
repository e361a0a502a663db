// A program outside the specdec tree, built against the installed package.
#include <cstdio>
#include <cstring>

#include <specdec/version.hpp>

int main() {
  if (std::strcmp(specdec::version_string(), SPECDEC_VERSION_STRING) != 0) {
    std::printf("header/library version mismatch\n");
    return 1;
  }
  std::printf("consumer linked specdec %s\n", specdec::version_string());
  return 0;
}
