/* Fixture whose DWARF lives in a separate debug file (.gnu_debuglink and
   build ID). */
#include <stdio.h>

static inline int square(int v) { return v * v; }

__attribute__((noinline)) int sumsq(int n) {
  int s = 0;
  for (int i = 0; i < n; i++)
    s += square(i);
  return s;
}

int main(int argc, char **argv) {
  (void)argv;
  printf("%d\n", sumsq(argc * 10));
  return 0;
}
