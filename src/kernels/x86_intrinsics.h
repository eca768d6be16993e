// <immintrin.h> on x86-64 for the files with hand-written AVX-512 paths, together with
// the one warning it brings: GCC 12's AVX-512 reduction helpers (_mm512_reduce_*) start
// from a deliberately undefined vector, which its own flow analysis then reports; the
// values are never read. The pragmas hold for the rest of the including file.
#pragma once

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
