// What the CPU we run on can do, read once at start. Kernels pick their fast path from
// this, never from compile-time flags, so one binary runs on every x86-64 (and ARM).
// ERNIE_ISA=generic|avx2|avx512 caps the choice (tests use it to check every path).
#pragma once

namespace ernie {

enum class IsaLevel { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

struct CpuFeatures {
  bool avx2 = false;      // with FMA and F16C
  bool avx512 = false;    // F, BW, DQ, VL
  bool avx512_bf16 = false;
  bool avx512_vnni = false;
  IsaLevel best = IsaLevel::kGeneric;
};

const CpuFeatures& cpu_features();
const char* isa_level_name(IsaLevel level);
// The level kernels use: the best the CPU has, capped by ERNIE_ISA.
IsaLevel active_isa_level();

}  // namespace ernie
