/* The CLI's --exclude/--include: the pattern matcher (Python's fnmatch, as aws-cli uses it)
 * and the evaluation order of the rules (command-line order, the last matching rule wins);
 * sync's decision for an object present at both ends (size, then modification time). */
#include "../../src/cli/filter.h"
#include "testutil.h"

static void test_fnmatch(void) {
    /* '*' spans '/' */
    CHECK(cli_fnmatch("*", ""));
    CHECK(cli_fnmatch("*", "a/b/c"));
    CHECK(cli_fnmatch("*.txt", "a.txt"));
    CHECK(cli_fnmatch("*.txt", "dir/sub/a.txt"));
    CHECK(!cli_fnmatch("*.txt", "a.txt.bak"));
    CHECK(cli_fnmatch("dir/*", "dir/a/b"));
    CHECK(!cli_fnmatch("dir/*", "dir2/a"));
    CHECK(cli_fnmatch("a*b*c", "aXbYbZc"));
    CHECK(!cli_fnmatch("a*b*c", "aXbYbZ"));
    CHECK(cli_fnmatch("**", "x"));
    CHECK(cli_fnmatch("*a", "aaa"));
    CHECK(!cli_fnmatch("*a", "aab"));
    /* the whole string must match */
    CHECK(!cli_fnmatch("a", "ab"));
    CHECK(!cli_fnmatch("ab", "a"));
    CHECK(cli_fnmatch("", ""));
    CHECK(!cli_fnmatch("", "a"));
    /* '?' is one character, '/' included */
    CHECK(cli_fnmatch("a?c", "abc"));
    CHECK(cli_fnmatch("a?c", "a/c"));
    CHECK(!cli_fnmatch("a?c", "ac"));
    CHECK(!cli_fnmatch("a?c", "abbc"));
    /* classes */
    CHECK(cli_fnmatch("[abc].bin", "b.bin"));
    CHECK(!cli_fnmatch("[abc].bin", "d.bin"));
    CHECK(cli_fnmatch("shard-[0-9][0-9]", "shard-07"));
    CHECK(!cli_fnmatch("shard-[0-9][0-9]", "shard-7x"));
    CHECK(cli_fnmatch("[!a]x", "bx"));
    CHECK(!cli_fnmatch("[!a]x", "ax"));
    CHECK(cli_fnmatch("[]]", "]"));     /* ']' first is a member */
    CHECK(cli_fnmatch("[!]]", "a"));
    CHECK(!cli_fnmatch("[!]]", "]"));
    CHECK(cli_fnmatch("[a-]", "-"));    /* '-' last is a member */
    CHECK(cli_fnmatch("[*]", "*"));     /* the only way to match a literal '*' */
    CHECK(!cli_fnmatch("[*]", "a"));
    CHECK(cli_fnmatch("a[", "a["));     /* no closing ']': a literal '[' */
    CHECK(!cli_fnmatch("a[", "ab"));
    CHECK(cli_fnmatch("[a", "[a"));
    CHECK(cli_fnmatch("\\*", "\\x"));  /* '\\' is no escape */
    CHECK(!cli_fnmatch("\\*", "*"));
    /* case-sensitive, as fnmatch on POSIX */
    CHECK(!cli_fnmatch("*.TXT", "a.txt"));
    /* backtracking without blow-up */
    CHECK(!cli_fnmatch("*a*a*a*a*a*a*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

static bool sel(const char *rel, size_t n, const char *const spec[]) {
    struct cli_filter f;
    f.n = 0;
    for (size_t i = 0; i < n; i++)
        CHECK_INT(cli_filter_add(&f, spec[i][0] == '+', spec[i] + 1), 0);
    return cli_filter_selects(&f, rel);
}

#define SEL(rel, ...)                                                                      \
    sel(rel, sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *),           \
        (const char *const[]){__VA_ARGS__})

static void test_order(void) {
    struct cli_filter none = {.n = 0};
    CHECK(cli_filter_selects(&none, "anything"));
    /* exclude everything, then include some: the include wins for what it matches */
    CHECK(SEL("a.txt", "-*", "+*.txt"));
    CHECK(!SEL("a.bin", "-*", "+*.txt"));
    /* the same rules the other way round: the exclude comes last and wins */
    CHECK(!SEL("a.txt", "+*.txt", "-*"));
    /* a rule that does not match changes nothing */
    CHECK(SEL("a.bin", "-*.txt"));
    CHECK(!SEL("logs/x.txt", "-logs/*", "+*.bin"));
    CHECK(SEL("logs/x.bin", "-logs/*", "+*.bin"));
    /* three rules: the last match decides */
    CHECK(!SEL("data/tmp/x.bin", "-*", "+data/*", "-data/tmp/*"));
    CHECK(SEL("data/x.bin", "-*", "+data/*", "-data/tmp/*"));
    CHECK(!SEL("other", "-*", "+data/*", "-data/tmp/*"));
    /* include alone selects everything (every object starts included) */
    CHECK(SEL("a.bin", "+*.txt"));
    struct cli_filter full = {.n = 0};
    for (int i = 0; i < CLI_FILTER_MAX; i++)
        CHECK_INT(cli_filter_add(&full, false, "x"), 0);
    CHECK_INT(cli_filter_add(&full, false, "x"), -1);
}

/* aws s3 sync's rules for an object present at both ends */
static void test_sync_rules(void) {
    struct cli_sync_rules def = {false, false}, size = {true, false}, exact = {false, true};
    /* a different size always copies, whatever the times */
    CHECK(cli_sync_needs_copy(&def, CLI_SYNC_UPLOAD, 10, 100, 11, 200));
    CHECK(cli_sync_needs_copy(&size, CLI_SYNC_DOWNLOAD, 10, 100, 11, 100));
    CHECK(cli_sync_needs_copy(&exact, CLI_SYNC_COPY, 10, 100, 9, 100));
    /* upload / copy: only a newer source copies */
    CHECK(cli_sync_needs_copy(&def, CLI_SYNC_UPLOAD, 10, 101, 10, 100));
    CHECK(!cli_sync_needs_copy(&def, CLI_SYNC_UPLOAD, 10, 100, 10, 100));
    CHECK(!cli_sync_needs_copy(&def, CLI_SYNC_UPLOAD, 10, 99, 10, 100));
    CHECK(cli_sync_needs_copy(&def, CLI_SYNC_COPY, 10, 101, 10, 100));
    CHECK(!cli_sync_needs_copy(&def, CLI_SYNC_COPY, 10, 100, 10, 101));
    /* --exact-timestamps changes nothing but downloads */
    CHECK(!cli_sync_needs_copy(&exact, CLI_SYNC_UPLOAD, 10, 99, 10, 100));
    /* download: a local file newer than the object copies, an older one does not */
    CHECK(cli_sync_needs_copy(&def, CLI_SYNC_DOWNLOAD, 10, 100, 10, 101));
    CHECK(!cli_sync_needs_copy(&def, CLI_SYNC_DOWNLOAD, 10, 100, 10, 100));
    CHECK(!cli_sync_needs_copy(&def, CLI_SYNC_DOWNLOAD, 10, 101, 10, 100));
    /* ... with --exact-timestamps any difference copies */
    CHECK(cli_sync_needs_copy(&exact, CLI_SYNC_DOWNLOAD, 10, 101, 10, 100));
    CHECK(cli_sync_needs_copy(&exact, CLI_SYNC_DOWNLOAD, 10, 100, 10, 101));
    CHECK(!cli_sync_needs_copy(&exact, CLI_SYNC_DOWNLOAD, 10, 100, 10, 100));
    /* --size-only: equal sizes never copy */
    CHECK(!cli_sync_needs_copy(&size, CLI_SYNC_UPLOAD, 10, 500, 10, 100));
    CHECK(!cli_sync_needs_copy(&size, CLI_SYNC_DOWNLOAD, 10, 100, 10, 500));
}

int main(void) {
    test_fnmatch();
    test_order();
    test_sync_rules();
    return test_summary();
}
