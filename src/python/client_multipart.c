/* Client's listings (objects, buckets, multipart uploads) and the low-level multipart
 * calls (fsspec's append: a copy of the object as the first parts, then the appended
 * bytes). The upload is created without a checksum, as the engine's own server-side copies
 * are (a copied part has no checksum to send back). Each waits with the GIL released; the
 * method table is client.c's. */
#include "s3flash_py.h"

PyObject *Client_list_objects(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "prefix", "delimiter", "continuation_token",
                             "start_after", "max_keys", "tokens", NULL};
    PyObject *tokens = Py_None;
    const char *bucket;
    struct s3f_list_options o;
    memset(&o, 0, sizeof(o));
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzzziO", kwlist, &bucket, &o.prefix,
                                     &o.delimiter, &o.continuation_token, &o.start_after,
                                     &o.max_keys, &tokens))
        return NULL;
    struct s3f_list_tokens **seen = NULL;
    if (tokens != Py_None && !(seen = list_tokens_of(tokens)))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_list_page *page = NULL;
    CALL_NOGIL(st, err, s3f_list_objects_v2(c, bucket, &o, &page, &err));
    if (st)
        return raise_s3(st, &err);
    PyObject *objs = PyList_New((Py_ssize_t)page->n_objects);
    PyObject *prefixes = objs ? PyList_New((Py_ssize_t)page->n_common_prefixes) : NULL;
    PyObject *res = NULL;
    if (!prefixes)
        goto out;
    for (size_t i = 0; i < page->n_objects; i++) {
        const struct s3f_list_entry *e = &page->objects[i];
        PyObject *t = Py_BuildValue("(sKLss)", e->key, (unsigned long long)e->size,
                                    (long long)e->last_modified, e->etag ? e->etag : "",
                                    e->storage_class ? e->storage_class : "");
        if (!t)
            goto out;
        PyList_SetItem(objs, (Py_ssize_t)i, t);
    }
    for (size_t i = 0; i < page->n_common_prefixes; i++) {
        PyObject *s = PyUnicode_FromString(page->common_prefixes[i]);
        if (!s)
            goto out;
        PyList_SetItem(prefixes, (Py_ssize_t)i, s);
    }
    const char *next = page->is_truncated ? page->next_continuation_token : NULL;
    if (seen) { /* a token this listing followed already: the server's loop, refused */
        s3f_error_clear(&err);
        st = s3f_list_tokens_next(seen, page, bucket, &next, &err);
        if (st) {
            raise_s3(st, &err);
            goto out;
        }
    }
    res = Py_BuildValue("(OOz)", objs, prefixes, next);
out:
    Py_XDECREF(objs);
    Py_XDECREF(prefixes);
    s3f_list_page_free(page);
    return res;
}

PyObject *Client_list_multipart_uploads(ClientObject *self, PyObject *args,
                                        PyObject *kw) {
    static char *kwlist[] = {"bucket", "prefix", "key_marker", "upload_id_marker", NULL};
    const char *bucket, *prefix = NULL, *km = NULL, *um = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s|zzz", kwlist, &bucket, &prefix, &km, &um))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_uploads_page *page = NULL;
    CALL_NOGIL(st, err, s3f_list_multipart_uploads(c, bucket, prefix, km, um, &page, &err));
    if (st)
        return raise_s3(st, &err);
    PyObject *res = NULL;
    PyObject *ups = PyList_New((Py_ssize_t)page->n_uploads);
    if (!ups)
        goto out;
    for (size_t i = 0; i < page->n_uploads; i++) {
        const struct s3f_upload_entry *e = &page->uploads[i];
        PyObject *t = Py_BuildValue("(ssL)", e->key, e->upload_id, (long long)e->initiated);
        if (!t)
            goto out;
        PyList_SetItem(ups, (Py_ssize_t)i, t);
    }
    res = Py_BuildValue("(Ozz)", ups, page->is_truncated ? page->next_key_marker : NULL,
                        page->is_truncated ? page->next_upload_id_marker : NULL);
out:
    Py_XDECREF(ups);
    s3f_uploads_page_free(page);
    return res;
}

