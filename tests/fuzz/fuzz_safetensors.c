/* The safetensors header's parser and validator (src/format/safetensors.c): the input is a
 * file's first bytes. Its first byte picks the file's size: the input's own (the whole file)
 * or the input's plus up to 254 bytes of data beyond it (a header fetched alone, the data
 * section not). Checks that an accepted header's tensors tile the data section exactly, in
 * order, each of shape x dtype bytes, and that every string handed out ends where it says. */
#include <string.h>

#include "fuzz.h"
#include "s3flash/s3flash.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    uint64_t extra = data[0] == 0xFF ? 0 : data[0];
    data++;
    size--;
    uint64_t file_size = size + extra;
    struct s3f_safetensors_header *h = (void *)1;
    struct s3f_error err;
    enum s3f_status st = s3f_safetensors_parse(data, size, file_size, 0, &h, &err);
    uint64_t n = 0;
    struct s3f_error err2;
    enum s3f_status lst = size >= 8 ? s3f_safetensors_header_length(data, file_size, 0, &n, &err2)
                                    : S3F_ERR_INVALID_ARGUMENT;
    if (st != S3F_OK) {
        FUZZ_CHECK(h == NULL);
        FUZZ_CHECK(st == S3F_ERR_INVALID_ARGUMENT || st == S3F_ERR_NO_MEMORY);
        FUZZ_CHECK(memchr(err.message, 0, sizeof(err.message)) && err.message[0]);
        return 0;
    }
    FUZZ_CHECK(lst == S3F_OK && n == h->header_bytes);
    FUZZ_CHECK(h->data_offset == 8 + h->header_bytes);
    FUZZ_CHECK(h->data_offset + h->data_bytes == file_size);
    uint64_t at = 0;
    for (size_t k = 0; k < h->n_tensors; k++) {
        const struct s3f_safetensors_tensor *t = &h->tensors[k];
        FUZZ_CHECK(t->name && t->name[t->name_len] == 0);
        FUZZ_CHECK(t->dtype && (t->dtype_bits == 4 || t->dtype_bits == 6 || t->dtype_bits % 8 == 0));
        FUZZ_CHECK(t->n_dims == 0 || t->shape);
        FUZZ_CHECK(t->begin == at && t->end >= t->begin && t->end <= h->data_bytes);
        unsigned __int128 bits = t->dtype_bits;
        for (size_t d = 0; d < t->n_dims; d++)
            bits *= t->shape[d];
        FUZZ_CHECK(bits % 8 == 0 && bits / 8 == t->end - t->begin);
        at = t->end;
    }
    FUZZ_CHECK(at == h->data_bytes);
    for (size_t k = 0; k < h->n_metadata; k++) {
        FUZZ_CHECK(h->metadata[k].key[h->metadata[k].key_len] == 0);
        FUZZ_CHECK(h->metadata[k].value[h->metadata[k].value_len] == 0);
    }
    FUZZ_CHECK(h->n_metadata == 0 || h->has_metadata);
    s3f_safetensors_free(h);
    return 0;
}
