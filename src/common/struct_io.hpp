// struct_io.hpp — the one place that reads and writes the caller's extensible structs (pstate.h,
// "Conventions": Structs, Struct arrays), so that every struct of the ABI can grow in 1.x.
//
// The rule is the Linux kernel's for extensible syscall structs (copy_struct_from_user: openat2,
// clone3): the caller says how big its struct is; pstate copies min(struct_size, sizeof) bytes
// into a zero-initialized struct of its own, so a field an older caller lacks reads as zero (and
// zero means the older behaviour), and a newer caller's bytes past what this library knows must
// be zero, since a nonzero one is a request this library cannot honour. Arrays of structs are
// walked by their elements' struct_size (one per array), so a newer caller's larger elements are
// found where they are. Used by src/api for every struct and by the tensor-dict protocol, which
// reads the sender's dict inside its refusal path (src/group/tensor_dict*.cpp); that is why it
// lives in common/ and not in api/.
//
// Each struct's oldest accepted size is the end of its last 1.0 field, computed here once: it
// never changes when fields are appended.
#pragma once

#include "common/error.hpp"

#include <pstate/pstate.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <vector>

namespace pstate {

template <typename T>
struct StructTraits;

#define PSTATE_STRUCT_TRAITS(T, last_1_0_field, init_macro)                                               \
  template <>                                                                                              \
  struct StructTraits<T> {                                                                                 \
    static constexpr const char *kName = #T;                                                               \
    static constexpr const char *kInit = #init_macro;                                                      \
    static constexpr size_t kOldestSize = offsetof(T, last_1_0_field) + sizeof(static_cast<T *>(nullptr)->last_1_0_field); \
  }

PSTATE_STRUCT_TRAITS(pstate_init_params_t, socket_ifname, PSTATE_INIT_PARAMS_INIT);
PSTATE_STRUCT_TRAITS(pstate_parallel_config_t, shared_experts_tensor_parallel_size, PSTATE_PARALLEL_CONFIG_INIT);
PSTATE_STRUCT_TRAITS(pstate_group_info_t, name, PSTATE_GROUP_INFO_INIT);
PSTATE_STRUCT_TRAITS(pstate_p2p_op_t, peer, PSTATE_P2P_OP_INIT);
PSTATE_STRUCT_TRAITS(pstate_tensor_t, device, PSTATE_TENSOR_INIT);
PSTATE_STRUCT_TRAITS(pstate_mem_info_t, reserved0, PSTATE_MEM_INFO_INIT);
PSTATE_STRUCT_TRAITS(pstate_mem_stats_t, reserved0, PSTATE_MEM_STATS_INIT);
#undef PSTATE_STRUCT_TRAITS

// A struct_size past this is no struct of pstate.h (an uninitialized field, more likely): refused
// before reading that far (the kernel's bound is a page too).
inline constexpr size_t kMaxStructSize = 4096;

// struct_size `got` (of a struct named `what` in messages: "params", "ops[3]") must be at least
// T's 1.0 size and no larger than kMaxStructSize.
template <typename T>
void check_struct_bounds(size_t got, const char *what) {
  using Tr = StructTraits<T>;
  if (got < Tr::kOldestSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ".struct_size is ", got, ", smaller than any ", Tr::kName,
                " (at least ", Tr::kOldestSize, " bytes; this library's is ", sizeof(T), "): initialize it with ",
                Tr::kInit);
  if (got > kMaxStructSize)
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ".struct_size is ", got, ", no ", Tr::kName,
                " is that large (this library's is ", sizeof(T), " bytes): initialize it with ", Tr::kInit);
}

// The bounds, and for an input struct larger than this library's: every byte past sizeof(T) is zero.
template <typename T>
void check_struct_size(const void *in, size_t got, const char *what) {
  check_struct_bounds<T>(got, what);
  const auto *bytes = static_cast<const unsigned char *>(in);
  for (size_t i = sizeof(T); i < got; ++i)
    if (bytes[i] != 0)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " (", StructTraits<T>::kName, ") has struct_size ", got,
                  " and a nonzero byte at offset ", i, ", past the ", sizeof(T),
                  " bytes this library knows: the caller was built against a newer pstate.h and sets a field this "
                  "library does not have; load a newer libpstate, or leave the newer fields at their defaults");
}

// The caller's struct as this library knows it: its first min(struct_size, sizeof(T)) bytes over
// zeros, struct_size set to sizeof(T) (the internals may treat it as a whole struct).
template <typename T>
T read_struct(const T *in, const char *what) {
  size_t got = 0;
  std::memcpy(&got, in, sizeof got);  // struct_size, the first member of every struct
  check_struct_size<T>(in, got, what);
  T local{};
  std::memcpy(static_cast<void *>(&local), in, std::min(got, sizeof(T)));
  local.struct_size = sizeof(T);
  return local;
}

// An out struct: checks struct_size as read_struct does (the tail is not checked: it is the
// caller's to keep) and writes only the first min(struct_size, sizeof(T)) bytes of `value`; the
// caller's struct_size stays as it was.
template <typename T>
void write_struct(T *out, const T &value, const char *what) {
  size_t got = 0;
  std::memcpy(&got, out, sizeof got);
  check_struct_bounds<T>(got, what);
  T copy = value;
  copy.struct_size = got;
  std::memcpy(static_cast<void *>(out), &copy, std::min(got, sizeof(T)));
}

// An array of n structs at `base`, walked by base[0].struct_size (pstate.h, "Struct arrays"):
// every element must carry that same struct_size (INVALID_ARGUMENT naming the first that does
// not) and pass check_struct_size. `what` names the array ("ops", "tensors").
template <typename T>
std::vector<T> read_struct_array(const T *base, size_t n, const char *what) {
  std::vector<T> out;
  if (n == 0) return out;
  if (base == nullptr) throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, " is NULL with ", n, " elements");
  const auto *bytes = reinterpret_cast<const unsigned char *>(base);
  size_t stride = 0;
  std::memcpy(&stride, bytes, sizeof stride);
  check_struct_size<T>(bytes, stride, cat(what, "[0]").c_str());
  size_t span = 0;
  if (__builtin_mul_overflow(n, stride, &span))
    throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, ": ", n, " elements of struct_size ", stride,
                " overflow the address space: is the count right?");
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char *at = bytes + i * stride;
    size_t got = 0;
    std::memcpy(&got, at, sizeof got);
    if (got != stride)
      throw_error(PSTATE_ERR_INVALID_ARGUMENT, what, "[", i, "].struct_size is ", got, " but ", what,
                  "[0].struct_size is ", stride, ": every element of one array carries the same struct_size, which "
                  "is the array's stride; initialize every element with ", StructTraits<T>::kInit);
    if (i > 0) check_struct_size<T>(at, got, cat(what, "[", i, "]").c_str());
    std::memcpy(static_cast<void *>(&out[i]), at, std::min(got, sizeof(T)));
    out[i].struct_size = sizeof(T);
  }
  return out;
}

}  // namespace pstate
