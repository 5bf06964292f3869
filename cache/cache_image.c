/*
 * cache_image.c -- is this image what its row says it is?
 *
 * sj_image_check() is the last gate before bytes leave the cache: a cubin
 * must be a well-formed-enough CUDA ELF for the SM of the target, a PTX
 * image a NUL-free text whose .target line names the target.  It reads only
 * the headers; the checksum (checked elsewhere) covers the rest.
 *
 * CUDA ELF e_flags, as found by compiling kernels with NVRTC 13.0 for every
 * target from sm_75 to sm_121f and reading the headers:
 *
 *   EI_ABIVERSION 8 (EI_OSABI 0x41; CUDA 13 writes this for every target):
 *     bits  8..15  SM number (0x50 sm_80, 0x5a sm_90, 0x64 sm_100,
 *                  0x67 sm_103, 0x6e sm_110, 0x78 sm_120, 0x79 sm_121)
 *     bit   3      0x8, EF_CUDA_ACCELERATORS: the 'a' variant.  NVRTC 13.0
 *                  leaves it clear even for sm_90a/sm_100a/sm_120a (also
 *                  with 'a'-only instructions); 'a' is then visible only in
 *                  the .nv.compat section.  sm_X, sm_Xa and sm_Xf give the
 *                  same e_flags, e.g. 0x06005a04 for sm_90 and sm_90a and
 *                  0x06007802 for sm_120, sm_120a and sm_120f.
 *     bits 24..31  0x06 (meaning unknown), low byte 0x04 below sm_100 and
 *                  0x02 from sm_100 on.
 *   EI_ABIVERSION 7 and older (EI_OSABI 0x33; CUDA 12 and before):
 *     bits  0..7   SM number (EF_CUDA_SM)
 *     bit   8/10   texture mode unified / 64-bit addresses (0x100, 0x400)
 *     bit   11     0x800, EF_CUDA_ACCELERATORS_V1: the 'a' variant
 *     bits 16..23  virtual SM of the PTX it came from
 *
 * So the check is strict on the SM number in both layouts.  The 'a' flag is
 * checked one way only: a header that carries it needs an 'a' target, but
 * its absence proves nothing (CUDA 13 never sets it).
 */
#include <stdint.h>
#include <string.h>

#include "cache_impl.h"

enum {
  ELF_HEADER_SIZE = 64,
  ELF_SHDR_SIZE = 64,
  ELF_PHDR_SIZE = 56,
  EM_CUDA = 190
};

typedef struct target_id {
  int compute;    /* "compute_" (PTX) rather than "sm_" */
  unsigned sm;    /* 90 for sm_90a */
  char suffix[4]; /* "a", "f" or "" */
} target_id;

/* Parses "sm_<digits>[suffix]" or "compute_<digits>[suffix]". */
static int parse_target(const char *t, size_t len, target_id *out) {
  memset(out, 0, sizeof *out);
  size_t pos;
  if (len > 3 && memcmp(t, "sm_", 3) == 0) {
    pos = 3;
  } else if (len > 8 && memcmp(t, "compute_", 8) == 0) {
    pos = 8;
    out->compute = 1;
  } else {
    return -1;
  }
  size_t digits = 0;
  while (pos < len && t[pos] >= '0' && t[pos] <= '9' && digits < 5) {
    out->sm = out->sm * 10 + (unsigned)(t[pos] - '0');
    pos++;
    digits++;
  }
  if (digits == 0 || digits == 5)
    return -1;
  size_t n = 0;
  while (pos < len && t[pos] >= 'a' && t[pos] <= 'z') {
    if (n + 1 >= sizeof out->suffix)
      return -1;
    out->suffix[n++] = t[pos++];
  }
  return pos == len ? 0 : -1;
}

static uint16_t le16(const uint8_t *p) {
  return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16;
}

