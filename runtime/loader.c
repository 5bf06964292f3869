/*
 * loader.c -- opens the CUDA driver and NVRTC at run time (dlopen), so that
 * the library links against neither.  Each is loaded once per process
 * (pthread_once); a missing library or symbol is a status, never a crash.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Try each NUL-separated candidate name in turn. */
static void *find_sym(void *lib, const char *names) {
  for (const char *n = names; *n; n += strlen(n) + 1) {
    void *p = dlsym(lib, n);
    if (p)
      return p;
  }
  return NULL;
}

/* --------------------------------------------------------------- driver */

static sj_cuda_api g_cu;
static sj_status g_cu_status = SJ_ERR_NO_DRIVER;
static const char *g_cu_why = "not loaded";
static pthread_once_t g_cu_once = PTHREAD_ONCE_INIT;

#define CU_SYMBOLS(X)                                                          \
  X(Init, "cuInit\0", 1)                                                       \
  X(DriverGetVersion, "cuDriverGetVersion\0", 1)                               \
  X(DeviceGetCount, "cuDeviceGetCount\0", 1)                                   \
  X(DeviceGet, "cuDeviceGet\0", 1)                                             \
  X(DeviceGetName, "cuDeviceGetName\0", 1)                                     \
  X(DeviceGetAttribute, "cuDeviceGetAttribute\0", 1)                           \
  X(DeviceTotalMem, "cuDeviceTotalMem_v2\0", 1)                                \
  X(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain\0", 1)                   \
  X(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2\0", 1)              \
  X(CtxPushCurrent, "cuCtxPushCurrent_v2\0", 1)                                \
  X(CtxPopCurrent, "cuCtxPopCurrent_v2\0", 1)                                  \
  X(CtxSynchronize, "cuCtxSynchronize\0", 1)                                   \
  X(ModuleLoadDataEx, "cuModuleLoadDataEx\0", 1)                               \
  X(ModuleUnload, "cuModuleUnload\0", 1)                                       \
  X(ModuleGetFunction, "cuModuleGetFunction\0", 1)                             \
  X(FuncSetAttribute, "cuFuncSetAttribute\0", 1)                               \
  X(FuncGetAttribute, "cuFuncGetAttribute\0", 1)                               \
  X(LaunchKernel, "cuLaunchKernel\0", 1)                                       \
  X(MemAlloc, "cuMemAlloc_v2\0", 1)                                            \
  X(MemFree, "cuMemFree_v2\0", 1)                                              \
  X(MemcpyHtoD, "cuMemcpyHtoD_v2\0", 1)                                        \
  X(MemcpyDtoH, "cuMemcpyDtoH_v2\0", 1)                                        \
  X(MemsetD8, "cuMemsetD8_v2\0", 1)                                            \
  X(MemsetD32Async, "cuMemsetD32Async\0", 1)                                   \
  X(StreamCreate, "cuStreamCreate\0", 1)                                       \
  X(StreamDestroy, "cuStreamDestroy_v2\0", 1)                                  \
  X(StreamSynchronize, "cuStreamSynchronize\0", 1)                             \
  X(StreamIsCapturing, "cuStreamIsCapturing\0", 1)                             \
  X(EventCreate, "cuEventCreate\0", 1)                                         \
  X(EventDestroy, "cuEventDestroy_v2\0", 1)                                    \
  X(EventRecord, "cuEventRecord\0", 1)                                         \
  X(EventSynchronize, "cuEventSynchronize\0", 1)                               \
  X(EventElapsedTime, "cuEventElapsedTime_v2\0cuEventElapsedTime\0", 1)        \
  X(GetErrorString, "cuGetErrorString\0", 1)                                   \
  X(GetErrorName, "cuGetErrorName\0", 1)                                       \
  X(PointerGetAttribute, "cuPointerGetAttribute\0", 1)                         \
  X(TensorMapEncodeTiled, "cuTensorMapEncodeTiled\0", 0)                       \
  X(LaunchKernelEx, "cuLaunchKernelEx\0", 0)

static void cuda_load_once(void) {
  const char *override = getenv("SAGEJIT_CUDA_DRIVER");
  void *lib = NULL;
  if (override && *override)
    lib = dlopen(override, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    g_cu_why = "libcuda.so.1 not found (no NVIDIA driver on this machine)";
    return;
  }
#define LOAD_(field, names, required)                                          \
  *(void **)(&g_cu.field) = find_sym(lib, names);                              \
  if (!g_cu.field && (required)) {                                             \
    g_cu_why = "the CUDA driver lacks " #field " (driver too old)";            \
    return;                                                                    \
  }
  CU_SYMBOLS(LOAD_)
#undef LOAD_
  CUresult r = g_cu.Init(0);
  if (r == CUDA_ERROR_NO_DEVICE) {
    g_cu_status = SJ_ERR_NO_DEVICE;
    g_cu_why = "the CUDA driver reports no device";
    return;
  }
  if (r != CUDA_SUCCESS) {
    g_cu_why = "cuInit failed (driver not usable)";
    return;
  }
  g_cu_status = SJ_OK;
  g_cu_why = "";
}

sj_status sj_cuda_load(const sj_cuda_api **api, const char **why) {
  pthread_once(&g_cu_once, cuda_load_once);
  if (why)
    *why = g_cu_why;
  if (api)
    *api = g_cu_status == SJ_OK ? &g_cu : NULL;
  return g_cu_status;
}

const char *sj_cuda_error_text(CUresult r, char *buf, size_t size) {
  const char *name = NULL, *text = NULL;
  if (g_cu.GetErrorName)
    g_cu.GetErrorName(r, &name);
  if (g_cu.GetErrorString)
    g_cu.GetErrorString(r, &text);
  snprintf(buf, size, "%s (%d): %s", name ? name : "CUDA_ERROR", (int)r,
           text ? text : "unknown");
  return buf;
}

