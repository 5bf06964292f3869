/*
 * compile.c -- spec -> cache key, and spec -> image through NVRTC.
 *
 * Every program is the same translation unit (sj_kernels.cu, with the other
 * templates as in-memory headers) plus one name expression that selects the
 * instantiation; NVRTC reports the lowered (mangled) name to look up later.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "key.h"

#define MAX_OPTS 16

/* What keying and compiling a spec both need: the sources, NVRTC, the name
 * expression and the options (optp points into opts). */
typedef struct prepared {
  const sj_sources *src;
  const sj_nvrtc_api *nv;
  char name[256];
  char opts[MAX_OPTS][64];
  const char *optp[MAX_OPTS];
  int n_opts;
} prepared;

static sj_status prepare(const sj_spec *s, const sj_target *t, prepared *pr,
                         char *msg, size_t msg_size) {
  const char *why = NULL;
  if (sj_sources_get(&pr->src, &why) != SJ_OK) {
    snprintf(msg, msg_size, "kernel templates unavailable: %s", why);
    return SJ_ERR_INTERNAL;
  }
  if (sj_nvrtc_load(&pr->nv, &why) != SJ_OK) {
    snprintf(msg, msg_size, "%s", why);
    return SJ_ERR_NO_NVRTC;
  }
  if (sj_spec_name(s, pr->name, sizeof pr->name) != 0) {
    snprintf(msg, msg_size, "kernel name too long");
    return SJ_ERR_INTERNAL;
  }
  pr->n_opts = sj_spec_options(s, t, pr->opts, MAX_OPTS);
  for (int i = 0; i < pr->n_opts; i++)
    pr->optp[i] = pr->opts[i];
  return SJ_OK;
}

sj_status sj_spec_key(const sj_spec *s, const sj_target *t, sj_key *out,
                      char *msg, size_t msg_size) {
  prepared pr;
  SJ_FORWARD(prepare(s, t, &pr, msg, msg_size));
  sj_key_input in;
  memset(&in, 0, sizeof in);
  in.library_version = SAGEJIT_VERSION_STRING;
  memcpy(in.template_hash, pr.src->hash, 16);
  in.name_expr = pr.name;
  in.nvrtc_major = pr.nv->major;
  in.nvrtc_minor = pr.nv->minor;
  in.options = pr.optp;
  in.n_options = (size_t)pr.n_opts;
  in.target = t->name;
  if (sj_key_make(&in, out) != 0) {
    snprintf(msg, msg_size, "out of memory building a cache key");
    return SJ_ERR_OUT_OF_MEMORY;
  }
  return SJ_OK;
}

void sj_compiled_free(sj_compiled *c) {
  if (!c)
    return;
  free(c->image);
  free(c->lowered);
  free(c->log);
  memset(c, 0, sizeof *c);
}

static char *program_log(const sj_nvrtc_api *nv, nvrtcProgram_ prog) {
  size_t n = 0;
  if (nv->GetProgramLogSize(prog, &n) != 0 || n <= 1)
    return NULL;
  char *log = malloc(n);
  if (log && nv->GetProgramLog(prog, log) != 0) {
    free(log);
    return NULL;
  }
  return log;
}

sj_status sj_compile(const sj_spec *s, const sj_target *t, sj_compiled *out,
                     char *msg, size_t msg_size) {
  return sj_compile_opt(s, t, NULL, out, msg, msg_size);
}

sj_status sj_compile_opt(const sj_spec *s, const sj_target *t,
                         const char *extra, sj_compiled *out, char *msg,
                         size_t msg_size) {
  memset(out, 0, sizeof *out);
  prepared pr;
  SJ_FORWARD(prepare(s, t, &pr, msg, msg_size));
  if (extra && pr.n_opts < MAX_OPTS)
    pr.optp[pr.n_opts++] = extra;
  const sj_sources *src = pr.src;
  const sj_nvrtc_api *nv = pr.nv;
  const char *name = pr.name;

  /* main source + headers */
  const char *main_src = NULL;
  const char *hdr_src[32], *hdr_name[32];
  int nh = 0;
  for (unsigned i = 0; i < src->count && nh < 32; i++) {
    if (!strcmp(src->files[i].name, src->main_name)) {
      main_src = src->files[i].data;
    } else {
      hdr_src[nh] = src->files[i].data;
      hdr_name[nh] = src->files[i].name;
      nh++;
    }
  }
  if (!main_src) {
    snprintf(msg, msg_size, "embedded templates lack %s", src->main_name);
    return SJ_ERR_INTERNAL;
  }

  const double t0 = sj_now_ms();
  nvrtcProgram_ prog = NULL;
  int r = nv->CreateProgram(&prog, main_src, src->main_name, nh, hdr_src,
                            hdr_name);
  if (r != 0) {
    snprintf(msg, msg_size, "nvrtcCreateProgram: %s", nv->GetErrorString(r));
    return r == 1 ? SJ_ERR_OUT_OF_MEMORY : SJ_ERR_COMPILE;
  }
  sj_status st = SJ_OK;
  r = nv->AddNameExpression(prog, name);
  if (r == 0)
    r = nv->CompileProgram(prog, pr.n_opts, pr.optp);
  out->log = program_log(nv, prog);
  if (r != 0) {
    /* First line of the log is usually the useful one. */
    char first[512] = "";
    if (out->log) {
      const char *e = strstr(out->log, "error");
      sj_strlcpy(first, e ? e : out->log, sizeof first);
      char *nl = strchr(first, '\n');
      if (nl)
        *nl = 0;
    }
    snprintf(msg, msg_size, "NVRTC failed to compile %s for %s: %s%s%s", name,
             t->name, nv->GetErrorString(r), first[0] ? ": " : "", first);
    st = SJ_ERR_COMPILE;
    goto done;
  }
  const char *lowered = NULL;
  if (nv->GetLoweredName(prog, name, &lowered) != 0 || !lowered) {
    snprintf(msg, msg_size, "NVRTC gave no lowered name for %s", name);
    st = SJ_ERR_COMPILE;
    goto done;
  }
  out->lowered = strdup(lowered);
  size_t size = 0;
  out->is_ptx = t->is_ptx;
  r = t->is_ptx ? nv->GetPTXSize(prog, &size) : nv->GetCUBINSize(prog, &size);
  if (r != 0 || size == 0 || !out->lowered) {
    snprintf(msg, msg_size, "NVRTC produced no %s for %s",
             t->is_ptx ? "PTX" : "cubin", name);
    st = SJ_ERR_COMPILE;
    goto done;
  }
  out->image = malloc(size + 1);
  if (!out->image) {
    st = SJ_ERR_OUT_OF_MEMORY;
    snprintf(msg, msg_size, "out of memory");
    goto done;
  }
  r = t->is_ptx ? nv->GetPTX(prog, out->image) : nv->GetCUBIN(prog, out->image);
  if (r != 0) {
    snprintf(msg, msg_size, "NVRTC failed to return the image of %s", name);
    st = SJ_ERR_COMPILE;
    goto done;
  }
  ((char *)out->image)[size] = 0;
  /* PTX size from NVRTC includes its NUL; the stored size excludes it. */
  out->size = t->is_ptx ? strlen(out->image) : size;
done:
  nv->DestroyProgram(&prog);
  out->ms = sj_now_ms() - t0;
  if (st != SJ_OK) {
    char *keep = out->log;
    out->log = NULL;
    sj_compiled_free(out);
    out->log = keep;
  }
  return st;
}
