/* The AWS shared config and credentials files (~/.aws/config, ~/.aws/credentials).
 *
 * Format (as botocore and the AWS SDKs read it):
 *   - Sections: `[default]` and `[profile NAME]` in the config file; `[NAME]` in the
 *     credentials file; `[services NAME]` (endpoint settings per service) in the config
 *     file; other sections (`[sso-session x]`, bare `[x]` in the config file) are parsed and
 *     ignored.
 *   - `key = value` (or `key: value`); keys are lowercased; values are trimmed; inline comments
 *     start at `#` or `;` preceded by whitespace; whole-line comments start with `#` or `;`.
 *   - A line indented deeper than its property continues it: after `key =` with an empty
 *     value, indented `sub = value` lines become the sub-properties `key.sub`
 *     (`s3 =\n  endpoint_url = http://x` gives `s3.endpoint_url`); after a non-empty value
 *     they are appended to it with a newline.
 *   - A profile's `services = NAME` selects the `[services NAME]` section, whose
 *     sub-properties (`s3 =\n  endpoint_url = ...`) are read with s3f__aws_config_service_get.
 *   - A section that appears twice is merged (later keys win); `[profile default]` and
 *     `[default]` are the same profile.
 * Values are never copied into error messages (the files hold secrets). */
#ifndef S3F_AUTH_PROFILE_H
#define S3F_AUTH_PROFILE_H

#include <stdbool.h>

#include "core/core.h"

/* Largest config or credentials file accepted. */
#define S3F__AWS_CONFIG_MAX_FILE_BYTES ((size_t)1 << 20)

/* A merged, immutable view of one profile from both files. Safe to read from many threads. */
struct s3f__aws_config;

/* Load the profile `profile` (NULL: $AWS_PROFILE, else "default") from $AWS_CONFIG_FILE
 * (default ~/.aws/config) and $AWS_SHARED_CREDENTIALS_FILE (default ~/.aws/credentials);
 * a leading `~` is expanded with $HOME. Missing files are not an error. On success *out is
 * set; free it with s3f__aws_config_free. Errors (err gets operation "config", the file as
 * resource): S3F_ERR_CONFIG for a malformed line ("<file>:<line>: ..."), a file larger than
 * S3F__AWS_CONFIG_MAX_FILE_BYTES or unreadable, or a profile named explicitly (argument or
 * AWS_PROFILE) that neither file has ("profile 'x' not found in <config> or <credentials>");
 * S3F_ERR_NO_MEMORY. */
enum s3f_status s3f__aws_config_load(const char *profile, struct s3f__aws_config **out,
                                     struct s3f_error *err);

/* Parse from memory (for tests and embedders). `config_text` / `credentials_text` may be
 * NULL (file absent); `*_name` label them in messages (NULL: "config" / "credentials").
 * `profile` NULL selects "default" and never fails for a missing profile; a non-NULL
 * `profile` must exist in one of the texts. Same ownership and errors as ..._load. */
enum s3f_status s3f__aws_config_parse(const char *config_text, const char *config_name,
                                      const char *credentials_text, const char *credentials_name,
                                      const char *profile, struct s3f__aws_config **out,
                                      struct s3f_error *err);

/* Value of `key` (case-insensitive; sub-properties as "parent.sub", e.g. "s3.endpoint_url")
 * in the profile; the credentials file wins for keys set in both. NULL if unset. A parent of
 * sub-properties reads as "". The pointer lives as long as `c`. */
const char *s3f__aws_config_get(const struct s3f__aws_config *c, const char *key);

/* Value of `key` for `service` (e.g. "s3", "endpoint_url") from the `[services NAME]`
 * section the profile names with `services = NAME`; NULL when the profile has no services
 * setting, the section is missing, or it does not set the key. The service name is
 * case-insensitive. This does not fall back to the profile's top-level keys. */
const char *s3f__aws_config_service_get(const struct s3f__aws_config *c, const char *service,
                                        const char *key);

/* Name of the profile this view holds. Never NULL. */
const char *s3f__aws_config_profile_name(const struct s3f__aws_config *c);
/* Whether the profile was found in either file. */
bool s3f__aws_config_profile_found(const struct s3f__aws_config *c);
/* The files as shown in messages ("~/.aws/config" for the defaults, else the path given);
 * never NULL. */
const char *s3f__aws_config_config_path(const struct s3f__aws_config *c);
const char *s3f__aws_config_credentials_path(const struct s3f__aws_config *c);

/* Free the view, wiping the values (they may hold secrets). NULL is accepted. */
void s3f__aws_config_free(struct s3f__aws_config *c);

/* Expand a leading "~" or "~/" with $HOME (or the password database). Returns a malloc'ed
 * string (caller frees) or NULL on allocation failure; other paths are copied as they are. */
char *s3f__expand_home(const char *path);

#endif
