/*
 * cmd_info.c -- `sagejit info`: library, NVRTC, driver, devices, cache.
 * Always exits 0 once its options parse: a machine without a GPU or NVRTC
 * is something to report, not an error.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct info_opts {
  cli_common common;
} info_opts;

static const cli_opt k_opts[] = {CLI_COMMON_OPTS, CLI_OPT_TABLE_END};

static const cli_command k_cmd = {
    "info", "[--json] [--cache-dir DIR]",
    "Shows the library version, NVRTC, the CUDA driver and devices (with the\n"
    "target sagejit compiles for each) and the kernel cache.",
    "JSON: {\"version\", \"version_number\", \"nvrtc\": {\"found\", "
    "\"version\"},\n"
    "  \"driver\": {\"found\", \"version\"}, \"device_count\", \"devices\": "
    "[...],\n"
    "  \"cache\": {\"path\", \"usable\", \"writable\", \"schema_version\", "
    "\"entries\", \"bytes\"}}\n",
    k_opts, 0};

#define MAX_DEVICES 64

int cmd_info(int argc, char **argv) {
  info_opts o;
  memset(&o, 0, sizeof o);
  int rc = cli_start(&k_cmd, argc, argv, &o);
  if (rc != CLI_CONTINUE)
    return rc;

  int nv_major = 0, nv_minor = 0;
  sj_status nv_st = sj_nvrtc_version(&nv_major, &nv_minor);
  int drv_version = 0, n_dev = 0;
  sj_status drv_st = sj_driver_info(&drv_version, &n_dev);
  if (drv_st != SJ_OK)
    n_dev = 0;
  int shown = n_dev < MAX_DEVICES ? n_dev : MAX_DEVICES;
  static sj_device_info devs[MAX_DEVICES];
  sj_status dev_st[MAX_DEVICES];
  for (int i = 0; i < shown; i++)
    dev_st[i] = sj_device_get_info(i, &devs[i]);

  /* A compile-only context for the cache, on the first device's target. */
  const char *target = "sm_80";
  if (shown > 0 && dev_st[0] == SJ_OK &&
      (!strncmp(devs[0].target, "sm_", 3) ||
       !strncmp(devs[0].target, "compute_", 8)))
    target = devs[0].target;
  sj_context *ctx = NULL;
  sj_cache_info ci;
  memset(&ci, 0, sizeof ci);
  sj_status cache_st = cli_cache_context(&ctx, &o.common, target);
  char cache_err[512] = "";
  if (cache_st == SJ_OK) {
    cache_st = sj_cache_get_info(ctx, &ci);
    if (cache_st != SJ_OK)
      snprintf(cache_err, sizeof cache_err, "%s",
               sj_context_last_error(ctx));
    else if (!ci.path[0])
      snprintf(cache_err, sizeof cache_err,
               "no cache file is in use (disabled or not openable)");
  } else {
    snprintf(cache_err, sizeof cache_err, "%s", sj_context_create_error());
  }
  const int usable = cache_st == SJ_OK && ci.path[0];

  if (o.common.json) {
    cli_json j;
    cj_init(&j);
    cj_obj_begin(&j, NULL);
    cj_str(&j, "version", sj_version());
    cj_int(&j, "version_number", sj_version_number());
    cj_obj_begin(&j, "nvrtc");
    cj_bool(&j, "found", nv_st == SJ_OK);
    if (nv_st == SJ_OK) {
      char v[32];
      snprintf(v, sizeof v, "%d.%d", nv_major, nv_minor);
      cj_str(&j, "version", v);
      cj_int(&j, "major", nv_major);
      cj_int(&j, "minor", nv_minor);
    } else {
      cj_null(&j, "version");
      cj_str(&j, "error", sj_status_string(nv_st));
    }
    cj_obj_end(&j);
    cj_obj_begin(&j, "driver");
    cj_bool(&j, "found", drv_st == SJ_OK);
    if (drv_st == SJ_OK) {
      cj_int(&j, "version", drv_version);
    } else {
      cj_null(&j, "version");
      cj_str(&j, "error", sj_status_string(drv_st));
    }
    cj_obj_end(&j);
    cj_int(&j, "device_count", n_dev);
    cj_arr_begin(&j, "devices");
    for (int i = 0; i < shown; i++) {
      cj_obj_begin(&j, NULL);
      cj_int(&j, "ordinal", i);
      if (dev_st[i] != SJ_OK) {
        cj_str(&j, "error", sj_status_string(dev_st[i]));
      } else {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", devs[i].cc_major, devs[i].cc_minor);
        cj_str(&j, "name", devs[i].name);
        cj_str(&j, "compute_capability", cc);
        cj_int(&j, "multiprocessors", devs[i].multiprocessors);
        cj_int(&j, "total_memory", (int64_t)devs[i].total_memory);
        cj_str(&j, "target", devs[i].target);
      }
      cj_obj_end(&j);
    }
    cj_arr_end(&j);
    cj_obj_begin(&j, "cache");
    cj_str(&j, "path", ci.path);
    cj_bool(&j, "usable", usable);
    cj_bool(&j, "writable", ci.writable);
    cj_int(&j, "schema_version", ci.schema_version);
    cj_int(&j, "entries", ci.entries);
    cj_int(&j, "bytes", ci.bytes);
    if (!usable)
      cj_str(&j, "error", cache_err);
    cj_obj_end(&j);
    cj_obj_end(&j);
    rc = cj_print(&j) == 0 ? CLI_EXIT_OK : CLI_EXIT_ERROR;
    cj_free(&j);
  } else {
    printf("sagejit      %s\n", sj_version());
    if (nv_st == SJ_OK)
      printf("NVRTC        %d.%d\n", nv_major, nv_minor);
    else
      printf("NVRTC        not found (%s)\n", sj_status_string(nv_st));
    if (drv_st == SJ_OK)
      printf("CUDA driver  %d.%d, %d device%s\n", drv_version / 1000,
             (drv_version % 1000) / 10, n_dev, n_dev == 1 ? "" : "s");
    else
      printf("CUDA driver  none (%s)\n", sj_status_string(drv_st));
    for (int i = 0; i < shown; i++) {
      if (dev_st[i] != SJ_OK) {
        printf("device %d     error: %s\n", i, sj_status_string(dev_st[i]));
        continue;
      }
      char mem[32];
      cli_format_bytes((int64_t)devs[i].total_memory, mem, sizeof mem);
      printf("device %d     %s, compute capability %d.%d, %d SMs, %s, "
             "target %s\n",
             i, devs[i].name, devs[i].cc_major, devs[i].cc_minor,
             devs[i].multiprocessors, mem, devs[i].target);
    }
    if (usable) {
      char b[32];
      cli_format_bytes(ci.bytes, b, sizeof b);
      printf("cache        %s\n", ci.path);
      printf("             %s, schema %d, %lld entr%s, %s\n",
             ci.writable ? "writable" : "read-only", ci.schema_version,
             (long long)ci.entries, ci.entries == 1 ? "y" : "ies", b);
    } else {
      printf("cache        unusable (%s)\n", cache_err);
    }
    fflush(stdout);
    rc = CLI_EXIT_OK;
  }
  sj_context_destroy(ctx);
  return rc;
}
