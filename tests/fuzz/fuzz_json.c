/*
 * fuzz_json.c - fuzz target for the JSON-line parser: any bytes, no crash, no
 * read outside the line, and every extracted string is valid UTF-8 whose
 * spans lie inside the output buffer.  A violation aborts.
 */
#include "json.h"

#include "utf8_valid.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_doc d;
    static int init;
    if (!init) { json_doc_init(&d); init = 1; }
    static const char *const keys[] = {"text", "title", ""};
    if (json_extract(&d, (const char *)data, size, keys, 3) != 0) return 0;
    for (size_t k = 0; k < 3; k++) {
        int kind = json_doc_kind(&d, k);
        if (kind != JSON_STRING && kind != JSON_STRING_ARRAY) continue;
        for (size_t j = 0; j < json_doc_count(&d, k); j++) {
            size_t n;
            const char *s = json_doc_string(&d, k, j, &n);
            if (s < d.buf || s + n > d.buf + d.buf_len || !utf8_valid((const unsigned char *)s, n)) {
                fprintf(stderr, "fuzz_json: extracted string is not valid UTF-8 inside the buffer\n");
                abort();
            }
        }
    }
    return 0;
}
