/* S3 XML: the listings (ListObjectsV2, ListParts, ListMultipartUploads, ListBuckets) on
 * the engine of xml.c (see xml.h for what every parser answers). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "s3/xml_internal.h"

/* ---- ListObjectsV2 ------------------------------------------------------------------------ */
struct list_ctx {
    struct s3f_list_page *page;
    size_t obj_cap, pfx_cap;
    bool truncated_seen, url;
};

static void list_start(struct xdoc *d, const char *name) {
    struct list_ctx *c = d->ctx;
    struct s3f_list_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Contents") == 0) {
        void *a = s3f__xml_grow(d, pg->objects, pg->n_objects, &c->obj_cap, sizeof(*pg->objects),
                                "Contents");
        if (!a)
            return;
        pg->objects = a;
        memset(&pg->objects[pg->n_objects++], 0, sizeof(*pg->objects));
    }
}

static void list_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct list_ctx *c = d->ctx;
    struct s3f_list_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!s3f__xml_bool(text, len, &pg->is_truncated))
                s3f__xml_bad_value(d, name, text, len);
            c->truncated_seen = true;
        } else if (strcmp(name, "NextContinuationToken") == 0) {
            s3f__xml_set_str(d, &pg->next_continuation_token, text, len);
        } else if (strcmp(name, "EncodingType") == 0) {
            c->url = len == 3 && strncasecmp(text, "url", 3) == 0;
        } else if (strcmp(name, "Contents") == 0) {
            struct s3f_list_entry *e = &pg->objects[pg->n_objects - 1];
            if (!e->key || !*e->key)
                s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "<Contents> without <Key>");
        }
    } else if (d->depth == 3 && strcmp(s3f__xml_parent(d), "Contents") == 0) {
        struct s3f_list_entry *e = &pg->objects[pg->n_objects - 1];
        if (strcmp(name, "Key") == 0)
            s3f__xml_set_str(d, &e->key, text, len);
        else if (strcmp(name, "Size") == 0) {
            if (!s3f__xml_u64(text, len, &e->size))
                s3f__xml_bad_value(d, name, text, len);
        } else if (strcmp(name, "LastModified") == 0)
            e->last_modified = s3f__xml_time(text, len);
        else if (strcmp(name, "ETag") == 0)
            s3f__xml_set_etag_str(d, &e->etag, text, len);
        else if (strcmp(name, "StorageClass") == 0)
            s3f__xml_set_str(d, &e->storage_class, text, len);
    } else if (d->depth == 3 && strcmp(s3f__xml_parent(d), "CommonPrefixes") == 0 &&
               strcmp(name, "Prefix") == 0) {
        void *a = s3f__xml_grow(d, pg->common_prefixes, pg->n_common_prefixes, &c->pfx_cap,
                                sizeof(*pg->common_prefixes), "CommonPrefixes");
        if (!a)
            return;
        pg->common_prefixes = a;
        pg->common_prefixes[pg->n_common_prefixes] = NULL;
        s3f__xml_set_str(d, &pg->common_prefixes[pg->n_common_prefixes], text, len);
        if (pg->common_prefixes[pg->n_common_prefixes])
            pg->n_common_prefixes++;
    }
}

void s3f_list_page_free(struct s3f_list_page *page) {
    if (!page)
        return;
    for (size_t i = 0; i < page->n_objects; i++) {
        free(page->objects[i].key);
        free(page->objects[i].etag);
        free(page->objects[i].storage_class);
    }
    free(page->objects);
    for (size_t i = 0; i < page->n_common_prefixes; i++)
        free(page->common_prefixes[i]);
    free(page->common_prefixes);
    free(page->next_continuation_token);
    free(page);
}

