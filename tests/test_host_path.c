/*
 * test_host_path.c -- sj_attention's host path on a fake driver (CPU).
 *
 * tests/fake_cuda.c stands in for libcuda (SAGEJIT_CUDA_DRIVER): one sm_90
 * device whose memory is host memory and whose launches only count.  The
 * kernels are real: NVRTC compiles them into a fresh cache, the fake
 * driver checks each image and records the thread that loads it.
 *
 *  - A cold first call resolves its kernels on one thread each (the
 *    caller's and one per other missing kernel): 4 compiles, 4 loads on 4
 *    threads; the next call hits memory, a new context hits the disk.
 *  - Eight threads call at once with two plans that share three kernels:
 *    each distinct kernel is compiled and loaded exactly once, every call
 *    succeeds (no thread waits on another while holding kernels of its
 *    own, so none can deadlock).
 *  - A kernel the driver refuses fails the call with SJ_ERR_CUDA and
 *    leaves nothing half-settled: the next call, once the driver accepts
 *    it, loads it from the cache without compiling it again.
 *  - Causal launch order: every head's heaviest Q block first (grid x =
 *    heads) while a batch's K/V fit the reported L2 (wgmma) or twice it
 *    (the mma.sync families), else one head at a time (grid x = Q blocks).
 *  - kv_finalize folded into kv_stats (SJ_F_FINALIZE) on a context's
 *    workspace: a call launches kv_stats, the quantizer and the attention
 *    kernel, and zeroes kv_stats' counts at the workspace's start only
 *    when the workspace is new or the previous call used those bytes for
 *    data; a caller's workspace, a capturing stream and SAGEJIT_PREP=0
 *    keep the kv_finalize launch (and need no memset).
 *  - kv_stats' grid is one wave of the CTAs that fit: three per
 *    multiprocessor on sm_90, two on sm_89's 100 KB of shared memory.
 *  - sj_bench pairs each timed call with its own two events: queued back
 *    to back it waits once per part, with sync_each once per call, and
 *    it destroys every event it made.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "internal.h" /* SJ_SHORT_SEQ */
#include "sagejit.h"
#include "sj_abi.h"     /* the kernels' argument structs */
#include "testutil.h"

#ifndef SJ_FAKE_CUDA
#error "SJ_FAKE_CUDA must name the fake driver library"
#endif

static void (*g_counters)(int *, int *, int *, int *);
static void (*g_reset)(void);
static void (*g_last_grid)(unsigned *, unsigned *, unsigned *);
static int (*g_grid_at)(int, unsigned *, unsigned *, unsigned *);
static void (*g_memsets)(int *, size_t *);
static void (*g_events)(int *, int *);
static void (*g_capture)(int, size_t);
static int (*g_captured)(int, void *, size_t);
static char g_dir[512];
static void *g_buf; /* q, k, v and o of every call (never read) */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* The cache directory `name` under g_dir.  The tests that count compiles
 * (cold, threads, reject) each have their own, fresh; the others, which
 * look only at what is launched, share ROUTES, so that a kernel two of
 * them need is compiled once (NVRTC is this file's whole run time, and
 * twice that under the sanitizers).  SJ_TEST_ROUTES_CACHE=DIR puts ROUTES
 * in DIR, kept from run to run: .ci/run points the plain suite and both
 * sanitizer passes at one directory, so the instrumented runs load what
 * the plain one compiled (the compile path stays covered there by cold,
 * threads and reject). */
#define ROUTES "routes"
static void cache_dir(char *buf, size_t size, const char *name) {
  const char *keep = getenv("SJ_TEST_ROUTES_CACHE");
  int n = !strcmp(name, ROUTES) && keep && *keep
              ? snprintf(buf, size, "%s", keep)
              : snprintf(buf, size, "%s/%s", g_dir, name);
  assert_true(n > 0 && (size_t)n < size);
}

static sj_context *make_ctx(const char *dir) {
  sj_config cfg;
  sj_config_init(&cfg);
  cfg.cache_dir = dir;
  sj_context *ctx = NULL;
  sj_status st = sj_context_create(&ctx, &cfg);
  if (st != SJ_OK)
    fail_msg("context on the fake driver: %s", sj_context_create_error());
  assert_string_equal(sj_context_target(ctx), "sm_90a");
  return ctx;
}

