/* Mountpoint's fstab style, `s3flash mount BUCKET DIR -o OPTIONS`: OPTIONS is a
 * comma-separated list of mount's flags without their dashes ("allow-delete,uid=1000"),
 * a comma, backslash or double quote inside one escaped with a backslash, as mount-s3
 * reads it (mountpoint-s3/src/fstab.rs): "ro" is --read-only; the options that belong to
 * mount(8) and systemd (auto, noauto, user, nouser, users, _netdev, nofail, rw, nodev,
 * nosuid, x-*) are dropped; a dash, "foreground", "read-only", and "ro" with "rw" are
 * refused. Each "-o OPTIONS" pair of argv is replaced by the flags it spells ("--NAME" or
 * "--NAME=VALUE") before the command line is parsed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *const dropped[] = {"auto", "noauto", "user", "nouser", "users",
                                      "_netdev", "nofail", "rw", "nodev", "nosuid"};

/* One option of the list, unescaped into a malloc'ed "--NAME[=VALUE]" (or NULL when
 * dropped); *s moves past it and its comma. -1 after printing what is wrong. */
static int next_option(const char **s, char **out, int *ro, int *rw) {
    const char *p = *s;
    size_t n = strlen(p);
    char *o = malloc(n + 3);
    *out = NULL;
    if (!o)
        return cli_usage_error(NULL, "out of memory"), -1;
    size_t k = 0;
    memcpy(o, "--", 2);
    char *v = o + 2;
    for (; *p && *p != ','; p++) {
        if (*p == '"') {
            free(o);
            return cli_usage_error(NULL, "mount -o: unexpected '\"' (escape it as \\\")"), -1;
        }
        if (*p == '\\') {
            if (!p[1] || !strchr(",\"\\", p[1])) {
                free(o);
                return cli_usage_error(NULL, "mount -o: a backslash escapes only a comma, a "
                                             "backslash or a double quote"), -1;
            }
            p++;
        }
        v[k++] = *p;
    }
    v[k] = 0;
    *s = *p == ',' ? p + 1 : p;
    if (v[0] == '-' || strcmp(v, "foreground") == 0 || strcmp(v, "read-only") == 0) {
        cli_usage_error(NULL, "mount -o: '%s' is not taken in fstab style (no dashes; no "
                              "foreground; 'ro' instead of read-only)", v);
        free(o);
        return -1;
    }
    *ro |= strcmp(v, "ro") == 0;
    *rw |= strcmp(v, "rw") == 0;
    int drop = k == 0 || strncmp(v, "x-", 2) == 0;
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++)
        drop |= strcmp(v, dropped[i]) == 0;
    *out = NULL;
    if (drop) {
        free(o);
        return 0;
    }
    if (strcmp(v, "ro") == 0) {
        free(o);
        if (!(o = strdup("--read-only")))
            return cli_usage_error(NULL, "out of memory"), -1;
    }
    *out = o;
    return 0;
}

/* the expanded argv, reachable for the process's life (its strings are the options'
 * values), so that a leak checker does not count it */
static char **expanded;

int cli_fstab_expand(int argc, char **argv, int *out_argc, char ***out_argv) {
    *out_argc = argc;
    *out_argv = argv;
    int mount = 0, n_o = 0;
    for (int i = 1; i < argc; i++) {
        mount |= strcmp(argv[i], "mount") == 0;
        n_o += strcmp(argv[i], "-o") == 0 && i + 1 < argc;
    }
    if (!mount || !n_o)
        return CLI_EXIT_OK; /* the parser says what it thinks of a -o elsewhere */
    size_t cap = (size_t)argc + 1;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "-o") == 0 && i + 1 < argc)
            cap += strlen(argv[i + 1]) + 1; /* at most one option per character */
    char **nv = expanded = calloc(cap, sizeof(*nv));
    if (!nv)
        return cli_usage_error(NULL, "out of memory");
    int nc = 0, ro = 0, rw = 0;
    for (int i = 0; i < argc; i++) {
        if (i == 0 || strcmp(argv[i], "-o") != 0 || i + 1 >= argc) {
            nv[nc++] = argv[i];
            continue;
        }
        for (const char *s = argv[++i]; *s || s == argv[i];) {
            char *opt;
            if (next_option(&s, &opt, &ro, &rw) != 0)
                return CLI_EXIT_USAGE;
            if (opt)
                nv[nc++] = opt;
            if (!*s)
                break;
        }
    }
    if (ro && rw)
        return cli_usage_error(NULL, "mount -o: 'ro' and 'rw' exclude each other");
    nv[nc] = NULL;
    *out_argc = nc;
    *out_argv = nv;
    return CLI_EXIT_OK;
}
