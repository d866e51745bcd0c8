// build_info.cpp — fills BuildInfo from compile-time macros (see build_info.hpp).
#include "common/build_info.hpp"

#include <pstate/pstate.h>
#include <uct/api/version.h>

#include <string>

#ifndef PSTATE_BUILD_TYPE
#define PSTATE_BUILD_TYPE "unknown"
#endif

namespace pstate {

namespace {

std::string compiler_text() {
#if defined(__clang__)
  return std::string("clang++ ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("g++ ") + __VERSION__;
#else
  return "unknown compiler";
#endif
}

std::string sanitizers_text() {
  std::string s;
#if defined(__SANITIZE_ADDRESS__)
  s += "address ";
#endif
#if defined(__SANITIZE_THREAD__)
  s += "thread ";
#endif
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
  s += "address ";
#endif
#if __has_feature(thread_sanitizer)
  s += "thread ";
#endif
#endif
  if (s.empty()) return "none";
  s.pop_back();
  return s;
}

}  // namespace

BuildInfo build_info() {
  BuildInfo b;
  b.version = std::to_string(PSTATE_VERSION_MAJOR) + "." + std::to_string(PSTATE_VERSION_MINOR) + "." +
              std::to_string(PSTATE_VERSION_PATCH);
  b.abi_major = PSTATE_ABI_MAJOR;
  b.build_type = PSTATE_BUILD_TYPE;
  b.compiler = compiler_text();
#ifdef NDEBUG
  b.options = "assertions off";
#else
  b.options = "assertions on";
#endif
  b.options += ", sanitizers " + sanitizers_text();
#ifdef PSTATE_HAVE_CUDA
  b.cuda_backend = true;
#else
  b.cuda_backend = false;
#endif
  b.ucx_headers = UCT_VERNO_STRING;
  return b;
}

}  // namespace pstate