/* q, k, v and o of a call: four tensors of `bytes` each on buf (never
 * read: the fake driver only counts launches). */
static void point_tensors(sj_attention_params *p, char *buf, size_t bytes) {
  p->q = buf;
  p->k = buf + bytes;
  p->v = buf + 2 * bytes;
  p->o = buf + 3 * bytes;
}

/* A context on the fake driver reporting a 1 MiB L2, with its cache in
 * ROUTES, and a buffer for four tensors of `bytes` each. */
static sj_context *small_l2_ctx(size_t bytes, char **buf) {
  char dir[600];
  cache_dir(dir, sizeof dir, ROUTES);
  *buf = aligned_alloc(256, 4 * bytes);
  assert_non_null(*buf);
  setenv("FAKE_CUDA_L2", "1048576", 1);
  return make_ctx(dir);
}

static void params(sj_attention_params *p, int causal) {
  sj_attention_params_init(p);
  p->batch = 1;
  p->heads_q = p->heads_kv = 2;
  p->seq_q = p->seq_kv = 100; /* not a multiple of any tile */
  p->head_dim = 64;
  const size_t bytes = 2 * 100 * 64 * 2;
  p->q = g_buf;
  p->k = (char *)g_buf + bytes;
  p->v = (char *)g_buf + 2 * bytes;
  p->o = (char *)g_buf + 3 * bytes;
  p->causal = causal;
}

static int setup(void **state) {
  (void)state;
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK)
    return 0; /* each test skips */
  if (tu_mkdtemp("host_path", g_dir, sizeof g_dir) != 0)
    return -1;
  g_buf = aligned_alloc(256, 4 * 2 * 100 * 64 * 2);
  return g_buf ? 0 : -1;
}
static int teardown(void **state) {
  (void)state;
  free(g_buf);
  if (g_dir[0] && !getenv("SJ_TEST_KEEP"))
    tu_rmrf(g_dir);
  return 0;
}

static void need(void) {
  if (sj_nvrtc_version(NULL, NULL) != SJ_OK || !g_counters)
    skip();
}

static void test_cold_call_resolves_in_parallel(void **state) {
  (void)state;
  need();
  char dir[600];
  cache_dir(dir, sizeof dir, "cold");
  sj_context *ctx = make_ctx(dir);
  sj_attention_params p;
  params(&p, 0);
  g_reset();
  const double t0 = now_ms();
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  const double wall = now_ms() - t0;
  sj_stats s;
  sj_context_get_stats(ctx, &s);
  print_message("cold first call %.0f ms; its %d compiles %.0f ms in all\n", wall,
                (int)s.compiles, s.compile_ms);
  int threads, loads, launches, max_live;
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(s.misses, 4);
  assert_int_equal(s.compiles, 4);
  assert_int_equal(s.disk_hits, 0);
  assert_int_equal(loads, 4);
  assert_int_equal(threads, 4); /* the caller's and three more */
  assert_int_equal(launches, 3); /* kv_stats (and finalize), quant_qkv, attention */

  /* the same context again: memory */
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  sj_context_get_stats(ctx, &s);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(s.mem_hits, 4);
  assert_int_equal(loads, 4);
  assert_int_equal(launches, 6);
  sj_context_destroy(ctx);

  /* a new context on the same cache: disk, no compile, loads in parallel */
  ctx = make_ctx(dir);
  g_reset();
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  sj_context_get_stats(ctx, &s);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(s.disk_hits, 4);
  assert_int_equal(s.compiles, 0);
  assert_int_equal(loads, 4);
  assert_int_equal(threads, 4);
  sj_context_destroy(ctx);
}

typedef struct {
  sj_context *ctx;
  pthread_barrier_t *go;
  int causal;
  sj_status st;
} caller;

static void *call_once(void *arg) {
  caller *c = arg;
  sj_attention_params p;
  params(&p, c->causal);
  pthread_barrier_wait(c->go);
  c->st = sj_attention(c->ctx, &p, NULL);
  return NULL;
}

