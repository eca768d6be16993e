// Run-time ISA selection for hot loops. On x86-64 the compiler emits one copy of the
// function per listed ISA and the dynamic loader binds the best one the CPU supports;
// the binary itself needs nothing beyond baseline x86-64. Elsewhere (ARM) it is a no-op
// until NEON/SVE paths exist.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ERNIE_CLONE_FOR_ISAS __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define ERNIE_CLONE_FOR_ISAS
#endif