enum s3f_status s3f__xml_parse_list_objects_v2(const char *body, size_t len,
                                               struct s3f_list_page **out,
                                               struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct list_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d = {.what = "ListObjectsV2", .root = "ListBucketResult",
                     .on_start = list_start, .on_end = list_end, .ctx = &c};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    struct s3f_list_page *pg = c.page;
    if (st)
        goto fail;
    if (c.url) {
        for (size_t i = 0; i < pg->n_objects; i++)
            if (!s3f__xml_url_decode_in_place(pg->objects[i].key)) {
                st = s3f__xml_bad_doc(err, d.what, "invalid URL encoding in a <Key>");
                goto fail;
            }
        for (size_t i = 0; i < pg->n_common_prefixes; i++)
            if (!s3f__xml_url_decode_in_place(pg->common_prefixes[i])) {
                st = s3f__xml_bad_doc(err, d.what, "invalid URL encoding in a <Prefix>");
                goto fail;
            }
    }
    if (pg->is_truncated && (!pg->next_continuation_token || !*pg->next_continuation_token)) {
        st = s3f__xml_bad_doc(err, d.what,
                              "IsTruncated is true but NextContinuationToken is missing");
        goto fail;
    }
    if (!pg->is_truncated) {
        free(pg->next_continuation_token);
        pg->next_continuation_token = NULL;
    }
    *out = pg;
    return S3F_OK;
fail:
    s3f_list_page_free(pg);
    return st;
}

/* ---- ListParts ------------------------------------------------------------------------------ */
struct parts_ctx {
    struct s3f_parts_page *page;
    size_t cap;
    bool next_seen;
};

static void parts_start(struct xdoc *d, const char *name) {
    struct parts_ctx *c = d->ctx;
    struct s3f_parts_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Part") == 0) {
        void *a = s3f__xml_grow(d, pg->parts, pg->n_parts, &c->cap, sizeof(*pg->parts), "Part");
        if (!a)
            return;
        pg->parts = a;
        memset(&pg->parts[pg->n_parts++], 0, sizeof(*pg->parts));
    }
}

static void parts_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct parts_ctx *c = d->ctx;
    struct s3f_parts_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!s3f__xml_bool(text, len, &pg->is_truncated))
                s3f__xml_bad_value(d, name, text, len);
        } else if (strcmp(name, "NextPartNumberMarker") == 0) {
            if (!s3f__xml_int(text, len, 0, INT_MAX, &pg->next_part_number_marker))
                s3f__xml_bad_value(d, name, text, len);
            c->next_seen = true;
        } else if (strcmp(name, "Part") == 0) {
            if (pg->parts[pg->n_parts - 1].part_number == 0)
                s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "<Part> without <PartNumber>");
        }
    } else if (d->depth == 3 && strcmp(s3f__xml_parent(d), "Part") == 0) {
        struct s3f_part_info *p = &pg->parts[pg->n_parts - 1];
        if (strcmp(name, "PartNumber") == 0) {
            if (!s3f__xml_int(text, len, 1, 10000, &p->part_number))
                s3f__xml_bad_value(d, name, text, len);
        } else if (strcmp(name, "Size") == 0) {
            if (!s3f__xml_u64(text, len, &p->size))
                s3f__xml_bad_value(d, name, text, len);
        } else if (strcmp(name, "ETag") == 0) {
            s3f__xml_set_etag_fixed(d, p->etag, sizeof(p->etag), text, len);
        } else if (strcmp(name, "LastModified") == 0) {
            p->last_modified = s3f__xml_time(text, len);
        } else if (strncmp(name, "Checksum", 8) == 0 && name[8] && !p->checksum[0] &&
                   strcmp(name, "ChecksumType") != 0) {
            s3f__xml_set_fixed(d, p->checksum, sizeof(p->checksum), name, text, len);
            /* SHA-1 / SHA-256 parts are kept but not sent back on completion */
            p->checksum_algorithm = strcmp(name, "ChecksumCRC32C") == 0 ? S3F_CHECKSUM_CRC32C
                                    : strcmp(name, "ChecksumCRC32") == 0 ? S3F_CHECKSUM_CRC32
                                    : strcmp(name, "ChecksumCRC64NVME") == 0
                                        ? S3F_CHECKSUM_CRC64NVME
                                        : S3F_CHECKSUM_NONE;
        }
    }
}