static void test_threads_share_kernels(void **state) {
  (void)state;
  need();
  char dir[600];
  cache_dir(dir, sizeof dir, "threads");
  sj_context *ctx = make_ctx(dir);
  g_reset();
  enum { N = 8 };
  pthread_t th[N];
  caller c[N];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, N);
  for (int i = 0; i < N; i++) {
    c[i] = (caller){ctx, &go, i % 2, SJ_ERR_INTERNAL};
    assert_int_equal(pthread_create(&th[i], NULL, call_once, &c[i]), 0);
  }
  for (int i = 0; i < N; i++)
    pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  for (int i = 0; i < N; i++)
    assert_int_equal(c[i].st, SJ_OK);
  sj_stats s;
  sj_context_get_stats(ctx, &s);
  int threads, loads, launches, max_live;
  g_counters(&threads, &loads, &launches, &max_live);
  /* statistics, finalize and quantizer shared; two attention kernels */
  assert_int_equal(s.compiles, 5);
  assert_int_equal(s.misses, 5);
  assert_int_equal(s.mem_hits, 4 * N - 5);
  assert_int_equal(loads, 5);
  assert_int_equal(launches, 3 * N);
  sj_context_destroy(ctx);
}

static void test_rejected_kernel_settles(void **state) {
  (void)state;
  need();
  char dir[600];
  cache_dir(dir, sizeof dir, "reject");
  sj_context *ctx = make_ctx(dir);
  sj_attention_params p;
  params(&p, 1);
  setenv("FAKE_CUDA_REJECT", "attn_wgmma", 1);
  g_reset();
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_ERR_CUDA);
  unsetenv("FAKE_CUDA_REJECT");
  assert_non_null(strstr(sj_context_last_error(ctx), "rejected"));
  sj_stats s;
  sj_context_get_stats(ctx, &s);
  int threads, loads, launches, max_live;
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(s.compiles, 4); /* the refused one was stored */
  assert_int_equal(launches, 0);   /* nothing launched on error */
  /* the driver accepts it now: loaded from the cache, not recompiled */
  assert_int_equal(sj_attention(ctx, &p, NULL), SJ_OK);
  sj_context_get_stats(ctx, &s);
  assert_int_equal(s.compiles, 4);
  assert_int_equal(s.disk_hits, 1);
  assert_int_equal(s.mem_hits, 3);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(launches, 3);
  sj_context_destroy(ctx);
}

/* Causal calls at D = 128 of at most SJ_SHORT_SEQ keys run the solo,
 * 64-key-tile attention kernel (sj_plan_short), the others of at most
 * SJ_SOLO_SEQ (non-causal) or SJ_SOLO_SEQ_CAUSAL (causal) the solo
 * 128-key-tile kernel (sj_plan_solo), longer ones the default: the driver
 * refuses one kernel by its lowered name (..., BN 64, NC 0 or BN 128,
 * NC 0), and only the calls that pick it fail. */
