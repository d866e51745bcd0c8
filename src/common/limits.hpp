// limits.hpp — bounds every layer applies the same way.
#pragma once

#include <cstddef>

namespace pstate {

// The largest buffer one operation accepts: 2^47 bytes (128 TiB), the user address space of
// x86-64 and AArch64 with 4-level page tables. A larger count is a caller's bug (a negative
// length cast to size_t, a count in bytes times the element size) that would otherwise crash in
// a transport or ask for a scratch buffer of that size. Tensor-dict tensors are held to it too.
inline constexpr size_t kMaxBufferBytes = size_t{1} << 47;

}  // namespace pstate
