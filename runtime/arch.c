/*
 * arch.c -- compute capability -> compile target, and what each target can
 * run.  A device NVRTC does not know gets PTX for the newest virtual target
 * NVRTC supports that is not newer than the device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct target_row {
  int sm;
  const char *name;
  int smem_optin; /* per-block opt-in shared memory, bytes */
} target_row;

/* Arch-specific ('a') targets where the arch has them. */
static const target_row k_targets[] = {
    {80, "sm_80", 166912},   {86, "sm_86", 101376},   {87, "sm_87", 166912},
    {88, "sm_88", 101376},   {89, "sm_89", 101376},   {90, "sm_90a", 232448},
    {100, "sm_100a", 232448}, {103, "sm_103a", 232448}, {110, "sm_110a", 232448},
    {120, "sm_120a", 101376}, {121, "sm_121a", 101376},
};
#define N_TARGETS (sizeof k_targets / sizeof k_targets[0])

static const target_row *row_for(int sm) {
  for (size_t i = 0; i < N_TARGETS; i++)
    if (k_targets[i].sm == sm)
      return &k_targets[i];
  return NULL;
}

static sj_family default_family(int sm, int is_ptx) {
  if (sm == 90 && !is_ptx)
    return SJ_FAMILY_WGMMA;
  return sm >= 89 ? SJ_FAMILY_FP8PV : SJ_FAMILY_FP16PV;
}

static void fill(sj_target *t, int sm, int is_ptx) {
  memset(t, 0, sizeof *t);
  const target_row *r = row_for(sm);
  t->sm = sm;
  t->is_ptx = is_ptx;
  /* Unknown archs get the smallest shared memory of their generation. */
  t->smem_optin = r ? r->smem_optin : 101376;
  t->family = default_family(sm, is_ptx);
  if (is_ptx)
    snprintf(t->name, sizeof t->name, "compute_%d", sm);
  else if (r)
    sj_strlcpy(t->name, r->name, sizeof t->name);
  else
    snprintf(t->name, sizeof t->name, "sm_%d", sm);
}

int sj_target_parse(const char *s, sj_target *out) {
  if (!s || !*s)
    return -1;
  int is_ptx = 0;
  const char *p = s;
  if (!strncmp(p, "sm_", 3)) {
    p += 3;
  } else if (!strncmp(p, "compute_", 8)) {
    p += 8;
    is_ptx = 1;
  }
  char *end = NULL;
  long sm = strtol(p, &end, 10);
  if (end == p || sm < 80 || sm > 999)
    return -1;
  int arch_specific = 0;
  if (*end == 'a' || *end == 'f') {
    arch_specific = 1;
    end++;
  }
  if (*end)
    return -1;
  fill(out, (int)sm, is_ptx);
  if (!is_ptx && p != s) /* keep the user's spelling: sm_90 vs sm_90a */
    snprintf(out->name, sizeof out->name, "sm_%ld%s", sm,
             arch_specific ? (end[-1] == 'f' ? "f" : "a") : "");
  if (is_ptx)
    snprintf(out->name, sizeof out->name, "compute_%ld%s", sm,
             arch_specific ? "a" : "");
  if (!sj_family_supported(out->family, out)) /* plain sm_90: no wgmma */
    out->family = SJ_FAMILY_FP8PV;
  return 0;
}

int sj_target_for_device(int major, int minor, const int *supported, int n,
                         sj_target *out, char *note, size_t note_size) {
  const int sm = major * 10 + minor;
  if (note_size)
    note[0] = 0;
  if (sm < 80) {
    snprintf(note, note_size,
             "compute capability %d.%d is older than sm_80 (INT8 mma.sync "
             "needs Ampere or newer)", major, minor);
    return -1;
  }
  int known = 0, best = 0;
  for (int i = 0; i < n; i++) {
    if (supported[i] == sm)
      known = 1;
    if (supported[i] <= sm && supported[i] > best && supported[i] >= 80)
      best = supported[i];
  }
  if (known && row_for(sm)) {
    fill(out, sm, 0);
    return 0;
  }
  if (!best) {
    snprintf(note, note_size, "NVRTC supports no target for sm_%d", sm);
    return -1;
  }
  fill(out, best, 1);
  /* Keep the device's own shared memory class where we know it. */
  snprintf(note, note_size,
           "device sm_%d is newer than this NVRTC or sagejit knows; using PTX "
           "for %s, compiled by the driver", sm, out->name);
  return 0;
}

int sj_family_supported(sj_family fam, const sj_target *t) {
  switch (fam) {
  case SJ_FAMILY_FP16PV:
    return t->sm >= 80;
  case SJ_FAMILY_FP8PV:
    return t->sm >= 89;
  case SJ_FAMILY_WGMMA: /* wgmma and setmaxnreg exist on sm_90a only */
    return t->sm == 90 && !t->is_ptx && !strcmp(t->name, "sm_90a");
  default:
    return 0;
  }
}

sj_status sj_target_for_cc(int cc_major, int cc_minor, char *buf,
                           size_t size) {
  if (!buf || !size)
    return SJ_ERR_INVALID_ARGUMENT;
  const sj_nvrtc_api *nv;
  sj_status st = sj_nvrtc_load(&nv, NULL);
  if (st != SJ_OK)
    return st;
  sj_target t;
  char note[256];
  if (sj_target_for_device(cc_major, cc_minor, nv->supported, nv->n_supported,
                           &t, note, sizeof note) != 0)
    return SJ_ERR_UNSUPPORTED;
  sj_strlcpy(buf, t.name, size);
  return SJ_OK;
}
