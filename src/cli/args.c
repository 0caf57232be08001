/* Command-line parsing and help texts of the s3flash tool. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

const struct cli_opt_spec cli_global_opts[] = {
    {"endpoint-url", 0, 1, OPT_ENDPOINT_URL, "URL",
     "S3 endpoint, e.g. http://127.0.0.1:7480 (default: AWS_ENDPOINT_URL_S3, "
     "AWS_ENDPOINT_URL, the profile, else AWS)"},
    {"region", 0, 1, OPT_REGION, "REGION", "signing region (default: AWS_REGION, the profile, "
                                           "else us-east-1)"},
    {"profile", 0, 1, OPT_PROFILE, "NAME", "profile of ~/.aws/config and ~/.aws/credentials"},
    {"no-sign-request", 0, 0, OPT_NO_SIGN_REQUEST, NULL,
     "send anonymous requests; do not look for credentials"},
    {"request-payer", 0, 1, OPT_REQUEST_PAYER, "requester",
     "pay for the requests to a Requester Pays bucket (x-amz-request-payer)"},
    {"force-path-style", 0, 0, OPT_FORCE_PATH_STYLE, NULL,
     "address buckets as http://host/bucket/key (also S3FLASH_FORCE_PATH_STYLE=1)"},
    {"sse", 0, 1, OPT_SSE, "MODE",
     "server-side encryption of the objects written: AES256, aws:kms or aws:kms:dsse "
     "(x-amz-server-side-encryption)"},
    {"sse-kms-key-id", 0, 1, OPT_SSE_KMS_KEY_ID, "ID", "KMS key of --sse aws:kms[:dsse]"},
    {"sse-kms-encryption-context", 0, 1, OPT_SSE_KMS_CONTEXT, "JSON",
     "KMS encryption context, a JSON object of strings"},
    {"bucket-key-enabled", 0, 0, OPT_BUCKET_KEY, NULL, "use an S3 Bucket Key for SSE-KMS"},
    {"sse-c", 0, 1, OPT_SSE_C, "AES256",
     "objects read and written are encrypted with a customer-provided key (SSE-C)"},
    {"sse-c-key", 0, 1, OPT_SSE_C_KEY, "fileb://PATH",
     "the SSE-C key: a file of its 32 bytes (or their base64); else S3FLASH_SSE_C_KEY "
     "(base64). Never the key itself"},
    {"sse-c-copy-source", 0, 1, OPT_SSE_C_COPY_SOURCE, "AES256",
     "the source of an S3-to-S3 copy is SSE-C encrypted"},
    {"sse-c-copy-source-key", 0, 1, OPT_SSE_C_COPY_SOURCE_KEY, "fileb://PATH",
     "its key (as --sse-c-key; else S3FLASH_SSE_C_COPY_SOURCE_KEY)"},
    {"storage-class", 0, 1, OPT_STORAGE_CLASS, "CLASS",
     "storage class of the objects written (x-amz-storage-class)"},
    {"expected-bucket-owner", 0, 1, OPT_EXPECTED_OWNER, "ACCOUNT",
     "fail unless this account owns the bucket (x-amz-expected-bucket-owner)"},
    {"acl", 0, 1, OPT_ACL, "ACL", "canned ACL of the objects written, e.g. "
                                  "bucket-owner-full-control (x-amz-acl)"},
    {"user-agent-extra", 0, 1, OPT_USER_AGENT_EXTRA, "TEXT",
     "appended to the User-Agent of every request"},
    {"aws-max-attempts", 0, 1, OPT_MAX_ATTEMPTS, "N",
     "attempts per request, 1 to 100 (default: AWS_MAX_ATTEMPTS, the profile, else 3)"},
    {"debug", 'd', 0, OPT_DEBUG, NULL, "log every request and response to stderr"},
    {"quiet", 'q', 0, OPT_QUIET, NULL, "do not print what is being done"},
    {"help", 'h', 0, OPT_HELP, NULL, "show help and exit"},
    {"version", 0, 0, OPT_VERSION, NULL, "show the version and exit"},
    {NULL, 0, 0, OPT_NONE, NULL, NULL},
};

static const struct cli_opt_spec *find_long(const struct cli_opt_spec *specs, const char *name,
                                            size_t name_len) {
    for (const struct cli_opt_spec *s = specs; s && s->long_name; s++)
        if (strlen(s->long_name) == name_len && memcmp(s->long_name, name, name_len) == 0)
            return s;
    return NULL;
}

static const struct cli_opt_spec *find_short(const struct cli_opt_spec *specs, char c) {
    for (const struct cli_opt_spec *s = specs; s && s->long_name; s++)
        if (s->short_name && s->short_name == c)
            return s;
    return NULL;
}

static const struct cli_command *find_command(const struct cli_command *commands,
                                              const char *name) {
    for (const struct cli_command *c = commands; c->name; c++)
        if (strcmp(c->name, name) == 0)
            return c;
    return NULL;
}

/* Is `name` an option of some command (to give a better message when it comes too early)? */
static int is_command_option(const struct cli_command *commands, const char *name, size_t len) {
    for (const struct cli_command *c = commands; c->name; c++)
        if (find_long(c->opts, name, len))
            return 1;
    return 0;
}

int cli_usage_error(const struct cli_command *cmd, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (cmd)
        fprintf(stderr, "s3flash: %s (try 's3flash %s --help')\n", msg, cmd->name);
    else
        fprintf(stderr, "s3flash: %s (try 's3flash --help')\n", msg);
    return CLI_EXIT_USAGE;
}

/* Count an option and keep its value; --exclude/--include are also kept in order. -1 when
 * there are more filters than struct cli_filter holds. */
