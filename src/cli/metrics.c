/* --metrics-listen, --metrics-allow-remote, --log-metrics, --metrics-linger, --otlp-endpoint
 * and --otlp-export-interval: the library's metrics exporter (s3f_metrics_exporter_*) on the
 * client's registry. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define LOG_INTERVAL_MS 5000
#define LINGER_MAX_S 86400
#define OTLP_INTERVAL_MAX_S 86400

/* A whole number of seconds, min..max; 0 when the option is not given, -1 when bad. */
static long seconds_option(const struct cli_ctx *ctx, int opt, long min, long max) {
    const char *v = ctx->args->value[opt];
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long s = strtol(v, &end, 10);
    return !*v || *end || errno || s < min || s > max ? -1 : s;
}

static long otlp_interval_s(const struct cli_ctx *ctx) {
    return seconds_option(ctx, OPT_OTLP_EXPORT_INTERVAL, 1, OTLP_INTERVAL_MAX_S);
}

uint32_t cli_otlp_interval_ms(const struct cli_ctx *ctx) {
    long s = otlp_interval_s(ctx);
    return s > 0 ? (uint32_t)s * 1000u : 0;
}

static long linger_seconds(const struct cli_ctx *ctx) {
    return seconds_option(ctx, OPT_METRICS_LINGER, 0, LINGER_MAX_S);
}

int cli_metrics_options_check(const struct cli_ctx *ctx) {
    const struct cli_args *a = ctx->args;
    if (linger_seconds(ctx) < 0)
        return cli_usage_error(ctx->cmd, "--metrics-linger takes whole seconds, 0 to %d, not '%s'",
                               LINGER_MAX_S, a->value[OPT_METRICS_LINGER]);
    if (otlp_interval_s(ctx) < 0)
        return cli_usage_error(ctx->cmd, "--otlp-export-interval takes whole seconds, 1 to %d, "
                               "not '%s'", OTLP_INTERVAL_MAX_S,
                               a->value[OPT_OTLP_EXPORT_INTERVAL]);
    if (a->set[OPT_OTLP_EXPORT_INTERVAL] && !a->value[OPT_OTLP_ENDPOINT])
        return cli_usage_error(ctx->cmd, "--otlp-export-interval needs --otlp-endpoint");
    if (a->set[OPT_METRICS_ALLOW_REMOTE] && !a->value[OPT_METRICS_LISTEN])
        return cli_usage_error(ctx->cmd, "--metrics-allow-remote needs --metrics-listen");
    if (a->set[OPT_METRICS_LINGER] && !a->value[OPT_METRICS_LISTEN])
        return cli_usage_error(ctx->cmd, "--metrics-linger needs --metrics-listen");
    return CLI_EXIT_OK;
}

int cli_metrics_start(struct cli_ctx *ctx, struct s3f_client *client, struct s3f_metrics *extra,
                      s3f_log_fn log_fn, void *log_ud) {
    const struct cli_args *a = ctx->args;
    if (!a->value[OPT_METRICS_LISTEN] && !a->set[OPT_LOG_METRICS] && !a->value[OPT_OTLP_ENDPOINT])
        return CLI_EXIT_OK;
    struct s3f_metrics *regs[2] = {s3f_client_metrics_registry(client), extra};
    /* the resource: which command (never its arguments: keys, URLs with credentials) */
    static const char *resource[3] = {"s3flash.command"}; /* the exporter keeps it */
    resource[1] = ctx->cmd ? ctx->cmd->name : "";
    struct s3f_metrics_exporter_options o = {
        .registries = regs,
        .n_registries = extra ? 2 : 1,
        .listen = a->value[OPT_METRICS_LISTEN],
        .allow_remote = a->set[OPT_METRICS_ALLOW_REMOTE] ? 1 : 0,
        .log_interval_ms = a->set[OPT_LOG_METRICS] ? LOG_INTERVAL_MS : 0,
        .log_fn = log_fn,
        .log_user_data = log_ud,
        .otlp_endpoint = a->value[OPT_OTLP_ENDPOINT],
        .otlp_interval_ms = cli_otlp_interval_ms(ctx),
        .otlp_resource = resource,
    };
    struct s3f_error err;
    s3f_error_clear(&err);
    enum s3f_status st = s3f_metrics_exporter_start(&o, &ctx->metrics, &err);
    if (st) {
        cli_report(&err, NULL);
        return cli_exit_for(st);
    }
    if (o.listen) {
        /* the address as given, the port as bound (PORT 0: the one the kernel chose) */
        const char *colon = strrchr(o.listen, ':');
        int host_len = colon ? (int)(colon - o.listen) : (int)strlen("127.0.0.1");
        fprintf(stderr, "s3flash: metrics at http://%.*s:%d/metrics\n", host_len,
                colon ? o.listen : "127.0.0.1", s3f_metrics_exporter_port(ctx->metrics));
        fflush(stderr);
    }
    return CLI_EXIT_OK;
}

void cli_metrics_finish(struct cli_ctx *ctx) {
    if (!ctx->metrics)
        return;
    long s = linger_seconds(ctx);
    if (s > 0) {
        fprintf(stderr, "s3flash: metrics: the command is done; serving its last values for "
                        "%ld s (SIGTERM ends it)\n", s);
        fflush(stderr);
        struct timespec left = {.tv_sec = s};
        while (nanosleep(&left, &left) != 0 && errno == EINTR) {
        }
    }
    s3f_metrics_exporter_stop(ctx->metrics);
    ctx->metrics = NULL;
}
