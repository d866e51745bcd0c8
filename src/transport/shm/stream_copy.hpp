// stream_copy.hpp — memcpy with non-temporal stores, for results too large to stay in cache.
//
// When a collective's output is many times the cache, writing it with ordinary stores costs a
// read of every destination line first (read-for-ownership) and evicts the staging areas the
// next steps need. Non-temporal stores skip both. The copy ends with a store fence, because
// non-temporal stores are not ordered by later ordinary (release) stores.
#pragma once

#include <cstddef>

namespace pstate::shm {

void copy_streaming(void *dst, const void *src, size_t bytes);

}  // namespace pstate::shm
