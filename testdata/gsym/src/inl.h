/* Header-defined inline helpers so inlined frames come from another file. */
static inline unsigned mix(unsigned h, unsigned v) {
  h ^= v;
  h *= 0x01000193u;
  return h;
}

static inline unsigned mix2(unsigned h, unsigned a, unsigned b) {
  return mix(mix(h, a), b);
}
