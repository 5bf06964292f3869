/* templates.h -- the kernel templates embedded at build time. */
#ifndef SJ_TEMPLATES_H
#define SJ_TEMPLATES_H

typedef struct sj_template_file {
  const char *name;
  const char *data; /* NUL-terminated */
  unsigned long size;
} sj_template_file;

extern const sj_template_file sj_templates[];
extern const unsigned sj_template_count;

#endif
