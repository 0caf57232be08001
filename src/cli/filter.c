/* --exclude / --include: see filter.h. */
#include "filter.h"

/* Match one character class starting just after '['. On success *end is the character
 * after the closing ']' and the return value says whether `c` is a member; -1 when the
 * class has no closing ']' (then '[' is a literal). */
static int class_match(const char *p, char c, const char **end) {
    bool negate = false;
    if (*p == '!') {
        negate = true;
        p++;
    }
    const char *start = p;
    bool member = false;
    /* a ']' first in the class is a member, not its end */
    while (*p && (*p != ']' || p == start)) {
        char lo = *p, hi = *p;
        if (p[1] == '-' && p[2] && p[2] != ']') {
            hi = p[2];
            p += 3;
        } else {
            p++;
        }
        if ((unsigned char)lo <= (unsigned char)c && (unsigned char)c <= (unsigned char)hi)
            member = true;
    }
    if (*p != ']')
        return -1;
    *end = p + 1;
    return member != negate;
}

bool cli_fnmatch(const char *pattern, const char *s) {
    const char *p = pattern;
    const char *star_p = NULL, *star_s = NULL; /* the last '*' and where it resumes */
    for (;;) {
        if (*p == '*') {
            while (*p == '*')
                p++;
            if (!*p)
                return true; /* a trailing '*' takes the rest */
            star_p = p;
            star_s = s;
            continue;
        }
        if (!*s) {
            if (!*p)
                return true;
            /* the pattern wants more than the string has */
            return false;
        }
        bool ok = false;
        const char *next = p + 1;
        if (*p == '?') {
            ok = true;
        } else if (*p == '[') {
            const char *end = NULL;
            int m = class_match(p + 1, *s, &end);
            if (m < 0) {
                ok = *s == '[';
            } else {
                ok = m == 1;
                next = end;
            }
        } else if (*p) {
            ok = *p == *s;
        }
        if (ok) {
            p = next;
            s++;
            continue;
        }
        if (!star_p)
            return false;
        /* let the last '*' take one more character and retry from there */
        p = star_p;
        s = ++star_s;
    }
}

int cli_filter_add(struct cli_filter *f, bool include, const char *pattern) {
    if (f->n >= CLI_FILTER_MAX)
        return -1;
    f->rules[f->n].include = include;
    f->rules[f->n].pattern = pattern;
    f->n++;
    return 0;
}

bool cli_filter_selects(const struct cli_filter *f, const char *rel) {
    bool in = true;
    for (size_t i = 0; i < f->n; i++)
        if (cli_fnmatch(f->rules[i].pattern, rel))
            in = f->rules[i].include;
    return in;
}

bool cli_sync_needs_copy(const struct cli_sync_rules *rules, enum cli_sync_dir dir,
                         uint64_t src_size, int64_t src_mtime, uint64_t dst_size,
                         int64_t dst_mtime) {
    if (src_size != dst_size)
        return true;
    if (rules->size_only)
        return false;
    if (dir == CLI_SYNC_DOWNLOAD)
        return rules->exact_timestamps ? dst_mtime != src_mtime : dst_mtime > src_mtime;
    return dst_mtime < src_mtime;
}