static int record(struct cli_args *out, const struct cli_opt_spec *spec, const char *value) {
    out->set[spec->id]++;
    if (spec->takes_value)
        out->value[spec->id] = value;
    if (spec->id == OPT_EXCLUDE || spec->id == OPT_INCLUDE)
        return cli_filter_add(&out->filter, spec->id == OPT_INCLUDE, value);
    if (spec->id == OPT_BIND) {
        if (out->n_bind >= CLI_BIND_MAX)
            return -1;
        out->bind[out->n_bind++] = value;
    }
    return 0;
}

static int too_many(const struct cli_command *cmd, const struct cli_opt_spec *spec) {
    if (spec->id == OPT_BIND)
        return cli_usage_error(cmd, "too many --bind (at most %d)", CLI_BIND_MAX);
    return cli_usage_error(cmd, "too many --exclude/--include (at most %d)", CLI_FILTER_MAX);
}

int cli_args_parse(int argc, char **argv, const struct cli_command *commands,
                   struct cli_args *out, const struct cli_command **cmd) {
    memset(out, 0, sizeof(*out));
    *cmd = NULL;
    int end_of_opts = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!end_of_opts && strcmp(a, "--") == 0) {
            end_of_opts = 1;
            continue;
        }
        if (!end_of_opts && a[0] == '-' && a[1] == '-') {
            const char *name = a + 2;
            const char *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            const struct cli_opt_spec *spec = find_long(cli_global_opts, name, len);
            if (!spec && *cmd)
                spec = find_long((*cmd)->opts, name, len);
            if (!spec) {
                if (!*cmd && is_command_option(commands, name, len))
                    return cli_usage_error(NULL, "option '--%.*s' must come after the command",
                                           (int)len, name);
                return cli_usage_error(*cmd, "unknown option '--%.*s'", (int)len, name);
            }
            const char *value = NULL;
            if (spec->takes_value) {
                if (eq) {
                    value = eq + 1;
                } else if (i + 1 < argc) {
                    value = argv[++i];
                } else {
                    return cli_usage_error(*cmd, "option '--%s' needs a value (%s)",
                                           spec->long_name, spec->value_name);
                }
            } else if (eq) {
                return cli_usage_error(*cmd, "option '--%s' takes no value", spec->long_name);
            }
            if (record(out, spec, value) != 0)
                return too_many(*cmd, spec);
            continue;
        }
        if (!end_of_opts && a[0] == '-' && a[1] != '\0') {
            /* short options, possibly bundled ("-rq"); a value option takes the rest of
             * the word or the next argument */
            for (const char *p = a + 1; *p; p++) {
                const struct cli_opt_spec *spec = find_short(cli_global_opts, *p);
                if (!spec && *cmd)
                    spec = find_short((*cmd)->opts, *p);
                if (!spec)
                    return cli_usage_error(*cmd, "unknown option '-%c'", *p);
                const char *value = NULL;
                if (spec->takes_value) {
                    if (p[1]) {
                        value = p + 1;
                    } else if (i + 1 < argc) {
                        value = argv[++i];
                    } else {
                        return cli_usage_error(*cmd, "option '-%c' needs a value (%s)", *p,
                                               spec->value_name);
                    }
                    if (record(out, spec, value) != 0)
                        return too_many(*cmd, spec);
                    break;
                }
                record(out, spec, NULL);
            }
            continue;
        }
        /* a positional argument */
        if (!out->command) {
            out->command = a;
            *cmd = find_command(commands, a);
            if (!*cmd)
                return cli_usage_error(NULL, "unknown command '%s'", a);
            continue;
        }
        if (out->n_pos >= CLI_MAX_POSITIONALS)
            return cli_usage_error(*cmd, "too many arguments");
        out->pos[out->n_pos++] = a;
    }
    return CLI_EXIT_OK;
}

static void print_opts(FILE *fp, const struct cli_opt_spec *specs) {
    for (const struct cli_opt_spec *s = specs; s && s->long_name; s++) {
        char left[64];
        int n;
        if (s->short_name)
            n = snprintf(left, sizeof(left), "-%c, --%s", s->short_name, s->long_name);
        else
            n = snprintf(left, sizeof(left), "    --%s", s->long_name);
        if (s->takes_value && n > 0 && (size_t)n < sizeof(left))
            snprintf(left + n, sizeof(left) - (size_t)n, " %s", s->value_name);
        fprintf(fp, "  %-26s %s\n", left, s->help);
    }
}

void cli_print_help(void *fpv, const struct cli_command *commands,
                    const struct cli_command *cmd) {
    FILE *fp = fpv;
    if (!cmd) {
        fprintf(fp, "usage: s3flash [OPTIONS] COMMAND [ARGS...]\n\n"
                    "Move data between local files and S3-compatible object storage.\n\n"
                    "Commands:\n");
        for (const struct cli_command *c = commands; c->name; c++)
            fprintf(fp, "  %-10s %s\n", c->name, c->summary);
        fprintf(fp, "\nGlobal options (before or after the command):\n");
        print_opts(fp, cli_global_opts);
        fprintf(fp, "\nRun 's3flash COMMAND --help' for the options of a command.\n"
                    "Exit status: 0 success, 1 the operation failed, 2 usage error.\n");
        return;
    }
    fprintf(fp, "usage: s3flash %s %s\n\n%s\n", cmd->name, cmd->synopsis, cmd->summary);
    if (cmd->description)
        fprintf(fp, "\n%s\n", cmd->description);
    if (cmd->opts && cmd->opts->long_name) {
        fprintf(fp, "\nOptions:\n");
        print_opts(fp, cmd->opts);
    }
    fprintf(fp, "\nGlobal options:\n");
    print_opts(fp, cli_global_opts);
}
