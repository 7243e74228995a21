/*
 * fuzz_pickle.c - fuzz target for the restricted pickle reader
 * (train/pickle.h): any bytes are refused with PK_ERR_FORMAT and a one-line
 * message, or read into a tree.  Invariants that abort() when broken:
 *   - the verdict is PK_OK or PK_ERR_FORMAT, and the same twice;
 *   - every node of an accepted tree (walked to a bounded depth, since memo
 *     references can make cycles) is well formed: strings NUL-terminated at
 *     their length, dicts of key/value pairs, globals on the allow-list,
 *     objects of a global applied to a tuple;
 *   - the writer (pk_write, protocol 4) takes every accepted tree or refuses
 *     it with PK_ERR_ARG, and what it writes reads back into a tree that it
 *     writes as the same bytes (a fixed point: sharing and framing survive).
 * Seeds: the llama fixture's .metadata, the gpt fixture's common state
 * (data.pkl, protocol 2), Python-written values (corpus/pickle/).
 */
#include "pickle.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void die(const char *what)
{
    fprintf(stderr, "fuzz_pickle: %s\n", what);
    abort();
}

static size_t visited;

static void walk(const pk_node *n, int depth)
{
    if (!n) die("a NULL node");
    if (depth > 64 || ++visited > 1000000) return;
    switch (n->kind) {
    case PK_STR: case PK_BYTES:
        if (!n->s || n->s[n->len]) die("a string not terminated at its length");
        break;
    case PK_GLOBAL: {
        const char *dot = strrchr(n->s, '.');
        char mod[256];
        if (!dot || (size_t)(dot - n->s) >= sizeof mod) die("a global without a module");
        memcpy(mod, n->s, (size_t)(dot - n->s));
        mod[dot - n->s] = 0;
        if (!pk_global_allowed(mod, dot + 1)) die("a global outside the allow-list");
        break;
    }
    case PK_DICT:
        if (n->n % 2) die("a dict with an odd number of items");
        /* fall through */
    case PK_TUPLE: case PK_LIST:
        for (size_t i = 0; i < n->n; i++) walk(n->items[i], depth + 1);
        break;
    case PK_OBJECT:
        if (!n->cls || n->cls->kind != PK_GLOBAL || !n->args || n->args->kind != PK_TUPLE) die("an object not made of a global and a tuple");
        walk(n->args, depth + 1);
        if (n->state) walk(n->state, depth + 1);
        break;
    case PK_NONE: case PK_BOOL: case PK_INT: case PK_FLOAT:
        break;
    default: die("an unknown node kind");
    }
}

static void rewrite(const pk_doc *d)
{
    unsigned char *p = NULL, *q = NULL;
    size_t n = 0, m = 0;
    pk_doc *back = NULL;
    int rc = pk_write(d, pk_root(d), 4, &p, &n);
    if (rc != PK_OK && rc != PK_ERR_ARG && rc != PK_ERR_NOMEM) die("pk_write: unknown error code");
    if (rc == PK_OK) {
        if (pk_parse(p, n, "rewritten", &back, NULL, 0) != PK_OK) die("pk_write wrote what pk_parse refuses");
        if (pk_write(back, pk_root(back), 4, &q, &m) != PK_OK || m != n || memcmp(p, q, n)) die("pk_write is not a fixed point");
    }
    free(p);
    free(q);
    pk_free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512] = "";
    pk_doc *d = NULL, *e = NULL;
    int rc = pk_parse(data, size, "fuzz", &d, err, sizeof err);
    if (rc != PK_OK && rc != PK_ERR_FORMAT && rc != PK_ERR_NOMEM) die("unknown error code");
    if (rc != PK_OK && (!err[0] || strchr(err, '\n') || d)) die("an error without a one-line message, or with a tree");
    if ((pk_parse(data, size, "fuzz", &e, err, sizeof err) == PK_OK) != (rc == PK_OK)) die("two parses disagree");
    if (rc == PK_OK) {
        visited = 0;
        walk(pk_root(d), 0);
        rewrite(d);
    }
    pk_free(e);
    pk_free(d);
    return 0;
}
