/*
 * fuzz_pickle.c - fuzz target for the restricted pickle reader
 * (train/pickle.h): any bytes are refused with PK_ERR_FORMAT and a one-line
 * message, or read into a tree.  Invariants that abort() when broken:
 *   - the verdict is PK_OK or PK_ERR_FORMAT, and the same twice;
 *   - every node of an accepted tree (walked to a bounded depth, since memo
 *     references can make cycles) is well formed: strings NUL-terminated at
 *     their length, dicts of key/value pairs, globals on the allow-list,
 *     objects of a global applied to a tuple.
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
    }
    pk_free(e);
    pk_free(d);
    return 0;
}