sj_status sj_driver_info(int *version, int *device_count) {
  const sj_cuda_api *cu;
  sj_status st = sj_cuda_load(&cu, NULL);
  if (st == SJ_ERR_NO_DEVICE) {
    /* The driver is there, only devices are missing. */
    if (version)
      *version = 0;
    if (device_count)
      *device_count = 0;
    if (g_cu.DriverGetVersion && version)
      g_cu.DriverGetVersion(version);
    return SJ_OK;
  }
  if (st != SJ_OK)
    return st;
  int v = 0, n = 0;
  if (cu->DriverGetVersion(&v) != CUDA_SUCCESS ||
      cu->DeviceGetCount(&n) != CUDA_SUCCESS)
    return SJ_ERR_CUDA;
  if (version)
    *version = v;
  if (device_count)
    *device_count = n;
  return SJ_OK;
}

/* ---------------------------------------------------------------- NVRTC */

static sj_nvrtc_api g_nv;
static sj_status g_nv_status = SJ_ERR_NO_NVRTC;
static const char *g_nv_why = "not loaded";
static char g_nv_path[4096];
static pthread_once_t g_nv_once = PTHREAD_ONCE_INIT;

#define NV_SYMBOLS(X)                                                          \
  X(Version, "nvrtcVersion\0")                                                 \
  X(GetNumSupportedArchs, "nvrtcGetNumSupportedArchs\0")                       \
  X(GetSupportedArchs, "nvrtcGetSupportedArchs\0")                             \
  X(CreateProgram, "nvrtcCreateProgram\0")                                     \
  X(DestroyProgram, "nvrtcDestroyProgram\0")                                   \
  X(CompileProgram, "nvrtcCompileProgram\0")                                   \
  X(GetProgramLogSize, "nvrtcGetProgramLogSize\0")                             \
  X(GetProgramLog, "nvrtcGetProgramLog\0")                                     \
  X(GetCUBINSize, "nvrtcGetCUBINSize\0")                                       \
  X(GetCUBIN, "nvrtcGetCUBIN\0")                                               \
  X(GetPTXSize, "nvrtcGetPTXSize\0")                                           \
  X(GetPTX, "nvrtcGetPTX\0")                                                   \
  X(AddNameExpression, "nvrtcAddNameExpression\0")                             \
  X(GetLoweredName, "nvrtcGetLoweredName\0")                                   \
  X(GetErrorString, "nvrtcGetErrorString\0")

static void *try_open(const char *path) {
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib)
    sj_strlcpy(g_nv_path, path, sizeof g_nv_path);
  return lib;
}

static void *open_nvrtc(void) {
  const char *env = getenv("SAGEJIT_NVRTC");
  if (env && *env)
    return try_open(env); /* an explicit choice is not second-guessed */
  static const char *names[] = {"libnvrtc.so.13", "libnvrtc.so.12",
                                "libnvrtc.so"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
    void *lib = try_open(names[i]);
    if (lib)
      return lib;
  }
  const char *roots[] = {getenv("CUDA_HOME"), getenv("CUDA_PATH"),
                         "/usr/local/cuda"};
  for (size_t r = 0; r < sizeof roots / sizeof *roots; r++) {
    if (!roots[r] || !*roots[r])
      continue;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
      char path[4096];
      snprintf(path, sizeof path, "%s/lib64/%s", roots[r], names[i]);
      void *lib = try_open(path);
      if (lib)
        return lib;
    }
  }
  return NULL;
}

static void nvrtc_load_once(void) {
  void *lib = open_nvrtc();
  if (!lib) {
    g_nv_why = "libnvrtc not found; install CUDA's NVRTC (libnvrtc.so.13 or "
               ".12, e.g. the cuda-nvrtc package or pip's nvidia-cuda-nvrtc) "
               "or set SAGEJIT_NVRTC to its path";
    return;
  }
#define LOAD_(field, names)                                                    \
  *(void **)(&g_nv.field) = find_sym(lib, names);                              \
  if (!g_nv.field) {                                                           \
    g_nv_why = "libnvrtc lacks nvrtc" #field " (NVRTC older than 12.0)";       \
    return;                                                                    \
  }
  NV_SYMBOLS(LOAD_)
#undef LOAD_
  if (g_nv.Version(&g_nv.major, &g_nv.minor) != 0) {
    g_nv_why = "nvrtcVersion failed";
    return;
  }
  int n = 0;
  if (g_nv.GetNumSupportedArchs(&n) != 0 || n <= 0 ||
      n > (int)(sizeof g_nv.supported / sizeof g_nv.supported[0]) ||
      g_nv.GetSupportedArchs(g_nv.supported) != 0) {
    g_nv_why = "nvrtcGetSupportedArchs failed";
    return;
  }
  g_nv.n_supported = n;
  g_nv.path = g_nv_path;
  g_nv_status = SJ_OK;
  g_nv_why = "";
}

sj_status sj_nvrtc_load(const sj_nvrtc_api **api, const char **why) {
  pthread_once(&g_nv_once, nvrtc_load_once);
  if (why)
    *why = g_nv_why;
  if (api)
    *api = g_nv_status == SJ_OK ? &g_nv : NULL;
  return g_nv_status;
}

sj_status sj_nvrtc_version(int *major, int *minor) {
  const sj_nvrtc_api *nv;
  sj_status st = sj_nvrtc_load(&nv, NULL);
  if (st != SJ_OK)
    return st;
  if (major)
    *major = nv->major;
  if (minor)
    *minor = nv->minor;
  return SJ_OK;
}
