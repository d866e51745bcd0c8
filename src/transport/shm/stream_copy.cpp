// stream_copy.cpp — non-temporal copy (baseline SSE2, so no run-time dispatch is needed): align
// the destination to 16 bytes with memcpy, stream 64 bytes per iteration, memcpy the tail.
#include "transport/shm/stream_copy.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace pstate::shm {

void copy_streaming(void *dst, const void *src, size_t bytes) {
#if defined(__x86_64__)
  auto *d = static_cast<uint8_t *>(dst);
  auto *s = static_cast<const uint8_t *>(src);
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (bytes < head + 64) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  for (; bytes >= 64; bytes -= 64, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 16));
    __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 32));
    __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + 48));
    _mm_stream_si128(reinterpret_cast<__m128i *>(d), a);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i *>(d + 48), e);
  }
  std::memcpy(d, s, bytes);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace pstate::shm