static void test_short_causal_kernel(void **state) {
  (void)state;
  need();
  char dir[600];
  cache_dir(dir, sizeof dir, ROUTES);
  sj_context *ctx = NULL;
  enum { D = 128, H = 2, N_MAX = SJ_SOLO_SEQ_CAUSAL + 1 };
  const size_t bytes = (size_t)H * N_MAX * D * 2;
  char *buf = aligned_alloc(256, 4 * bytes);
  assert_non_null(buf);
  static const struct {
    const char *reject; /* the short kernel (BN 64, NC 0) or the solo one (BN 128) */
    int seq, causal;
    sj_status want;
  } calls[] = {{"Li64ELi0EEEv", 1000, 1, SJ_ERR_CUDA},
               {"Li64ELi0EEEv", SJ_SHORT_SEQ, 1, SJ_ERR_CUDA},
               {"Li64ELi0EEEv", SJ_SHORT_SEQ + 1, 1, SJ_OK},
               {"Li64ELi0EEEv", 1000, 0, SJ_OK},
               {"Li128ELi0EEEv", 1000, 0, SJ_ERR_CUDA},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ, 0, SJ_ERR_CUDA},
               {"Li128ELi0EEEv", SJ_SHORT_SEQ + 1, 1, SJ_ERR_CUDA},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ + 1, 1, SJ_ERR_CUDA},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ_CAUSAL, 1, SJ_ERR_CUDA},
               {"Li128ELi0EEEv", 1000, 1, SJ_OK},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ + 1, 0, SJ_OK},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ_CAUSAL, 0, SJ_OK},
               {"Li128ELi0EEEv", SJ_SOLO_SEQ_CAUSAL + 1, 1, SJ_OK}};
  for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
    /* a context per refused kernel: a context keeps the kernels it loaded */
    if (!i || strcmp(calls[i].reject, calls[i - 1].reject)) {
      if (ctx)
        sj_context_destroy(ctx);
      setenv("FAKE_CUDA_REJECT", calls[i].reject, 1);
      ctx = make_ctx(dir);
    }
    sj_attention_params p;
    sj_attention_params_init(&p);
    p.batch = 1;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_kv = calls[i].seq;
    p.head_dim = D;
    point_tensors(&p, buf, bytes);
    p.causal = calls[i].causal;
    const sj_status st = sj_attention(ctx, &p, NULL);
    if (st != calls[i].want)
      print_error("seq %d causal %d: %s (%s)\n", calls[i].seq, calls[i].causal,
                  sj_status_name(st), sj_context_last_error(ctx));
    assert_int_equal(st, calls[i].want);
    if (st != SJ_OK)
      assert_non_null(strstr(sj_context_last_error(ctx), "rejected"));
  }
  unsetenv("FAKE_CUDA_REJECT");
  free(buf);
  sj_context_destroy(ctx);
}

/* The causal launch order's budget (attention.c, causal_heads_first): a
 * batch's INT8 K and V bytes (heads_kv x seq_kv x D x (1 + V's bytes))
 * against the device's L2 for wgmma, twice the L2 for attn_mma.  With a
 * reported L2 of 1 MiB, D = 128 and 4 query heads, the last launch of
 * each call (the attention kernel) must put the heads on x exactly up to
 * the boundary. */
static void test_heads_first_budget(void **state) {
  (void)state;
  need();
  if (!g_last_grid)
    skip();
  enum { D = 128, H = 4, N_MAX = 4160 };
  const size_t bytes = (size_t)H * N_MAX * D * 2;
  char *buf;
  sj_context *ctx = small_l2_ctx(bytes, &buf);
  static const struct {
    sj_family family;
    int heads_kv, seq, heads_first;
    sj_pv_accum accum;
  } calls[] = {
      /* wgmma, 8-bit V: 4 x seq x 128 x 2 <= 1 MiB up to 1024 keys */
      {SJ_FAMILY_WGMMA, H, 1024, 1, SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, H, 1088, 0, SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, H, 1344, 0, SJ_ACCUM_DEFAULT},
      /* one kv head (GQA): four times the keys */
      {SJ_FAMILY_WGMMA, 1, 4096, 1, SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_WGMMA, 1, 4160, 0, SJ_ACCUM_DEFAULT},
      /* FP16PV, the caller's 16-bit V: 4 x seq x 128 x 3 <= 2 MiB up to 1365 */
      {SJ_FAMILY_FP16PV, H, 1344, 1, SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP16PV, H, 1408, 0, SJ_ACCUM_DEFAULT},
      /* FP8PV, 8-bit V: <= 2 MiB up to 2048 */
      {SJ_FAMILY_FP8PV, H, 2048, 1, SJ_ACCUM_FP32_FP16},
      {SJ_FAMILY_FP8PV, H, 2112, 0, SJ_ACCUM_FP32_FP16},
      /* FP8PV pvi8+splitv, whose heads may all take split V (e4m3 V and
       * its residual): as FP16PV, up to 1365; FP8PV's default on this
       * device (sm_90) */
      {SJ_FAMILY_FP8PV, H, 1344, 1, SJ_ACCUM_PVI8_SPLITV},
      {SJ_FAMILY_FP8PV, H, 1408, 0, SJ_ACCUM_PVI8_SPLITV},
      {SJ_FAMILY_FP8PV, H, 1344, 1, SJ_ACCUM_DEFAULT},
      {SJ_FAMILY_FP8PV, H, 1408, 0, SJ_ACCUM_DEFAULT},
  };
  for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
    sj_attention_params p;
    sj_attention_params_init(&p);
    p.batch = 1;
    p.heads_q = H;
    p.heads_kv = calls[i].heads_kv;
    p.seq_q = p.seq_kv = calls[i].seq;
    p.head_dim = D;
    p.family = calls[i].family;
    p.pv_accum = calls[i].accum;
    point_tensors(&p, buf, bytes);
    p.causal = 1;
    const sj_status st = sj_attention(ctx, &p, NULL);
    if (st != SJ_OK)
      fail_msg("call %zu: %s (%s)", i, sj_status_name(st), sj_context_last_error(ctx));
    unsigned gx = 0, gy = 0, gz = 0;
    g_last_grid(&gx, &gy, &gz);
    /* (heads, Q blocks, batch) or (Q blocks, heads, batch); a call has at
     * least 1024 / 128 = 8 Q blocks, never the 4 heads */
    const unsigned heads = calls[i].heads_first ? gx : gy;
    const unsigned blocks = calls[i].heads_first ? gy : gx;
    if (heads != H || blocks < 8 || gz != 1)
      fail_msg("call %zu (family %d, %d kv heads, %d keys): grid %u x %u x %u, "
               "heads first expected %d",
               i, (int)calls[i].family, calls[i].heads_kv, calls[i].seq, gx, gy, gz,
               calls[i].heads_first);
  }
  sj_context_destroy(ctx);
  unsetenv("FAKE_CUDA_L2");
  free(buf);
}