void s3f_parts_page_free(struct s3f_parts_page *page) {
    if (!page)
        return;
    free(page->parts);
    free(page);
}

enum s3f_status s3f__xml_parse_list_parts(const char *body, size_t len,
                                          struct s3f_parts_page **out, struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct parts_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d = {.what = "ListParts", .root = "ListPartsResult", .on_start = parts_start,
                     .on_end = parts_end, .ctx = &c};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (!st && c.page->is_truncated && !c.next_seen)
        st = s3f__xml_bad_doc(err, d.what,
                              "IsTruncated is true but NextPartNumberMarker is missing");
    if (st) {
        s3f_parts_page_free(c.page);
        return st;
    }
    *out = c.page;
    return S3F_OK;
}

/* ---- ListMultipartUploads ------------------------------------------------------------------- */
struct uploads_ctx {
    struct s3f_uploads_page *page;
    size_t cap;
    bool url;
};

static void uploads_start(struct xdoc *d, const char *name) {
    struct uploads_ctx *c = d->ctx;
    struct s3f_uploads_page *pg = c->page;
    if (d->depth == 2 && strcmp(name, "Upload") == 0) {
        void *a = s3f__xml_grow(d, pg->uploads, pg->n_uploads, &c->cap, sizeof(*pg->uploads),
                                "Upload");
        if (!a)
            return;
        pg->uploads = a;
        memset(&pg->uploads[pg->n_uploads++], 0, sizeof(*pg->uploads));
    }
}

static void uploads_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct uploads_ctx *c = d->ctx;
    struct s3f_uploads_page *pg = c->page;
    if (d->depth == 2) {
        if (strcmp(name, "IsTruncated") == 0) {
            if (!s3f__xml_bool(text, len, &pg->is_truncated))
                s3f__xml_bad_value(d, name, text, len);
        } else if (strcmp(name, "NextKeyMarker") == 0) {
            if (len)
                s3f__xml_set_str(d, &pg->next_key_marker, text, len);
        } else if (strcmp(name, "NextUploadIdMarker") == 0) {
            if (len)
                s3f__xml_set_str(d, &pg->next_upload_id_marker, text, len);
        } else if (strcmp(name, "EncodingType") == 0) {
            c->url = len == 3 && strncasecmp(text, "url", 3) == 0;
        } else if (strcmp(name, "Upload") == 0) {
            struct s3f_upload_entry *u = &pg->uploads[pg->n_uploads - 1];
            if (!u->key || !*u->key || !u->upload_id || !*u->upload_id)
                s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "<Upload> without <Key> or <UploadId>");
        }
    } else if (d->depth == 3 && strcmp(s3f__xml_parent(d), "Upload") == 0) {
        struct s3f_upload_entry *u = &pg->uploads[pg->n_uploads - 1];
        if (strcmp(name, "Key") == 0)
            s3f__xml_set_str(d, &u->key, text, len);
        else if (strcmp(name, "UploadId") == 0)
            s3f__xml_set_str(d, &u->upload_id, text, len);
        else if (strcmp(name, "Initiated") == 0)
            u->initiated = s3f__xml_time(text, len);
    }
}

void s3f_uploads_page_free(struct s3f_uploads_page *page) {
    if (!page)
        return;
    for (size_t i = 0; i < page->n_uploads; i++) {
        free(page->uploads[i].key);
        free(page->uploads[i].upload_id);
    }
    free(page->uploads);
    free(page->next_key_marker);
    free(page->next_upload_id_marker);
    free(page);
}

