/*
 * main.c -- `sagejit`: dispatch to the subcommands (one file each).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

typedef struct subcommand {
  const char *name;
  int (*run)(int argc, char **argv);
  const char *summary;
} subcommand;

static const subcommand k_commands[] = {
    {"info", cmd_info, "library, NVRTC, driver, devices and cache"},
    {"warm", cmd_warm, "precompile kernels into the cache"},
    {"cache", cmd_cache,
     "cache maintenance: stats ls verify prune clear export import"},
    {"check", cmd_check, "accuracy self-check against an FP32 reference (GPU)"},
    {"bench", cmd_bench, "throughput and first-call latency (GPU)"},
};
#define N_COMMANDS (sizeof k_commands / sizeof k_commands[0])

static void usage(FILE *f) {
  fputs("Usage: sagejit <command> [options]\n"
        "       sagejit --version | --help\n"
        "       sagejit <command> --help\n\n"
        "JIT-compiled quantized attention: tools for the kernel cache, the\n"
        "devices and the accuracy/throughput of the kernels.\n\n"
        "Commands:\n",
        f);
  for (size_t i = 0; i < N_COMMANDS; i++)
    fprintf(f, "  %-7s %s\n", k_commands[i].name, k_commands[i].summary);
  fputs("\nOptions every command accepts:\n"
        "      --cache-dir DIR   kernel cache directory\n"
        "      --json            one JSON object as the last line of stdout\n"
        "  -q, --quiet           errors only on stderr, no progress\n"
        "  -v, --verbose         library log lines on stderr (-vv: debug)\n"
        "      --no-progress     never draw a progress bar\n"
        "  -h, --help            help for the command\n\n"
        "Results go to stdout; progress and diagnostics to stderr.\n\n"
        "Exit status:\n"
        "  0  success\n"
        "  1  the operation ran but something failed (a kernel failed to\n"
        "     compile, a check case failed its accuracy gate, verify found\n"
        "     corrupt rows)\n"
        "  2  usage error or a missing requirement (bad flags, no GPU for\n"
        "     check/bench, NVRTC missing)\n"
        "  3  library or I/O error (cache unusable, export target exists,\n"
        "     malformed import)\n\n"
        "Environment: SAGEJIT_CACHE_DIR, SAGEJIT_LOG, SAGEJIT_ARCH,\n"
        "SAGEJIT_FAMILY (see docs/cli.md).\n",
        f);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return CLI_EXIT_USAGE;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
    usage(stdout);
    return CLI_EXIT_OK;
  }
  if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
    printf("sagejit %s\n", sj_version());
    if (sj_version_number() != SAGEJIT_VERSION_NUMBER)
      fprintf(stderr,
              "sagejit: warning: built against sagejit.h %s but running "
              "with library %s\n",
              SAGEJIT_VERSION_STRING, sj_version());
    return CLI_EXIT_OK;
  }
  if (!strcmp(name, "help")) {
    if (argc < 3) {
      usage(stdout);
      return CLI_EXIT_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
      if (!strcmp(argv[2], k_commands[i].name)) {
        char help[] = "--help";
        char *args[] = {help, NULL};
        return k_commands[i].run(1, args);
      }
    fprintf(stderr, "sagejit: unknown command '%s'\n", argv[2]);
    return CLI_EXIT_USAGE;
  }
  for (size_t i = 0; i < N_COMMANDS; i++)
    if (!strcmp(name, k_commands[i].name))
      return k_commands[i].run(argc - 2, argv + 2);
  if (name[0] == '-')
    fprintf(stderr, "sagejit: unknown option '%s' (options follow the "
                    "command)\n", name);
  else
    fprintf(stderr, "sagejit: unknown command '%s'\n", name);
  fputs("Try 'sagejit --help'.\n", stderr);
  return CLI_EXIT_USAGE;
}
