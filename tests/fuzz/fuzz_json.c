/*
 * fuzz_json.c - fuzz target for the JSON-line parser: any bytes, no crash, no
 * read outside the line, and every extracted string is valid UTF-8 whose
 * spans lie inside the output buffer.  A violation aborts.
 */
#include "json.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int valid_utf8(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i], len;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) { len = 2; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { len = 3; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { len = 4; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (i + len > n) return 0;
        for (unsigned k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += len;
    }
    return 1;
}

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
            if (s < d.buf || s + n > d.buf + d.buf_len || !valid_utf8((const unsigned char *)s, n)) {
                fprintf(stderr, "fuzz_json: extracted string is not valid UTF-8 inside the buffer\n");
                abort();
            }
        }
    }
    return 0;
}