PyObject *Client_create_multipart_upload(ClientObject *self, PyObject *args,
                                         PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "content_type", NULL};
    const char *bucket, *key, *ctype = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "ss|z", kwlist, &bucket, &key, &ctype))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_put_options po;
    memset(&po, 0, sizeof(po));
    po.content_type = ctype;
    po.checksum = S3F_CHECKSUM_NONE;
    char *upload_id = NULL;
    CALL_NOGIL(st, err, s3f_create_multipart_upload(c, bucket, key, &po, &upload_id, &err));
    if (st)
        return raise_s3(st, &err);
    PyObject *res = PyUnicode_FromString(upload_id);
    free(upload_id);
    return res;
}

PyObject *Client_upload_part(ClientObject *self, PyObject *args) {
    const char *bucket, *key, *upload_id;
    int part_number;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "sssiy*:upload_part", &bucket, &key, &upload_id, &part_number,
                          &data))
        return NULL;
    struct s3f_client *c = client_holding(self, &data);
    if (!c)
        return NULL;
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    CALL_NOGIL(st, err, s3f_upload_part(c, bucket, key, upload_id, part_number, data.buf,
                                        (size_t)data.len, S3F_CHECKSUM_NONE, &part, &err));
    PyBuffer_Release(&data);
    return part_or_raise(st, &err, &part);
}

PyObject *Client_upload_part_copy(ClientObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"bucket", "key", "upload_id", "part_number", "src_bucket",
                             "src_key", "first", "last", "if_match", NULL};
    const char *bucket, *key, *upload_id, *sb, *sk, *if_match = NULL;
    int part_number;
    unsigned long long first, last;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sssissKK|z", kwlist, &bucket, &key,
                                     &upload_id, &part_number, &sb, &sk, &first, &last,
                                     &if_match))
        return NULL;
    CLIENT_OR_NULL(self, c);
    struct s3f_part_info part;
    memset(&part, 0, sizeof(part));
    CALL_NOGIL(st, err, s3f_upload_part_copy(c, bucket, key, upload_id, part_number, sb, sk, NULL,
                                             first, last, if_match, &part, &err));
    return part_or_raise(st, &err, &part);
}

PyObject *Client_complete_multipart_upload(ClientObject *self, PyObject *args) {
    const char *bucket, *key, *upload_id;
    PyObject *seq_in;
    if (!PyArg_ParseTuple(args, "sssO:complete_multipart_upload", &bucket, &key, &upload_id,
                          &seq_in))
        return NULL;
    CLIENT_OR_NULL(self, c);
    /* a list of its own (limited API: no PySequence_Fast macros) */
    PyObject *seq = PySequence_List(seq_in);
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    struct s3f_part_info *parts = calloc(n ? (size_t)n : 1, sizeof(*parts));
    if (!parts) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *etag;
        PyObject *item = PyList_GetItem(seq, i); /* borrowed */
        if (!item || !PyArg_ParseTuple(item, "is", &parts[i].part_number, &etag)) {
            free(parts);
            Py_DECREF(seq);
            return NULL;
        }
        if (strlen(etag) >= sizeof(parts[i].etag)) {
            free(parts);
            Py_DECREF(seq);
            PyErr_SetString(PyExc_ValueError, "ETag too long");
            return NULL;
        }
        snprintf(parts[i].etag, sizeof(parts[i].etag), "%s", etag);
        parts[i].checksum_algorithm = S3F_CHECKSUM_NONE;
    }
    Py_DECREF(seq);
    struct s3f_object_info info;
    memset(&info, 0, sizeof(info));
    CALL_NOGIL(st, err, s3f_complete_multipart_upload(c, bucket, key, upload_id, parts, (size_t)n,
                                                      &info, &err));
    free(parts);
    return info_or_raise(st, &err, &info);
}

PyObject *Client_list_buckets(ClientObject *self, PyObject *Py_UNUSED(ignored)) {
    CLIENT_OR_NULL(self, c);
    struct s3f_bucket_list *list = NULL;
    CALL_NOGIL(st, err, s3f_list_buckets(c, &list, &err));
    if (st)
        return raise_s3(st, &err);
    PyObject *res = PyList_New((Py_ssize_t)list->n_buckets);
    for (size_t i = 0; res && i < list->n_buckets; i++) {
        const struct s3f_bucket_entry *b = &list->buckets[i];
        PyObject *t = Py_BuildValue("(sL)", b->name, (long long)b->creation_date);
        if (!t) {
            Py_CLEAR(res);
            break;
        }
        if (PyList_SetItem(res, (Py_ssize_t)i, t) != 0) { /* steals t */
            Py_CLEAR(res);
            break;
        }
    }
    s3f_bucket_list_free(list);
    return res;
}
