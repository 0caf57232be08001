/* --infer-content-type (Mountpoint's flag): the Content-Type of a new object from its
 * name's extension, as the mime_guess table Mountpoint uses gives it for the common types
 * (case-insensitive; a name without a known extension gets none: the library's default,
 * application/octet-stream). The type is set when the file is created and not changed by
 * a rename, as in Mountpoint. */
#include <string.h>
#include <strings.h>

#include "mount.h"

static const struct {
    const char *ext, *type;
} types[] = {
    {"avif", "image/avif"},       {"bmp", "image/bmp"},
    {"bz2", "application/x-bzip2"}, {"css", "text/css"},
    {"csv", "text/csv"},          {"gif", "image/gif"},
    {"gz", "application/gzip"},   {"htm", "text/html"},
    {"html", "text/html"},        {"ico", "image/x-icon"},
    {"jpeg", "image/jpeg"},       {"jpg", "image/jpeg"},
    {"js", "text/javascript"},    {"json", "application/json"},
    {"jsonl", "application/jsonl"}, {"md", "text/markdown"},
    {"mp3", "audio/mpeg"},        {"mp4", "video/mp4"},
    {"parquet", "application/vnd.apache.parquet"}, {"pdf", "application/pdf"},
    {"png", "image/png"},         {"svg", "image/svg+xml"},
    {"tar", "application/x-tar"}, {"tif", "image/tiff"},
    {"tiff", "image/tiff"},       {"tsv", "text/tab-separated-values"},
    {"txt", "text/plain"},        {"wasm", "application/wasm"},
    {"wav", "audio/wav"},         {"webm", "video/webm"},
    {"webp", "image/webp"},       {"xml", "text/xml"},
    {"yaml", "text/x-yaml"},      {"yml", "text/x-yaml"},
    {"zip", "application/zip"},   {"zst", "application/zstd"},
};

const char *mnt_content_type(const char *key) {
    const char *base = strrchr(key, '/');
    base = base ? base + 1 : key;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base || !dot[1])
        return NULL; /* no extension, or a dot file such as ".env" */
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (strcasecmp(dot + 1, types[i].ext) == 0)
            return types[i].type;
    return NULL;
}