enum s3f_status s3f__xml_parse_list_multipart_uploads(const char *body, size_t len,
                                                      struct s3f_uploads_page **out,
                                                      struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output page");
    *out = NULL;
    struct uploads_ctx c = {0};
    c.page = calloc(1, sizeof(*c.page));
    if (!c.page)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d = {.what = "ListMultipartUploads", .root = "ListMultipartUploadsResult",
                     .on_start = uploads_start, .on_end = uploads_end, .ctx = &c};
    struct s3f_uploads_page *pg = c.page;
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (st)
        goto fail;
    if (c.url) {
        bool ok = s3f__xml_url_decode_in_place(pg->next_key_marker);
        for (size_t i = 0; ok && i < pg->n_uploads; i++)
            ok = s3f__xml_url_decode_in_place(pg->uploads[i].key);
        if (!ok) {
            st = s3f__xml_bad_doc(err, d.what, "invalid URL encoding in a <Key>");
            goto fail;
        }
    }
    if (pg->is_truncated && !pg->next_key_marker) {
        st = s3f__xml_bad_doc(err, d.what, "IsTruncated is true but NextKeyMarker is missing");
        goto fail;
    }
    *out = pg;
    return S3F_OK;
fail:
    s3f_uploads_page_free(pg);
    return st;
}

/* ---- ListBuckets -------------------------------------------------------------------------- */
struct buckets_ctx {
    struct s3f_bucket_list *list;
    size_t cap;
};

static void buckets_start(struct xdoc *d, const char *name) {
    struct buckets_ctx *c = d->ctx;
    struct s3f_bucket_list *l = c->list;
    if (d->depth == 3 && strcmp(name, "Bucket") == 0 &&
        strcmp(s3f__xml_parent(d), "Buckets") == 0) {
        void *a = s3f__xml_grow(d, l->buckets, l->n_buckets, &c->cap, sizeof(*l->buckets),
                                "Bucket");
        if (!a)
            return;
        l->buckets = a;
        memset(&l->buckets[l->n_buckets++], 0, sizeof(*l->buckets));
    }
}

static void buckets_end(struct xdoc *d, const char *name, const char *text, size_t len) {
    struct buckets_ctx *c = d->ctx;
    struct s3f_bucket_list *l = c->list;
    if (d->depth == 3 && strcmp(name, "Bucket") == 0 &&
        strcmp(s3f__xml_parent(d), "Buckets") == 0) {
        const struct s3f_bucket_entry *b = &l->buckets[l->n_buckets - 1];
        if (!b->name || !*b->name)
            s3f__xml_fail(d, S3F_ERR_BAD_RESPONSE, "<Bucket> without <Name>");
    } else if (d->depth == 4 && strcmp(s3f__xml_parent(d), "Bucket") == 0 && l->n_buckets) {
        struct s3f_bucket_entry *b = &l->buckets[l->n_buckets - 1];
        if (strcmp(name, "Name") == 0)
            s3f__xml_set_str(d, &b->name, text, len);
        else if (strcmp(name, "CreationDate") == 0)
            b->creation_date = s3f__xml_time(text, len);
    }
}

void s3f_bucket_list_free(struct s3f_bucket_list *list) {
    if (!list)
        return;
    for (size_t i = 0; i < list->n_buckets; i++)
        free(list->buckets[i].name);
    free(list->buckets);
    free(list);
}

enum s3f_status s3f__xml_parse_list_buckets(const char *body, size_t len,
                                            struct s3f_bucket_list **out,
                                            struct s3f_error *err) {
    if (!out)
        return s3f__error_set(err, S3F_ERR_INVALID_ARGUMENT, NULL, NULL, "no output list");
    *out = NULL;
    struct buckets_ctx c = {0};
    c.list = calloc(1, sizeof(*c.list));
    if (!c.list)
        return s3f__error_set(err, S3F_ERR_NO_MEMORY, NULL, NULL, "out of memory");
    struct xdoc d = {.what = "ListBuckets", .root = "ListAllMyBucketsResult",
                     .on_start = buckets_start, .on_end = buckets_end, .ctx = &c};
    enum s3f_status st = s3f__xml_parse(&d, body, len, err);
    if (st) {
        s3f_bucket_list_free(c.list);
        return st;
    }
    *out = c.list;
    return S3F_OK;
}
