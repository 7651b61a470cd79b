/* C fixture: several levels of inlining at -O2, across files. */
#include <stdio.h>
#include <stdlib.h>
#include "inl.h"

__attribute__((noinline)) unsigned leaf(unsigned v) {
  return v ^ 0x55u;
}

static inline unsigned add(unsigned a, unsigned b) {
  return leaf(a) + leaf(b);
}

static inline unsigned twice(unsigned v) {
  return add(v, v + 1);
}

__attribute__((noinline)) unsigned foo(unsigned x) {
  unsigned y = twice(x);
  return y * 3;
}

__attribute__((noinline)) unsigned hash(const char *s) {
  unsigned h = 2166136261u;
  while (*s) {
    h = mix2(h, (unsigned char)s[0], s[1] ? (unsigned char)s[1] : 0u);
    s += s[1] ? 2 : 1;
  }
  return h;
}

static unsigned table[64];

__attribute__((noinline)) void fill(unsigned seed) {
  for (int i = 0; i < 64; i++)
    table[i] = twice(seed + i) ^ mix(seed, i);
}

int main(int argc, char **argv) {
  fill(argc);
  unsigned r = foo(argc) + hash(argc > 1 ? argv[1] : "sprof");
  for (int i = 0; i < 64; i++)
    r += table[i];
  printf("%u\n", r);
  return 0;
}
