// devsim_driver.cpp — libcuda.so.1 of the devsim stand-ins: the few CUDA driver entries a
// process may look up in an already loaded driver (pstate's CPU contexts call
// cuPointerGetAttribute to refuse device memory). The runtime stand-in loads this file on start,
// as the real runtime loads the driver; the answers come from the runtime stand-in's registry.
#include "devsim.h"

#include <cuda.h>

#include <cstring>

#define DEVSIM_API extern "C" __attribute__((visibility("default")))

DEVSIM_API CUresult cuInit(unsigned int) {
  return CUDA_SUCCESS;
}

DEVSIM_API CUresult cuDriverGetVersion(int *v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}

DEVSIM_API CUresult cuGetErrorString(CUresult e, const char **text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *text = e == CUDA_SUCCESS ? "no error" : e == CUDA_ERROR_INVALID_VALUE ? "invalid argument" : "unknown error";
  return CUDA_SUCCESS;
}

// Memory the runtime did not allocate is unknown to the driver: CUDA_ERROR_INVALID_VALUE.
DEVSIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int kind = 0, device = -1;
  uintptr_t base = 0;
  size_t size = 0;
  devsim_pointer_info(reinterpret_cast<const void *>(static_cast<uintptr_t>(ptr)), &kind, &device, &base, &size);
  if (kind == 0) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: {
      unsigned int type = kind == 1 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;  // managed reads as device
      std::memcpy(data, &type, sizeof type);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: {
      unsigned int managed = kind == 3 ? 1 : 0;
      std::memcpy(data, &managed, sizeof managed);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      int ordinal = kind == 1 ? 0 : device;
      std::memcpy(data, &ordinal, sizeof ordinal);
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}
