#include "kernels/cpu_features.h"

#include <cstdlib>
#include <string>

#include "util/error.h"

namespace ernie {

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    f.avx512_vnni = f.avx512 && __builtin_cpu_supports("avx512vnni");
#if defined(__clang__) || __GNUC__ >= 12
    f.avx512_bf16 = f.avx512 && __builtin_cpu_supports("avx512bf16");
#endif
    f.best = f.avx512 ? IsaLevel::kAvx512 : f.avx2 ? IsaLevel::kAvx2 : IsaLevel::kGeneric;
#endif
    return f;
  }();
  return features;
}

const char* isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kGeneric: return "generic";
    case IsaLevel::kAvx2: return "avx2";
    case IsaLevel::kAvx512: return "avx512";
  }
  return "?";
}

IsaLevel active_isa_level() {
  static const IsaLevel level = [] {
    IsaLevel best = cpu_features().best;
    const char* requested = std::getenv("ERNIE_ISA");
    if (requested == nullptr || *requested == '\0') return best;
    const std::string name = requested;
    IsaLevel cap;
    if (name == "generic") cap = IsaLevel::kGeneric;
    else if (name == "avx2") cap = IsaLevel::kAvx2;
    else if (name == "avx512") cap = IsaLevel::kAvx512;
    else fail("ERNIE_ISA must be generic, avx2 or avx512, got \"", name, "\"");
    return static_cast<int>(cap) < static_cast<int>(best) ? cap : best;
  }();
  return level;
}

}  // namespace ernie