/* B = 1, D = 64, N = 100 with `heads` query and kv heads on buf (4
 * tensors of heads x 100 x 64 fp16), optionally with a workspace. */
static void prep_params(sj_attention_params *p, char *buf, int heads, void *ws,
                        size_t ws_size) {
  sj_attention_params_init(p);
  p->batch = 1;
  p->heads_q = p->heads_kv = heads;
  p->seq_q = p->seq_kv = 100;
  p->head_dim = 64;
  p->qk_quant = SJ_QUANT_PER_THREAD; /* Q fused into the attention kernel */
  const size_t bytes = (size_t)heads * 100 * 64 * 2;
  p->q = buf;
  p->k = buf + bytes;
  p->v = buf + 2 * bytes;
  p->o = buf + 3 * bytes;
  p->workspace = ws;
  p->workspace_size = ws_size;
}
static sj_status prep_call(sj_context *ctx, char *buf, int heads, void *ws, size_t ws_size) {
  sj_attention_params p;
  prep_params(&p, buf, heads, ws, ws_size);
  return sj_attention(ctx, &p, NULL);
}

static void test_prep_launch(void **state) {
  (void)state;
  need();
  if (!g_grid_at || !g_memsets)
    skip();
  char dir[600];
  cache_dir(dir, sizeof dir, ROUTES);
  enum { HMAX = 4 };
  char *buf = aligned_alloc(256, 4 * (size_t)HMAX * 100 * 64 * 2);
  assert_non_null(buf);
  sj_context *ctx = make_ctx(dir);
  int threads, loads, launches, max_live, memsets;
  size_t words;
  unsigned gx, gy, gz;

  /* The context's workspace: kv_stats (one chunk of 100 keys per head),
   * quant_qkv, attention */
  g_reset();
  assert_int_equal(prep_call(ctx, buf, 2, NULL, 0), SJ_OK);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(launches, 3);
  assert_int_equal(g_grid_at(0, &gx, &gy, &gz), 0);
  assert_int_equal(gx, 1);
  assert_int_equal(gy, 2);
  assert_int_equal(gz, 1);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 1); /* a new workspace */
  assert_int_equal(words, 2); /* a count per (batch, kv head) */
  /* the launch left its counters zero: no memset */
  assert_int_equal(prep_call(ctx, buf, 2, NULL, 0), SJ_OK);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 1);
  /* more heads: more counters, over bytes the last call used for data */
  assert_int_equal(prep_call(ctx, buf, 4, NULL, 0), SJ_OK);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 2);
  assert_int_equal(words, 4);
  /* fewer: already zero, but the bytes past them become data */
  assert_int_equal(prep_call(ctx, buf, 2, NULL, 0), SJ_OK);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 2);
  assert_int_equal(prep_call(ctx, buf, 4, NULL, 0), SJ_OK);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 3);
  /* captured into a graph, which may replay after calls that wrote over
   * the counts: the separate kv_finalize launch, no memset */
  g_reset();
  setenv("FAKE_CUDA_CAPTURING", "1", 1);
  const sj_status cap_st = prep_call(ctx, buf, 4, NULL, 0);
  unsetenv("FAKE_CUDA_CAPTURING");
  assert_int_equal(cap_st, SJ_OK);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(launches, 4);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 0);

  /* A caller's workspace: the separate kv_finalize launch, and its bytes
   * left alone (a fold would need a memset per call) */
  sj_attention_params p;
  prep_params(&p, buf, 2, NULL, 0);
  size_t need_bytes = 0;
  assert_int_equal(sj_attention_workspace_size(ctx, &p, &need_bytes), SJ_OK);
  unsigned *ws = aligned_alloc(256, (need_bytes + 255) / 256 * 256);
  assert_non_null(ws);
  memset(ws, 0xff, need_bytes);
  g_reset();
  assert_int_equal(prep_call(ctx, buf, 2, ws, need_bytes), SJ_OK);
  assert_int_equal(prep_call(ctx, buf, 2, ws, need_bytes), SJ_OK);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(launches, 8);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 0);
  for (int i = 0; i < 3; i++)
    assert_int_equal(ws[i], 0xffffffffu);
  free(ws);
  sj_context_destroy(ctx);

  /* SAGEJIT_PREP=0: statistics, finalize (a CTA per head), quantizer,
   * attention */
  setenv("SAGEJIT_PREP", "0", 1);
  ctx = make_ctx(dir);
  unsetenv("SAGEJIT_PREP");
  g_reset();
  assert_int_equal(prep_call(ctx, buf, 2, NULL, 0), SJ_OK);
  g_counters(&threads, &loads, &launches, &max_live);
  assert_int_equal(launches, 4);
  g_memsets(&memsets, &words);
  assert_int_equal(memsets, 0);
  assert_int_equal(g_grid_at(1, &gx, &gy, &gz), 0);
  assert_int_equal(gx, 2);
  assert_int_equal(gy, 1);
  sj_context_destroy(ctx);
  free(buf);
}

