/* The request options of the CLI (--sse, --sse-kms-key-id, --sse-c, --storage-class,
 * --expected-bucket-owner, --acl, --user-agent-extra, --aws-max-attempts): checked before
 * the command runs and handed to the library's client options. An SSE-C key is never taken
 * from argv (every user of the machine can read it there: ps, /proc/PID/cmdline): only
 * from a file (fileb://PATH, as aws-cli spells it) or the environment. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* base64 of the 32 bytes of a key (the library checks what it is given) */
static void base64_32(const unsigned char in[32], char out[64]) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < 32; i += 3) {
        unsigned v = (unsigned)in[i] << 16 | (i + 1 < 32 ? (unsigned)in[i + 1] << 8 : 0) |
                     (i + 2 < 32 ? in[i + 2] : 0);
        out[o++] = a[v >> 18 & 63];
        out[o++] = a[v >> 12 & 63];
        out[o++] = i + 1 < 32 ? a[v >> 6 & 63] : '=';
        out[o++] = i + 2 < 32 ? a[v & 63] : '=';
    }
    out[o] = '\0';
}

/* A key file: its 32 bytes, or their base64 (surrounding whitespace ignored). */
static int read_key_file(const struct cli_command *cmd, const char *opt, const char *path,
                         char out[64]) {
    unsigned char buf[80];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_usage_error(cmd, "%s: cannot open %s: %s", opt, path, strerror(errno));
    ssize_t n = 0, r;
    while (n < (ssize_t)sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - (size_t)n)) > 0)
        n += r;
    close(fd);
    int rc = CLI_EXIT_OK;
    if (n == 32) {
        base64_32(buf, out);
    } else {
        ssize_t s = 0, e = n;
        while (s < e && strchr(" \t\r\n", buf[s]))
            s++;
        while (e > s && strchr(" \t\r\n", buf[e - 1]))
            e--;
        if (e - s != 44)
            rc = cli_usage_error(cmd, "%s: %s holds %zd bytes; an SSE-C key file holds the "
                                 "key's 32 bytes, or their base64 (44 characters)",
                                 opt, path, n);
        else
            memcpy(out, buf + s, 44), out[44] = '\0';
    }
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

/* An SSE-C key: --OPT fileb://PATH (or file://PATH), else the environment variable. */
static int read_key(const struct cli_ctx *ctx, int alg_opt, int key_opt, const char *alg_name,
                    const char *key_name, const char *env_name, char out[64]) {
    const struct cli_args *a = ctx->args;
    const char *alg = a->value[alg_opt], *spec = a->value[key_opt];
    out[0] = '\0';
    if (spec && strncmp(spec, "fileb://", 8) != 0 && strncmp(spec, "file://", 7) != 0)
        return cli_usage_error(ctx->cmd, "--%s takes fileb://PATH, a file holding the key; "
                               "the key itself is never taken from the command line (any "
                               "user can read it there): put it in a file, or in %s "
                               "(base64)", key_name, env_name);
    if (!alg) {
        if (spec)
            return cli_usage_error(ctx->cmd, "--%s needs --%s AES256", key_name, alg_name);
        return CLI_EXIT_OK;
    }
    if (strcmp(alg, "AES256") != 0)
        return cli_usage_error(ctx->cmd, "--%s takes AES256, not '%s'", alg_name, alg);
    if (spec)
        return read_key_file(ctx->cmd, key_opt == OPT_SSE_C_KEY ? "--sse-c-key"
                                                                : "--sse-c-copy-source-key",
                             strchr(spec, ':') + 3, out);
    const char *v = getenv(env_name);
    if (!v || !*v)
        return cli_usage_error(ctx->cmd, "--%s AES256 needs the key: --%s fileb://PATH or %s "
                               "(base64)", alg_name, key_name, env_name);
    if (strlen(v) >= 64)
        return cli_usage_error(ctx->cmd, "%s must be the base64 of a 32-byte key (44 "
                               "characters)", env_name);
    snprintf(out, 64, "%s", v);
    return CLI_EXIT_OK;
}

int cli_request_options_read(struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    if (a->value[OPT_SSE] && a->value[OPT_SSE_C])
        return cli_usage_error(ctx->cmd, "--sse and --sse-c exclude each other");
    int rc = read_key(ctx, OPT_SSE_C, OPT_SSE_C_KEY, "sse-c", "sse-c-key", "S3FLASH_SSE_C_KEY",
                      ctx->req.sse_c_key);
    if (rc == CLI_EXIT_OK)
        rc = read_key(ctx, OPT_SSE_C_COPY_SOURCE, OPT_SSE_C_COPY_SOURCE_KEY, "sse-c-copy-source",
                      "sse-c-copy-source-key", "S3FLASH_SSE_C_COPY_SOURCE_KEY",
                      ctx->req.copy_source_key);
    if (rc != CLI_EXIT_OK)
        return rc;
    const char *sse = a->value[OPT_SSE];
    if (sse && strcmp(sse, "AES256") != 0 && strcmp(sse, "aws:kms") != 0 &&
        strcmp(sse, "aws:kms:dsse") != 0)
        return cli_usage_error(ctx->cmd, "--sse takes AES256, aws:kms or aws:kms:dsse, not '%s'",
                               sse);
    bool kms = sse && strncmp(sse, "aws:kms", 7) == 0;
    if (!kms && (a->value[OPT_SSE_KMS_KEY_ID] || a->value[OPT_SSE_KMS_CONTEXT] ||
                 a->set[OPT_BUCKET_KEY]))
        return cli_usage_error(ctx->cmd, "--sse-kms-key-id, --sse-kms-encryption-context and "
                               "--bucket-key-enabled need --sse aws:kms or aws:kms:dsse");
    if (a->value[OPT_MAX_ATTEMPTS]) {
        char *end;
        long n = strtol(a->value[OPT_MAX_ATTEMPTS], &end, 10);
        if (end == a->value[OPT_MAX_ATTEMPTS] || *end || n < 1 || n > 100)
            return cli_usage_error(ctx->cmd, "--aws-max-attempts takes a number from 1 to 100, "
                                   "not '%s'", a->value[OPT_MAX_ATTEMPTS]);
        ctx->req.max_attempts = (int)n;
    }
    return CLI_EXIT_OK;
}

void cli_request_options_apply(const struct cli_ctx *ctx, struct s3f_client_options *opts) {
    const struct cli_args *a = ctx->args;
    opts->sse = a->value[OPT_SSE];
    opts->sse_kms_key_id = a->value[OPT_SSE_KMS_KEY_ID];
    opts->sse_kms_encryption_context = a->value[OPT_SSE_KMS_CONTEXT];
    opts->sse_bucket_key_enabled = a->set[OPT_BUCKET_KEY] ? 1 : 0;
    opts->sse_customer_key = ctx->req.sse_c_key[0] ? ctx->req.sse_c_key : NULL;
    /* as aws-cli: a copy's source has a key only with --sse-c-copy-source */
    opts->sse_copy_source_customer_key = ctx->req.copy_source_key;
    opts->storage_class = a->value[OPT_STORAGE_CLASS];
    opts->expected_bucket_owner = a->value[OPT_EXPECTED_OWNER];
    opts->acl = a->value[OPT_ACL];
    opts->user_agent_extra = a->value[OPT_USER_AGENT_EXTRA];
    if (ctx->req.max_attempts)
        opts->max_attempts = ctx->req.max_attempts;
}

void cli_request_options_wipe(struct cli_ctx *ctx) {
    explicit_bzero(&ctx->req, sizeof(ctx->req));
}
