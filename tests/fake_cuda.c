/*
 * fake_cuda.c -- a stand-in libcuda for CPU tests of the host path
 * (tests/test_host_path.c), loaded through SAGEJIT_CUDA_DRIVER.
 *
 * One device whose compute capability comes from FAKE_CUDA_CC ("9.0" by
 * default).  "Device" memory is host memory; launches only count; a
 * module load checks that the image is an ELF cubin or PTX text and
 * records which thread loaded it (and sleeps FAKE_CUDA_LOAD_MS, default
 * 20, so that loads on several threads overlap).  FAKE_CUDA_REJECT=SUBSTRING
 * makes cuModuleGetFunction refuse every kernel whose lowered name
 * contains it (CUDA_ERROR_NOT_FOUND, a driver reject).  With it the CLI
 * runs on a CPU machine too: SAGEJIT_CUDA_DRIVER=.../libsj_fake_cuda.so
 * sagejit bench --first-call times the host side of a first call.  The test reads the counters
 * through fake_cuda_counters().  FAKE_CUDA_L2 (bytes) is the L2 size the
 * device reports (unset: the attribute reads 0, as from a driver that does
 * not say); fake_cuda_last_grid() gives the grid of the latest launch and
 * fake_cuda_grid(i) that of launch i since the last reset (the first 64);
 * fake_cuda_memsets() counts cuMemsetD32Async calls since the last reset
 * and gives the latest one's size in words.  FAKE_CUDA_CAPTURING=1: every
 * stream reports an active graph capture.  Events are real allocations
 * (a leak or a double destroy shows under the sanitizers); an event records
 * the launch count, and the time between two events is the number of
 * launches between them, in "milliseconds"; fake_cuda_events() gives the
 * events alive and the cuEventSynchronize calls since the last reset.
 * fake_cuda_capture(i, bytes) asks for a copy of the first `bytes` of
 * launch i's argument struct (kernelParams[0]; i < 4 since the last reset,
 * bytes <= 512: the test knows which kernel launch i is and its struct's
 * size); fake_cuda_captured(i, out, bytes) hands it back (0, or -1 when
 * that launch did not happen).
 */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FAKE_MAX_THREADS 64

void fake_cuda_counters(int *threads, int *loads, int *launches, int *max_live);
void fake_cuda_reset(void);
void fake_cuda_last_grid(unsigned *gx, unsigned *gy, unsigned *gz);
int fake_cuda_grid(int i, unsigned *gx, unsigned *gy, unsigned *gz);
void fake_cuda_memsets(int *n, size_t *last_words);
void fake_cuda_events(int *live, int *syncs);
void fake_cuda_capture(int i, size_t bytes);
int fake_cuda_captured(int i, void *out, size_t bytes);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_t g_loaders[FAKE_MAX_THREADS];
static int g_n_loaders, g_loads, g_launches, g_live_loads, g_max_live_loads;
static int g_ctx_token, g_stream_token;
static unsigned g_grid[3];
#define FAKE_MAX_GRIDS 64
static unsigned g_grids[FAKE_MAX_GRIDS][3];
static int g_memsets;
static size_t g_memset_words;
static int g_events_live, g_event_syncs;
#define FAKE_MAX_CAPTURE 4
#define FAKE_CAPTURE_BYTES 512
static size_t g_cap_want[FAKE_MAX_CAPTURE];
static int g_cap_have[FAKE_MAX_CAPTURE];
static unsigned char g_cap[FAKE_MAX_CAPTURE][FAKE_CAPTURE_BYTES];
typedef struct fake_event {
  int stamp; /* g_launches when last recorded */
} fake_event;

/* Distinct threads that loaded a module, modules loaded, launches, and the
 * most module loads that were in flight at once. */