/* sj_bench on the fake driver, whose events time the launches between
 * them: a whole call is kv_stats (with the fold), the quantizer and the
 * attention kernel, so e2e 3, preprocessing 2 and attention 1 "ms" in
 * both modes; a pairing of one call's start with another call's end would
 * read a multiple.  Back to back waits on one event per part, sync_each
 * on every call's end. */
static void test_bench_timing(void **state) {
  (void)state;
  need();
  if (!g_events)
    skip();
  char dir[600];
  cache_dir(dir, sizeof dir, ROUTES);
  sj_context *ctx = make_ctx(dir);
  enum { ITERS = 7 };
  for (int sync = 0; sync < 2; sync++) {
    sj_bench_case c;
    memset(&c, 0, sizeof c);
    prep_params(&c.params, g_buf, 2, NULL, 0); /* pointers ignored */
    c.warmup = 2;
    c.iters = ITERS;
    c.sync_each = sync;
    sj_bench_result r;
    memset(&r, 0, sizeof r);
    g_reset();
    const sj_status st = sj_bench(ctx, &c, &r);
    if (st != SJ_OK)
      fail_msg("sync_each %d: %s (%s)", sync, sj_status_name(st), sj_context_last_error(ctx));
    int live = -1, syncs = -1;
    g_events(&live, &syncs);
    assert_int_equal(live, 0);
    assert_int_equal(syncs, sync ? 3 * ITERS : 3);
    assert_true(r.e2e_ms == 3.0);
    assert_true(r.preprocess_ms == 2.0);
    assert_true(r.attn_ms == 1.0);
    assert_true(r.host_us > 0);
    assert_true(r.flops == 4.0 * 2 * 100 * 100 * 64);
  }
  sj_context_destroy(ctx);
}

