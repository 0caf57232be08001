/* The mount's listing names (src/mount/listing.c): a ListObjectsV2 page, parsed by the
 * library's parser (src/s3/xml_list.c) as a server's reply would be, walked as the
 * entries of the directory whose key prefix was asked for, as readdir does. The page may
 * hold keys and common prefixes that do not start with that prefix, or are shorter than
 * it (issue 20, 9a: readdir read past the end of such a prefix).
 * Input: the asked prefix, NUL, the XML body. */
#include <string.h>

#include "fuzz.h"
#include "listing.h"
#include "s3/xml.h"

struct walk {
    const struct s3f_list_page *page;
    const char *dkey;
    size_t n;
};

/* Is [p, p+len) inside one of the page's strings, after the asked prefix? */
static int inside_page(const struct walk *w, const char *p, size_t len) {
    size_t lk = strlen(w->dkey);
    for (size_t i = 0; i < w->page->n_objects; i++) {
        const char *k = w->page->objects[i].key;
        if (p == k + lk && strlen(k) == lk + len)
            return 1;
    }
    for (size_t i = 0; i < w->page->n_common_prefixes; i++) {
        const char *k = w->page->common_prefixes[i];
        if (p == k + lk && strlen(k) == lk + len + 1)
            return 1;
    }
    return 0;
}

static int on_name(void *user, const char *name, size_t len, const struct s3f_list_entry *obj,
                   int hold) {
    struct walk *w = user;
    FUZZ_CHECK(mnt_valid_name(name, len));
    FUZZ_CHECK(len >= 1 && len <= MNT_NAME_MAX && !memchr(name, '/', len));
    FUZZ_CHECK(inside_page(w, name, len));
    FUZZ_CHECK(!obj || !mnt_page_has_dir(w->page, w->dkey, name, len));
    FUZZ_CHECK(obj || !hold);
    w->n++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t pos = 0;
    char *dkey = fuzz_field(data, size, &pos);
    size_t body_len = pos < size ? size - pos : 0;
    char *body = fuzz_cstr(data + (size - body_len), body_len);
    struct s3f_list_page *page = NULL;
    struct s3f_error err;
    memset(&err, 0, sizeof(err));
    if (s3f__xml_parse_list_objects_v2(body, body_len, &page, &err) == S3F_OK) {
        struct walk w = {.page = page, .dkey = dkey};
        FUZZ_CHECK(mnt_page_walk(page, dkey, on_name, &w) == 0);
        FUZZ_CHECK(w.n <= page->n_objects + page->n_common_prefixes);
        const char *last = mnt_page_last(page, dkey);
        FUZZ_CHECK(!last || page->is_truncated);
        s3f_list_page_free(page);
    }
    free(body);
    free(dkey);
    return 0;
}
