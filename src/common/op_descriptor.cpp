// op_descriptor.cpp — names and text of collective descriptors (see op_descriptor.hpp).
#include "common/op_descriptor.hpp"

#include "common/error.hpp"

#include <cstdio>

namespace pstate {

uint32_t counts_hash(const size_t *counts, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, 64 bits, byte by byte
  auto eat = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b, v >>= 8) h = (h ^ (v & 0xffu)) * 0x100000001b3ULL;
  };
  eat(n);
  for (size_t i = 0; i < n; ++i) eat(counts[i]);
  const auto folded = static_cast<uint32_t>(h ^ (h >> 32));
  return folded != 0 ? folded : 1;
}

std::string counts_text(const size_t *counts, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n && i < 16; ++i) s += cat(i ? ", " : "", counts[i]);
  if (n > 16) s += cat(", ... (", n, " entries)");
  return s + "]";
}

std::string describe_op(const OpDescriptor &d, bool with_seq) {
  std::string s = op_kind_name(static_cast<OpKind>(d.op));
  if (with_seq) s += cat(" #", d.seq);
  const auto kind = static_cast<OpKind>(d.op);
  if (kind == OpKind::kBarrier || kind == OpKind::kFinalize || kind == OpKind::kDestroy) return s;
  if (kind == OpKind::kMemAlloc || kind == OpKind::kMemFree || kind == OpKind::kMemReserve)
    return d.count != 0 ? cat(s, " (", d.count, " bytes)") : s;  // the sizes travel in the call's data
  if (kind == OpKind::kRefused) return cat(s, " (", d.count, " bytes)");
  if (internal_kind(d.op)) return d.root >= 0 ? cat(s, " root ", d.root) : s;
  if (carries_counts_hash(d.op)) s += cat(" total ", d.count);
  else if (kind != OpKind::kBroadcastObject && kind != OpKind::kAllGatherObject && kind != OpKind::kAllToAllV)
    s += cat(" count ", d.count);  // all_to_all_v: its counts are compared by an exchange of their own
  if (d.dtype >= 0) s += cat(" ", pstate_dtype_name(static_cast<pstate_dtype_t>(d.dtype)));
  if (d.reduce_op >= 0) s += cat(" ", pstate_reduce_op_name(static_cast<pstate_reduce_op_t>(d.reduce_op)));
  if (d.root >= 0) s += cat(" root ", d.root);
  if (carries_counts_hash(d.op)) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", d.detail);
    s += cat(" counts ", hex);
  }
  return s;
}

}  // namespace pstate