/* SJ_F_L2_KEEP_V reaches both preprocessing kernels, and only where V's
 * statistics run and V's 16-bit bytes take at most 3/4 of the L2: on the
 * fake's 1 MiB L2 up to 768 KiB, i.e. 1 x 4 heads x 768 keys x 128 x 2.
 * Causal D = 128 calls, so that test_heads_first_budget's kernels (the
 * same cache directory) serve most of them. */
static void test_l2_keep_v_flag(void **state) {
  (void)state;
  need();
  if (!g_capture || !g_captured)
    skip();
  enum { D = 128, H = 4, N_MAX = 1024 };
  const size_t bytes = (size_t)H * N_MAX * D * 2;
  char *buf;
  sj_context *ctx = small_l2_ctx(bytes, &buf);
  static const struct {
    sj_family family;
    sj_pv_accum accum;
    int smooth_v, seq, keep;
  } calls[] = {
      {SJ_FAMILY_WGMMA, SJ_ACCUM_DEFAULT, 0, 768, 1},  /* 768 KiB: kept */
      {SJ_FAMILY_WGMMA, SJ_ACCUM_DEFAULT, 0, 832, 0},  /* 832 KiB: not */
      {SJ_FAMILY_FP8PV, SJ_ACCUM_DEFAULT, 0, 512, 1},
      {SJ_FAMILY_FP16PV, SJ_ACCUM_DEFAULT, 0, 512, 0}, /* no V statistics */
      {SJ_FAMILY_WGMMA, SJ_ACCUM_PV16, 0, 512, 0},     /* none either */
      {SJ_FAMILY_WGMMA, SJ_ACCUM_PV16, 1, 512, 1},     /* smooth_v's mean */
  };
  for (size_t i = 0; i < sizeof calls / sizeof *calls; i++) {
    sj_attention_params p;
    sj_attention_params_init(&p);
    p.batch = 1;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_kv = calls[i].seq;
    p.head_dim = D;
    p.family = calls[i].family;
    p.pv_accum = calls[i].accum;
    p.smooth_v = calls[i].smooth_v;
    p.causal = 1;
    point_tensors(&p, buf, bytes);
    g_reset();
    /* a context's workspace: kv_stats (finalizing), quant_qkv, attention */
    g_capture(0, sizeof(sj_stats_args));
    g_capture(1, sizeof(sj_quant_args));
    const sj_status st = sj_attention(ctx, &p, NULL);
    if (st != SJ_OK)
      fail_msg("call %zu: %s (%s)", i, sj_status_name(st), sj_context_last_error(ctx));
    sj_stats_args sa;
    sj_quant_args qa;
    assert_int_equal(g_captured(0, &sa, sizeof sa), 0);
    assert_int_equal(g_captured(1, &qa, sizeof qa), 0);
    /* launch 1 is quant_qkv: its geometry names this call's keys */
    assert_int_equal(qa.g.seq_kv, calls[i].seq);
    const int ks = (sa.flags & SJ_F_L2_KEEP_V) != 0, kq = (qa.flags & SJ_F_L2_KEEP_V) != 0;
    if (ks != calls[i].keep || kq != calls[i].keep)
      fail_msg("call %zu (family %d, accum %d, smooth_v %d, %d keys): kv_stats %d, "
               "quant_qkv %d, expected %d",
               i, (int)calls[i].family, (int)calls[i].accum, calls[i].smooth_v,
               calls[i].seq, ks, kq, calls[i].keep);
  }
  sj_context_destroy(ctx);
  unsetenv("FAKE_CUDA_L2");
  free(buf);
}

/* kv_stats' grid: one wave of its CTAs, three per multiprocessor where
 * the shared memory holds three of their 48 KB, two on the 100 KB parts.
 * B = 4, 32 kv heads (128 heads), 1024 keys, on the fake's 132
 * multiprocessors: sm_90 wants 3 x 132 / 128 = 3 chunks a head (384 keys
 * each, rounded to 64), sm_89 2 x 132 / 128 = 2 (512 keys). */
