/* A tiny JSON reader for the test vectors (tests only: no caps, aborts on OOM). */
#ifndef S3F_TEST_VECJSON_H
#define S3F_TEST_VECJSON_H

#include <stdbool.h>
#include <stddef.h>

enum vj_type { VJ_NULL, VJ_BOOL, VJ_NUMBER, VJ_STRING, VJ_ARRAY, VJ_OBJECT };

struct vj {
    enum vj_type type;
    bool b;
    double num;
    char *str;          /* VJ_STRING (decoded, NUL-terminated) */
    struct vj **items;  /* VJ_ARRAY values / VJ_OBJECT values */
    char **keys;        /* VJ_OBJECT keys */
    size_t n;
};

/* Parse a whole document; NULL on syntax error (message on stderr). Free with vj_free. */
struct vj *vj_parse(const char *text, size_t len);
void vj_free(struct vj *v);
/* Member of an object (NULL if absent or not an object). */
const struct vj *vj_get(const struct vj *obj, const char *key);
/* String member or NULL; bool member (false if absent). */
const char *vj_str(const struct vj *obj, const char *key);
bool vj_bool(const struct vj *obj, const char *key);

#endif