void fake_cuda_counters(int *threads, int *loads, int *launches, int *max_live) {
  pthread_mutex_lock(&g_lock);
  *threads = g_n_loaders;
  *loads = g_loads;
  *launches = g_launches;
  *max_live = g_max_live_loads;
  pthread_mutex_unlock(&g_lock);
}
void fake_cuda_last_grid(unsigned *gx, unsigned *gy, unsigned *gz) {
  pthread_mutex_lock(&g_lock);
  *gx = g_grid[0];
  *gy = g_grid[1];
  *gz = g_grid[2];
  pthread_mutex_unlock(&g_lock);
}
/* 0 and the grid of launch i since the last reset, or -1 */
int fake_cuda_grid(int i, unsigned *gx, unsigned *gy, unsigned *gz) {
  pthread_mutex_lock(&g_lock);
  const int ok = i >= 0 && i < g_launches && i < FAKE_MAX_GRIDS;
  if (ok) {
    *gx = g_grids[i][0];
    *gy = g_grids[i][1];
    *gz = g_grids[i][2];
  }
  pthread_mutex_unlock(&g_lock);
  return ok ? 0 : -1;
}
void fake_cuda_memsets(int *n, size_t *last_words) {
  pthread_mutex_lock(&g_lock);
  *n = g_memsets;
  *last_words = g_memset_words;
  pthread_mutex_unlock(&g_lock);
}
void fake_cuda_events(int *live, int *syncs) {
  pthread_mutex_lock(&g_lock);
  *live = g_events_live;
  *syncs = g_event_syncs;
  pthread_mutex_unlock(&g_lock);
}
void fake_cuda_capture(int i, size_t bytes) {
  pthread_mutex_lock(&g_lock);
  if (i >= 0 && i < FAKE_MAX_CAPTURE && bytes <= FAKE_CAPTURE_BYTES)
    g_cap_want[i] = bytes;
  pthread_mutex_unlock(&g_lock);
}
int fake_cuda_captured(int i, void *out, size_t bytes) {
  int ok = -1;
  pthread_mutex_lock(&g_lock);
  if (i >= 0 && i < FAKE_MAX_CAPTURE && g_cap_have[i] && bytes <= g_cap_want[i]) {
    memcpy(out, g_cap[i], bytes);
    ok = 0;
  }
  pthread_mutex_unlock(&g_lock);
  return ok;
}
void fake_cuda_reset(void) {
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < FAKE_MAX_CAPTURE; i++) {
    g_cap_want[i] = 0;
    g_cap_have[i] = 0;
  }
  g_n_loaders = g_loads = g_launches = g_max_live_loads = 0;
  g_event_syncs = 0;
  g_memsets = 0;
  g_memset_words = 0;
  pthread_mutex_unlock(&g_lock);
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal != 0)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
  (void)d;
  strncpy(name, "Fake GPU", (size_t)len);
  name[len - 1] = 0;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  const char *cc = getenv("FAKE_CUDA_CC");
  int major = 9, minor = 0;
  if (cc && cc[0] >= '0' && cc[0] <= '9') {
    major = atoi(cc);
    const char *dot = strchr(cc, '.');
    minor = dot ? atoi(dot + 1) : 0;
  }
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *v = major;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *v = minor;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *v = 132;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *v = 232448;
    break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: {
    const char *l2 = getenv("FAKE_CUDA_L2");
    *v = l2 ? atoi(l2) : 0;
    break;
  }
  default:
    *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice d) {
  (void)d;
  *bytes = (size_t)80 << 30;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  (void)d;
  *c = (CUcontext)&g_ctx_token;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
  (void)d;
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent_v2(CUcontext c) {
  (void)c;
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c) {
  if (c)
    *c = (CUcontext)&g_ctx_token;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize(void) { return CUDA_SUCCESS; }

/* A module is a small heap block, freed by cuModuleUnload. */
typedef struct {
  int magic;
} fake_module;

CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned n,
                            CUjit_option *o, void **ov) {
  (void)n, (void)o, (void)ov;
  const char *p = image;
  const int elf = !memcmp(p, "\x7f" "ELF", 4);
  const int ptx = !strncmp(p, "//", 2) || !strncmp(p, ".version", 8);
  if (!elf && !ptx)
    return CUDA_ERROR_INVALID_IMAGE;
  pthread_mutex_lock(&g_lock);
  g_loads++;
  if (++g_live_loads > g_max_live_loads)
    g_max_live_loads = g_live_loads;
  int seen = 0;
  for (int i = 0; i < g_n_loaders; i++)
    seen |= pthread_equal(g_loaders[i], pthread_self());
  if (!seen && g_n_loaders < FAKE_MAX_THREADS)
    g_loaders[g_n_loaders++] = pthread_self();
  pthread_mutex_unlock(&g_lock);
  /* long enough that loads on several threads overlap (FAKE_CUDA_LOAD_MS,
   * default 20; a real load of these images takes about 1 ms) */
  const char *lm = getenv("FAKE_CUDA_LOAD_MS");
  const long ms = lm ? atol(lm) : 20;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000 * 1000};
  nanosleep(&ts, NULL);
  pthread_mutex_lock(&g_lock);
  g_live_loads--;
  pthread_mutex_unlock(&g_lock);
  fake_module *fm = malloc(sizeof *fm);
  if (!fm)
    return CUDA_ERROR_OUT_OF_MEMORY;
  fm->magic = 0x5a;
  *m = (CUmodule)fm;
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  free(m);
  return CUDA_SUCCESS;
}
/* sagejit takes one function from each module: the module's block
 * stands for it, so unloading the module is all the cleanup there is. */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  const char *rej = getenv("FAKE_CUDA_REJECT");
  if (rej && *rej && strstr(name, rej))
    return CUDA_ERROR_NOT_FOUND;
  *f = (CUfunction)m;
  return CUDA_SUCCESS;
}
CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  (void)f, (void)a, (void)v;
  return CUDA_SUCCESS;
}
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  (void)a, (void)f;
  *v = 0;
  return CUDA_SUCCESS;
}
static CUresult launched(unsigned gx, unsigned gy, unsigned gz, void **params) {
  pthread_mutex_lock(&g_lock);
  if (g_launches < FAKE_MAX_CAPTURE && g_cap_want[g_launches] && params && params[0]) {
    memcpy(g_cap[g_launches], params[0], g_cap_want[g_launches]);
    g_cap_have[g_launches] = 1;
  }
  if (g_launches < FAKE_MAX_GRIDS) {
    g_grids[g_launches][0] = gx;
    g_grids[g_launches][1] = gy;
    g_grids[g_launches][2] = gz;
  }
  g_launches++;
  g_grid[0] = gx;
  g_grid[1] = gy;
  g_grid[2] = gz;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                        unsigned bx, unsigned by, unsigned bz, unsigned smem,
                        CUstream s, void **params, void **extra) {
  (void)f, (void)bx, (void)by, (void)bz;
  (void)smem, (void)s, (void)extra;
  return launched(gx, gy, gz, params);
}
CUresult cuLaunchKernelEx(const CUlaunchConfig *cfg, CUfunction f, void **params,
                          void **extra) {
  (void)f, (void)extra;
  return launched(cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, params);
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes) {
  void *m = NULL;
  if (posix_memalign(&m, 256, bytes ? bytes : 1) != 0)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  free((void *)(uintptr_t)p);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) {
  memcpy(d, (const void *)(uintptr_t)s, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  memset((void *)(uintptr_t)d, v, n);
  return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
  (void)s;
  unsigned *p = (unsigned *)(uintptr_t)d;
  for (size_t i = 0; i < n; i++)
    p[i] = v;
  pthread_mutex_lock(&g_lock);
  g_memsets++;
  g_memset_words = n;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}
CUresult cuStreamCreate(CUstream *s, unsigned flags) {
  (void)flags;
  *s = (CUstream)&g_stream_token;
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy_v2(CUstream s) {
  (void)s;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  (void)s;
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st) {
  (void)s;
  const char *cap = getenv("FAKE_CUDA_CAPTURING");
  *st = cap && *cap == '1' ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *e, unsigned flags) {
  (void)flags;
  fake_event *ev = calloc(1, sizeof *ev);
  if (!ev)
    return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&g_lock);
  g_events_live++;
  pthread_mutex_unlock(&g_lock);
  *e = (CUevent)ev;
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) {
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_lock);
  g_events_live--;
  pthread_mutex_unlock(&g_lock);
  free(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_lock);
  ((fake_event *)e)->stamp = g_launches;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}
