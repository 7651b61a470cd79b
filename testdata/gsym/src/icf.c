/* Fixture for MergedFunctionsInfo and CallSiteInfo: gold's identical code
   folding gives twin functions one address range; calls give call sites. */
#include <stdio.h>

__attribute__((noinline)) int twin_a(int v) { return v * 7 + 3; }
__attribute__((noinline)) int twin_b(int v) { return v * 7 + 3; }

__attribute__((noinline)) int caller(int v) {
  return twin_a(v) + twin_b(v + 1);
}

int main(int argc, char **argv) {
  (void)argv;
  printf("%d\n", caller(argc));
  return 0;
}