static void test_stats_wave(void **state) {
  (void)state;
  need();
  if (!g_grid_at)
    skip();
  enum { B = 4, H = 32, N = 1024, D = 64 };
  const size_t bytes = (size_t)B * H * N * D * 2;
  char *buf = aligned_alloc(256, 4 * bytes);
  assert_non_null(buf);
  static const struct {
    const char *cc;
    unsigned chunks;
  } cases[] = {{"9.0", 3}, {"8.9", 2}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    char dir[600];
    cache_dir(dir, sizeof dir, ROUTES);
    setenv("FAKE_CUDA_CC", cases[i].cc, 1);
    sj_config cfg;
    sj_config_init(&cfg);
    cfg.cache_dir = dir;
    sj_context *ctx = NULL;
    const sj_status cst = sj_context_create(&ctx, &cfg);
    unsetenv("FAKE_CUDA_CC");
    if (cst != SJ_OK)
      fail_msg("context on the fake driver (cc %s): %s", cases[i].cc,
               sj_context_create_error());
    sj_attention_params p;
    sj_attention_params_init(&p);
    p.batch = B;
    p.heads_q = p.heads_kv = H;
    p.seq_q = p.seq_kv = N;
    p.head_dim = D;
    p.family = SJ_FAMILY_FP8PV; /* V statistics on both targets */
    point_tensors(&p, buf, bytes);
    g_reset();
    const sj_status st = sj_attention(ctx, &p, NULL);
    if (st != SJ_OK)
      fail_msg("cc %s: %s (%s)", cases[i].cc, sj_status_name(st), sj_context_last_error(ctx));
    unsigned gx = 0, gy = 0, gz = 0;
    assert_int_equal(g_grid_at(0, &gx, &gy, &gz), 0); /* kv_stats: (chunks, heads, batch) */
    if (gx != cases[i].chunks || gy != H || gz != B)
      fail_msg("cc %s: kv_stats grid %u x %u x %u, expected %u x %d x %d", cases[i].cc,
               gx, gy, gz, cases[i].chunks, H, B);
    sj_context_destroy(ctx);
  }
  free(buf);
}

int main(void) {
  /* before anything loads the driver (once per process) */
  setenv("SAGEJIT_CUDA_DRIVER", SJ_FAKE_CUDA, 1);
  setenv("FAKE_CUDA_CC", "9.0", 1);
  unsetenv("SAGEJIT_ARCH");
  unsetenv("SAGEJIT_FAMILY");
  unsetenv("SAGEJIT_TUNE");
  unsetenv("SAGEJIT_CACHE_PATH");
  void *lib = dlopen(SJ_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    *(void **)&g_counters = dlsym(lib, "fake_cuda_counters");
    *(void **)&g_reset = dlsym(lib, "fake_cuda_reset");
    *(void **)&g_last_grid = dlsym(lib, "fake_cuda_last_grid");
    *(void **)&g_grid_at = dlsym(lib, "fake_cuda_grid");
    *(void **)&g_memsets = dlsym(lib, "fake_cuda_memsets");
    *(void **)&g_events = dlsym(lib, "fake_cuda_events");
    *(void **)&g_capture = dlsym(lib, "fake_cuda_capture");
    *(void **)&g_captured = dlsym(lib, "fake_cuda_captured");
    if (!g_reset)
      g_counters = NULL;
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_cold_call_resolves_in_parallel),
      cmocka_unit_test(test_threads_share_kernels),
      cmocka_unit_test(test_rejected_kernel_settles),
      cmocka_unit_test(test_short_causal_kernel),
      cmocka_unit_test(test_heads_first_budget),
      cmocka_unit_test(test_l2_keep_v_flag),
      cmocka_unit_test(test_prep_launch),
      cmocka_unit_test(test_stats_wave),
      cmocka_unit_test(test_bench_timing),
  };
  int rc = cmocka_run_group_tests(tests, setup, teardown);
  if (lib)
    dlclose(lib);
  return rc;
}