static uint64_t le64(const uint8_t *p) {
  return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* off + n * ent <= size, without overflow. */
static int table_fits(uint64_t off, uint64_t n, uint64_t ent, size_t size) {
  if (off > size)
    return 0;
  return n <= (size - off) / ent;
}

static int elf_layout_ok(const uint8_t *h, size_t size) {
  static const uint8_t magic[4] = {0x7f, 'E', 'L', 'F'};
  if (size < ELF_HEADER_SIZE || memcmp(h, magic, 4) != 0)
    return 0;
  if (h[4] != 2 /* ELFCLASS64 */ || h[5] != 1 /* ELFDATA2LSB */ ||
      h[6] != 1 /* EV_CURRENT */)
    return 0;
  if (le16(h + 18) != EM_CUDA || le16(h + 52) != ELF_HEADER_SIZE)
    return 0;
  uint64_t shoff = le64(h + 40), phoff = le64(h + 32);
  uint16_t shnum = le16(h + 60), phnum = le16(h + 56);
  if (shnum == 0 || le16(h + 58) != ELF_SHDR_SIZE || shoff < ELF_HEADER_SIZE ||
      !table_fits(shoff, shnum, ELF_SHDR_SIZE, size))
    return 0;
  if (le16(h + 62) >= shnum) /* e_shstrndx */
    return 0;
  if (phnum != 0 && (le16(h + 54) != ELF_PHDR_SIZE || phoff < ELF_HEADER_SIZE ||
                     !table_fits(phoff, phnum, ELF_PHDR_SIZE, size)))
    return 0;
  return 1;
}

static int cubin_check(const uint8_t *h, size_t size, const target_id *t) {
  if (t->compute || !elf_layout_ok(h, size))
    return -1;
  uint32_t flags = le32(h + 48);
  unsigned sm;
  int accel;
  if (h[8] >= 8) { /* EI_ABIVERSION */
    sm = (flags >> 8) & 0xff;
    accel = (flags & 0x8) != 0;
  } else {
    sm = flags & 0xff;
    accel = (flags & 0x800) != 0;
  }
  if (sm != t->sm)
    return -1;
  if (accel && strcmp(t->suffix, "a") != 0)
    return -1;
  return 0;
}

static int is_space(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f' || ch == '\v';
}

/* The span of the first ".target" directive's first argument. */
static int ptx_target(const char *p, size_t size, const char **arg,
                      size_t *arg_len) {
  size_t pos = 0;
  while (pos < size) {
    const char *nl = memchr(p + pos, '\n', size - pos);
    size_t end = nl ? (size_t)(nl - p) : size;
    size_t i = pos;
    while (i < end && is_space(p[i]))
      i++;
    if (end - i > 7 && memcmp(p + i, ".target", 7) == 0 && is_space(p[i + 7])) {
      i += 7;
      while (i < end && is_space(p[i]))
        i++;
      size_t j = i;
      while (j < end && !is_space(p[j]) && p[j] != ',' && p[j] != '/')
        j++;
      *arg = p + i;
      *arg_len = j - i;
      return 0;
    }
    pos = end + 1;
  }
  return -1;
}

static int ptx_check(const char *p, size_t size, const target_id *t) {
  if (memchr(p, 0, size))
    return -1;
  const char *arg;
  size_t len;
  target_id got;
  if (ptx_target(p, size, &arg, &len) != 0 || parse_target(arg, len, &got))
    return -1;
  if (got.sm != t->sm || strcmp(got.suffix, t->suffix) != 0)
    return -1;
  return 0;
}

int sj_image_check(const void *image, size_t size, sj_image_kind kind,
                   const char *target) {
  target_id t;
  if (!image || size == 0 || !target ||
      parse_target(target, strlen(target), &t) != 0)
    return -1;
  switch (kind) {
  case SJ_IMAGE_CUBIN:
    return cubin_check(image, size, &t);
  case SJ_IMAGE_PTX:
    return ptx_check(image, size, &t);
  }
  return -1;
}

const char *sjc_kind_name(sj_image_kind k) {
  return k == SJ_IMAGE_PTX ? "ptx" : "cubin";
}

int sjc_kind_parse(const char *s, sj_image_kind *out) {
  if (s && strcmp(s, "cubin") == 0) {
    *out = SJ_IMAGE_CUBIN;
    return 0;
  }
  if (s && strcmp(s, "ptx") == 0) {
    *out = SJ_IMAGE_PTX;
    return 0;
  }
  return -1;
}
