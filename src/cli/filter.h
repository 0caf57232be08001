/* --exclude / --include patterns of the recursive commands (cp, mv, rm, sync), evaluated as
 * the AWS CLI does: every object starts included; the rules are tried in command-line
 * order and each one that matches sets the verdict (exclude: out, include: in), so the last
 * matching rule wins. A pattern is matched against the object's path relative to the
 * source (or, for sync --delete, the destination) directory or prefix, with '/' as the
 * separator, by cli_fnmatch. Self-contained (libc only), so that unit tests link it alone. */
#ifndef S3F_CLI_FILTER_H
#define S3F_CLI_FILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Python's fnmatch.fnmatchcase, which aws-cli uses (case-sensitive on POSIX):
 *   '*'      any run of characters, '/' included ("*.txt" matches "a/b.txt");
 *   '?'      any one character ('/' included);
 *   '[seq]'  one character of seq, with ranges "a-z"; '[!seq]' one character not in seq;
 *            a ']' right after '[' or '[!' is a member; a '[' without a closing ']' is a
 *            literal '[';
 *   anything else, '\\' included, matches itself (there is no escape character: "[*]"
 *   matches a literal '*').
 * Returns true when the whole of `s` matches the whole of `pattern`. Linear memory, no
 * recursion: '*' is matched by backtracking to the last star only. */
bool cli_fnmatch(const char *pattern, const char *s);

#define CLI_FILTER_MAX 256

struct cli_filter_rule {
    bool include;        /* true: --include, false: --exclude */
    const char *pattern; /* not owned (points into argv) */
};

struct cli_filter {
    struct cli_filter_rule rules[CLI_FILTER_MAX];
    size_t n;
};

/* Append a rule; -1 when CLI_FILTER_MAX rules are there already. */
int cli_filter_add(struct cli_filter *f, bool include, const char *pattern);

/* Is the object at relative path `rel` selected? true with no rules. */
bool cli_filter_selects(const struct cli_filter *f, const char *rel);

/* ------------------------------------------------------------------------------------
 * sync: does an object present at both ends need copying? aws s3 sync's rules
 * (awscli/customizations/s3/syncstrategy): a different size always copies; else, by
 * modification time (whole seconds):
 *   upload, copy  the source is newer than the destination (dst_mtime < src_mtime);
 *   download      the local file is newer than the object (dst_mtime > src_mtime) — so an
 *                 object replaced on S3 by one of the same size is NOT downloaded again —
 *                 or, with exact_timestamps, the times differ at all;
 *   size_only     the size alone decides.
 * An object missing at the destination is always copied (not decided here).
 * ---------------------------------------------------------------------------------- */
enum cli_sync_dir { CLI_SYNC_UPLOAD, CLI_SYNC_DOWNLOAD, CLI_SYNC_COPY };

struct cli_sync_rules {
    bool size_only;
    bool exact_timestamps; /* only changes downloads */
};

bool cli_sync_needs_copy(const struct cli_sync_rules *rules, enum cli_sync_dir dir,
                         uint64_t src_size, int64_t src_mtime, uint64_t dst_size,
                         int64_t dst_mtime);

#endif