CUresult cuEventSynchronize(CUevent e) {
  if (!e)
    return CUDA_ERROR_INVALID_HANDLE;
  pthread_mutex_lock(&g_lock);
  g_event_syncs++;
  pthread_mutex_unlock(&g_lock);
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b) {
  if (!a || !b)
    return CUDA_ERROR_INVALID_HANDLE;
  *ms = (float)(((fake_event *)b)->stamp - ((fake_event *)a)->stamp);
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
  (void)a, (void)p;
  memset(data, 0, sizeof(int));
  return CUDA_SUCCESS;
}
CUresult cuTensorMapEncodeTiled(CUtensorMap *m, CUtensorMapDataType t, cuuint32_t rank,
                                void *addr, const cuuint64_t *dims,
                                const cuuint64_t *strides, const cuuint32_t *box,
                                const cuuint32_t *estrides, CUtensorMapInterleave il,
                                CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                CUtensorMapFloatOOBfill oob) {
  (void)l2, (void)oob;
  /* The driver's documented limits (cuda.h, cuTensorMapEncodeTiled), so
   * that a map the runtime builds in a CPU test is one a real driver takes:
   * rank 1-5, a 16-byte aligned address, dimensions in [1, 2^32], strides
   * multiples of 16 below 2^40, boxes of 1-256 elements whose inner size is
   * a multiple of 16 bytes and, swizzled, at most the swizzle's span,
   * element strides 1-8. */
  static const unsigned esize[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  if (!m || rank < 1 || rank > 5 || (unsigned)t >= sizeof esize / sizeof *esize ||
      ((uintptr_t)addr & 15) || il != CU_TENSOR_MAP_INTERLEAVE_NONE)
    return CUDA_ERROR_INVALID_VALUE;
  for (cuuint32_t i = 0; i < rank; i++) {
    if (dims[i] < 1 || dims[i] > (1ull << 32) || box[i] < 1 || box[i] > 256 ||
        estrides[i] < 1 || estrides[i] > 8)
      return CUDA_ERROR_INVALID_VALUE;
    if (i + 1 < rank && (strides[i] % 16 || strides[i] >= (1ull << 40)))
      return CUDA_ERROR_INVALID_VALUE;
  }
  const unsigned inner = box[0] * esize[t];
  static const unsigned span[] = {0, 32, 64, 128};
  if (inner % 16 || (unsigned)sw > 3 || (sw && inner > span[sw]))
    return CUDA_ERROR_INVALID_VALUE;
  memset(m, 0, sizeof *m);
  return CUDA_SUCCESS;
}
