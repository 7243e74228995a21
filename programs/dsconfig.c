/*
 * dsconfig.c - Megatron-DeepSpeed's ds_config.json for mdstrain; see
 * dsconfig.h.  A small strict JSON reader (a tree in one array, recursion
 * bounded by MAX_DEPTH) and the interpretation of DeepSpeed's keys.
 */
#include "dsconfig.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64
#define MAX_FILE (16u << 20)

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jnode {
    int type;
    double num;              /* J_NUM, J_BOOL (0/1) */
    int integer;             /* J_NUM written without fraction or exponent */
    char *str;               /* J_STR (decoded; NUL-terminated, may hold no NUL inside: refused) */
    char *key;               /* the member name inside an object, else NULL */
    int child, next;         /* first child and next sibling (indices), -1 for none */
};

struct parser {
    const char *p, *end, *start;
    struct jnode *n;
    int nn, cap;
    char *err;
    size_t errlen;
};

static int perr(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parser *ps, const char *fmt, ...)
{
    /* line and column of the error, counted from the start */
    int line = 1, col = 1;
    for (const char *q = ps->start; q < ps->p && q < ps->end; q++, col++)
        if (*q == '\n') line++, col = 0;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(ps->err, ps->errlen, "invalid JSON at line %d column %d: %s", line, col, msg);
    return -1;
}

static void ws(struct parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int new_node(struct parser *ps, int type)
{
    if (ps->nn == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        struct jnode *n = realloc(ps->n, (size_t)cap * sizeof *n);
        if (!n) return perr(ps, "out of memory");
        ps->n = n;
        ps->cap = cap;
    }
    struct jnode *x = &ps->n[ps->nn];
    memset(x, 0, sizeof *x);
    x->type = type;
    x->child = x->next = -1;
    return ps->nn++;
}

static int hex4(const char *s, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | (cp >> 6 & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (< end), or 0. */
static size_t utf8_len(const unsigned char *s, const unsigned char *end)
{
    unsigned c = s[0];
    size_t n;
    unsigned min;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) n = 3, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) n = 4, min = 0x10000;
    else return 0;
    if ((size_t)(end - s) < n) return 0;
    unsigned cp = c & (0x3F >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

/* A string at ps->p (the opening quote) into a malloc'ed NUL-terminated copy. */
static char *parse_string(struct parser *ps)
{
    ps->p++;
    char *out = malloc((size_t)(ps->end - ps->p) + 1);
    if (!out) { perr(ps, "out of memory"); return NULL; }
    size_t o = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) { perr(ps, "control character in a string"); free(out); return NULL; }
        if (c != '\\') {
            size_t n = utf8_len((const unsigned char *)ps->p, (const unsigned char *)ps->end);
            if (!n) { perr(ps, "invalid UTF-8"); free(out); return NULL; }
            memcpy(out + o, ps->p, n);
            o += n;
            ps->p += n;
            continue;
        }
        if (ps->end - ps->p < 2) break;
        char e = ps->p[1];
        ps->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            static const char map[] = "\"\\/\b\f\n\r\t";
            out[o++] = map[simple - "\"\\/bfnrt"];
            continue;
        }
        unsigned cp, lo;
        if (e != 'u' || ps->end - ps->p < 4 || hex4(ps->p, &cp)) {
            ps->p -= 2;
            perr(ps, "bad escape in a string");
            free(out);
            return NULL;
        }
        ps->p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u' &&
            !hex4(ps->p + 2, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            ps->p += 6;
        }
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
            /* Python accepts both; no DeepSpeed key or value needs them */
            perr(ps, "\\u%04x in a string is not supported", cp);
            free(out);
            return NULL;
        }
        o += put_utf8(out + o, cp);
    }
    if (ps->p >= ps->end) { perr(ps, "unterminated string"); free(out); return NULL; }
    ps->p++;
    out[o] = 0;
    return out;
}

/* Python's json: RFC numbers, plus NaN, Infinity, -Infinity. */
static int parse_number(struct parser *ps, int id)
{
    const char *s = ps->p;
    static const char *const special[] = {"NaN", "Infinity", "-Infinity"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(special[i]);
        if ((size_t)(ps->end - s) >= l && memcmp(s, special[i], l) == 0) {
            ps->n[id].num = i == 0 ? NAN : i == 1 ? INFINITY : -INFINITY;
            ps->p += l;
            return 0;
        }
    }
    const char *q = s;
    if (q < ps->end && *q == '-') q++;
    if (q >= ps->end || !(*q >= '0' && *q <= '9')) return perr(ps, "unexpected character");
    if (*q == '0') q++;
    else while (q < ps->end && *q >= '0' && *q <= '9') q++;
    int integer = 1;
    if (q < ps->end && *q == '.') {
        integer = 0;
        q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) return perr(ps, "bad number");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        integer = 0;
        q++;
        if (q < ps->end && (*q == '+' || *q == '-')) q++;
        if (q >= ps->end || !(*q >= '0' && *q <= '9')) return perr(ps, "bad number");
        while (q < ps->end && *q >= '0' && *q <= '9') q++;
    }
    char buf[128];
    size_t l = (size_t)(q - s);
    if (l >= sizeof buf) return perr(ps, "number too long");
    memcpy(buf, s, l);
    buf[l] = 0;
    ps->n[id].num = strtod(buf, NULL);
    ps->n[id].integer = integer;
    ps->p = q;
    return 0;
}

static int parse_value(struct parser *ps, int depth);

static int parse_container(struct parser *ps, int id, int depth, int is_obj)
{
    char close = is_obj ? '}' : ']';
    ps->p++;
    ws(ps);
    int last = -1;
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return 0; }
    for (;;) {
        char *key = NULL;
        if (is_obj) {
            ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') return perr(ps, "expected a key");
            if (!(key = parse_string(ps))) return -1;
            /* DeepSpeed loads with dict_raise_error_on_duplicate_keys */
            for (int k = ps->n[id].child; k >= 0; k = ps->n[k].next)
                if (strcmp(ps->n[k].key, key) == 0) {
                    perr(ps, "duplicate key \"%s\"", key);
                    free(key);
                    return -1;
                }
            ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { free(key); return perr(ps, "expected ':'"); }
            ps->p++;
        }
        int c = parse_value(ps, depth + 1);
        if (c < 0) { free(key); return -1; }
        ps->n[c].key = key;
        if (last < 0) ps->n[id].child = c;
        else ps->n[last].next = c;
        last = c;
        ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == close) { ps->p++; return 0; }
        return perr(ps, "expected ',' or '%c'", close);
    }
}

static int parse_value(struct parser *ps, int depth)
{
    if (depth > MAX_DEPTH) return perr(ps, "nested deeper than %d", MAX_DEPTH);
    ws(ps);
    if (ps->p >= ps->end) return perr(ps, "unexpected end of file");
    char c = *ps->p;
    int id;
    if (c == '{' || c == '[') {
        if ((id = new_node(ps, c == '{' ? J_OBJ : J_ARR)) < 0) return -1;
        return parse_container(ps, id, depth, c == '{') < 0 ? -1 : id;
    }
    if (c == '"') {
        if ((id = new_node(ps, J_STR)) < 0) return -1;
        return (ps->n[id].str = parse_string(ps)) ? id : -1;
    }
    static const char *const words[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t l = strlen(words[i]);
        if ((size_t)(ps->end - ps->p) >= l && memcmp(ps->p, words[i], l) == 0) {
            if ((id = new_node(ps, i == 2 ? J_NULL : J_BOOL)) < 0) return -1;
            ps->n[id].num = i == 0;
            ps->p += l;
            return id;
        }
    }
    if ((id = new_node(ps, J_NUM)) < 0) return -1;
    return parse_number(ps, id) < 0 ? -1 : id;
}

static void free_tree(struct parser *ps)
{
    for (int i = 0; i < ps->nn; i++) {
        free(ps->n[i].str);
        free(ps->n[i].key);
    }
    free(ps->n);
}

/* ---- DeepSpeed's keys --------------------------------------------------- */

struct reader {
    struct parser *ps;
    ds_config *c;
    char *err;
    size_t errlen;
};

static int bad(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct reader *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, r->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static void refuse(struct reader *r, const char *what)
{
    if (!r->c->refused[0])
        snprintf(r->c->refused, sizeof r->c->refused, "%s", what);
}

/* A positive integer (DeepSpeed's batch keys); "auto" is a HF Trainer value. */
static int get_count(struct reader *r, const struct jnode *v, const char *name, uint64_t *out)
{
    if (v->type != J_NUM || !v->integer || !(v->num > 0) || v->num > 9007199254740992.0)
        return bad(r, "\"%s\" must be a positive integer", name);
    *out = (uint64_t)v->num;
    return 0;
}

static int get_number(struct reader *r, const struct jnode *v, const char *name, double *out)
{
    if (v->type != J_NUM || !isfinite(v->num)) return bad(r, "\"%s\" must be a number", name);
    *out = v->num;
    return 0;
}

static int get_bool(struct reader *r, const struct jnode *v, const char *name, int *out)
{
    if (v->type != J_BOOL) return bad(r, "\"%s\" must be true or false", name);
    *out = v->num != 0;
    return 0;
}

static int in_list(const char *key, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(key, *list) == 0) return 1;
    return 0;
}

/* fp16 / bf16: "enabled", and fp16's loss scaler. */
static int read_precision(struct reader *r, const struct jnode *o, int fp16)
{
    const char *sec = fp16 ? "fp16" : "bf16";
    if (o->type != J_OBJ) return bad(r, "\"%s\" must be an object", sec);
    ds_config *c = r->c;
    /* read for nothing: when inputs are cast, when gradients are checked */
    static const char *const ignored[] = {"auto_cast", "immediate_grad_update", "check_grad_overflow", NULL};
    /* true changes the training: refused (false is DeepSpeed's default) */
    static const char *const must_be_false[] = {"consecutive_hysteresis", "fp16_master_weights_and_grads", NULL};
    for (int k = o->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        double *dst = NULL;
        if (strcmp(v->key, "enabled") == 0) {
            if (get_bool(r, v, "enabled", fp16 ? &c->fp16 : &c->bf16)) return -1;
            continue;
        }
        if (in_list(v->key, must_be_false)) {
            int on = 0;
            if (get_bool(r, v, v->key, &on)) return -1;
            if (on) {
                char what[96];
                snprintf(what, sizeof what, "\"%s\": \"%s\": true", sec, v->key);
                refuse(r, what);
            }
            continue;
        }
        if (fp16) {
            if (strcmp(v->key, "loss_scale") == 0) dst = &c->loss_scale;
            else if (strcmp(v->key, "initial_scale_power") == 0) dst = &c->initial_scale_power;
            else if (strcmp(v->key, "loss_scale_window") == 0) dst = &c->loss_scale_window;
            else if (strcmp(v->key, "hysteresis") == 0) dst = &c->hysteresis;
            else if (strcmp(v->key, "min_loss_scale") == 0) dst = &c->min_loss_scale;
        }
        if (dst) {
            if (get_number(r, v, v->key, dst)) return -1;
        } else if (!in_list(v->key, ignored)) {
            return bad(r, "\"%s\": unknown key \"%s\"", sec, v->key);
        }
    }
    return 0;
}

/* Offload of the optimizer state or parameters: to "cpu" (where the CPU
 * backend keeps them anyway) or "none"; NVMe is refused. */
static int read_offload(struct reader *r, const struct jnode *o, const char *name)
{
    if (o->type != J_OBJ) return bad(r, "\"zero_optimization\": \"%s\" must be an object", name);
    for (int k = o->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        if (strcmp(v->key, "device") == 0) {
            if (v->type != J_STR) return bad(r, "\"%s\": \"device\" must be a string", name);
            if (strcmp(v->str, "nvme") == 0) {
                char what[96];
                snprintf(what, sizeof what, "\"zero_optimization\": \"%s\": \"device\": \"nvme\"", name);
                refuse(r, what);
            } else if (strcmp(v->str, "cpu") != 0 && strcmp(v->str, "none") != 0) {
                return bad(r, "\"%s\": \"device\" must be \"none\", \"cpu\" or \"nvme\", got \"%s\"", name, v->str);
            }
        }
        /* pin_memory, nvme_path, buffer_count, pipeline_read/write, ratio, fast_init: placement only */
    }
    return 0;
}

static int read_zero(struct reader *r, const struct jnode *o)
{
    if (o->type != J_OBJ) return bad(r, "\"zero_optimization\" must be an object");
    static const char *const knobs[] = {
        "allgather_partitions", "allgather_bucket_size", "reduce_scatter", "reduce_bucket_size", "overlap_comm",
        "contiguous_gradients", "round_robin_gradients", "elastic_checkpoint", "load_from_fp32_weights",
        "sub_group_size", "cpu_offload", "ignore_unused_parameters", "legacy_stage1", "use_multi_rank_bucket_allreduce",
        "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_param_persistence_threshold",
        "stage3_prefetch_bucket_size", "stage3_gather_16bit_weights_on_model_save", "stage3_model_persistence_threshold",
        "stage3_gather_fp16_weights_on_model_save", "prefetch_bucket_size", "param_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "memory_efficient_linear", NULL};
    for (int k = o->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        if (strcmp(v->key, "stage") == 0) {
            if (v->type != J_NUM || !v->integer || v->num < 0 || v->num > 3)
                return bad(r, "\"zero_optimization\": \"stage\" must be 0, 1, 2 or 3");
            r->c->stage = (int)v->num;
            r->c->have_stage = 1;
        } else if (strcmp(v->key, "offload_optimizer") == 0 || strcmp(v->key, "offload_param") == 0) {
            if (read_offload(r, v, v->key)) return -1;
        } else if (strncmp(v->key, "zero_hpz", 8) == 0 || strncmp(v->key, "zero_quantized", 14) == 0 ||
                   strcmp(v->key, "mics_shard_size") == 0) {
            char what[96];
            snprintf(what, sizeof what, "\"zero_optimization\": \"%s\"", v->key);   /* ZeRO++ / MiCS */
            refuse(r, what);
        } else if (!in_list(v->key, knobs)) {
            return bad(r, "\"zero_optimization\": unknown key \"%s\"", v->key);
        }
    }
    return 0;
}

/* One number of a scheduler's params: a list (one value per parameter
 * group, which DeepSpeed allows) is refused, mds's groups being its own. */
static int sched_number(struct reader *r, const struct jnode *v, double *out)
{
    if (v->type == J_ARR) {
        char what[96];
        snprintf(what, sizeof what, "\"scheduler\": \"%s\" as a list", v->key);
        refuse(r, what);
        return 0;
    }
    return get_number(r, v, v->key, out);
}

/* "scheduler": {"type": NAME, "params": {...}}, as DeepSpeed 0.10.3's
 * _scheduler_from_config builds it: NAME(optimizer, **params), so a
 * missing "params" or an unknown one fails there (TypeError), and the
 * constructor's defaults fill the rest.  Without "type" there is no
 * scheduler. */
static int read_scheduler(struct reader *r, const struct jnode *o)
{
    if (o->type != J_OBJ) return bad(r, "\"scheduler\" must be an object");
    train_ds_schedule *s = &r->c->sched;
    const struct jnode *type = NULL, *params = NULL;
    for (int k = o->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        if (strcmp(v->key, "type") == 0) type = v;
        else if (strcmp(v->key, "params") == 0) params = v;
        else return bad(r, "\"scheduler\": unknown key \"%s\"", v->key);
    }
    if (!type) return 0;
    if (type->type != J_STR) return bad(r, "\"scheduler\": \"type\" must be a string");
    int decay = strcmp(type->str, "WarmupDecayLR") == 0;
    if (!decay && strcmp(type->str, "WarmupLR") != 0) {
        char what[96];
        snprintf(what, sizeof what, "\"scheduler\": \"type\": \"%.40s\"", type->str);
        refuse(r, what);
        return 0;
    }
    if (!params || params->type != J_OBJ)
        return bad(r, "\"scheduler\": %s needs a \"params\" object (DeepSpeed calls %s(optimizer, **params))",
                   type->str, type->str);
    /* the constructor's defaults */
    s->type = decay ? TRAIN_DS_WARMUP_DECAY_LR : TRAIN_DS_WARMUP_LR;
    s->min_lr = 0.0;
    s->max_lr = 0.001;
    s->warmup_num_steps = 1000;
    s->last_batch_iteration = -1;
    int have_total = 0;
    for (int k = params->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        double *dst = NULL;
        if (strcmp(v->key, "warmup_min_lr") == 0) dst = &s->min_lr;
        else if (strcmp(v->key, "warmup_max_lr") == 0) dst = &s->max_lr;
        else if (strcmp(v->key, "warmup_num_steps") == 0) dst = &s->warmup_num_steps;
        else if (strcmp(v->key, "last_batch_iteration") == 0) dst = &s->last_batch_iteration;
        else if (decay && strcmp(v->key, "total_num_steps") == 0) dst = &s->total_num_steps, have_total = 1;
        if (dst) {
            if (sched_number(r, v, dst)) return -1;
        } else if (strcmp(v->key, "warmup_type") == 0) {
            if (v->type != J_STR) return bad(r, "\"scheduler\": \"warmup_type\" must be a string");
            s->linear = strcmp(v->str, "linear") == 0;
            if (!s->linear && strcmp(v->str, "log") != 0)   /* DeepSpeed warns and takes log */
                snprintf(r->c->sched_warning, sizeof r->c->sched_warning,
                         "Using unknown warmup_type: %.40s. The increasing function is set to default (log)", v->str);
        } else {
            return bad(r, "\"scheduler\": %s got an unexpected keyword argument \"%s\"", type->str, v->key);
        }
    }
    if (decay && !have_total)
        return bad(r, "\"scheduler\": WarmupDecayLR missing 1 required positional argument: \"total_num_steps\"");
    if (s->warmup_num_steps < 2) s->warmup_num_steps = 2;   /* max(2, warmup_num_steps) */
    return 0;
}

static int interpret(struct reader *r, const struct jnode *root)
{
    ds_config *c = r->c;
    /* keys that steer only logging, profiling, monitoring, timing or
       communication performance: the training result does not depend on them */
    static const char *const accepted[] = {
        "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "dump_state", "prescale_gradients",
        "gradient_predivide_factor", "flops_profiler", "comms_logger", "wandb", "tensorboard", "csv_monitor",
        "aio", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "activation_checkpointing",
        "communication_data_type", "sparse_gradients", "checkpoint", "timers", "train_batch_size_auto", NULL};
    /* keys whose meaning mds does not implement: refused by name */
    static const char *const refused[] = {
        "optimizer", "amp", "fp8", "compression_training", "curriculum_learning", "data_efficiency",
        "elasticity", "pipeline", "sparse_attention", "quantize_training", "progressive_layer_drop",
        "eigenvalue", "autotuning", "zero_quantized_weights", "zero_quantized_gradients", "seq_parallel_communication_data_type",
        "data_types", "hybrid_engine", "compile", NULL};
    if (root->type != J_OBJ) return bad(r, "the top level must be an object");
    for (int k = root->child; k >= 0; k = r->ps->n[k].next) {
        const struct jnode *v = &r->ps->n[k];
        const char *key = v->key;
        if (strcmp(key, "train_batch_size") == 0) {
            if (get_count(r, v, key, &c->train_batch_size)) return -1;
            c->have_train_batch = 1;
        } else if (strcmp(key, "train_micro_batch_size_per_gpu") == 0) {
            if (get_count(r, v, key, &c->micro_batch)) return -1;
            c->have_micro = 1;
        } else if (strcmp(key, "gradient_accumulation_steps") == 0) {
            if (get_count(r, v, key, &c->gas)) return -1;
            c->have_gas = 1;
        } else if (strcmp(key, "gradient_clipping") == 0) {
            if (get_number(r, v, key, &c->clip)) return -1;
            if (c->clip < 0) return bad(r, "\"%s\" must be >= 0", key);
            c->have_clip = 1;
        } else if (strcmp(key, "zero_optimization") == 0) {
            if (read_zero(r, v)) return -1;
        } else if (strcmp(key, "scheduler") == 0) {
            if (read_scheduler(r, v)) return -1;
        } else if (strcmp(key, "fp16") == 0 || strcmp(key, "bf16") == 0 || strcmp(key, "bfloat16") == 0) {
            if (read_precision(r, v, key[0] == 'f')) return -1;
        } else if (in_list(key, refused)) {
            char what[96];
            snprintf(what, sizeof what, "\"%s\"", key);
            refuse(r, what);
        } else if (!in_list(key, accepted)) {
            return bad(r, "unknown key \"%s\"", key);
        }
    }
    return 0;
}

int ds_config_read(const char *path, ds_config *c, int *io, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->loss_scale = c->initial_scale_power = c->loss_scale_window = c->hysteresis = c->min_loss_scale = -1;
    *io = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *io = 1;
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    char *buf = malloc(MAX_FILE);
    size_t n = buf ? fread(buf, 1, MAX_FILE, f) : 0;
    int rerr = !buf || ferror(f);
    fclose(f);
    if (rerr || n == MAX_FILE) {
        free(buf);
        *io = 1;
        snprintf(err, errlen, "cannot read '%s': %s", path, rerr ? "read error or out of memory" : "larger than 16 MiB");
        return -1;
    }
    char msg[400];
    struct parser ps = { buf, buf + n, buf, NULL, 0, 0, msg, sizeof msg };
    int rc = -1;
    int root = parse_value(&ps, 1);
    if (root >= 0) {
        ws(&ps);
        if (ps.p != ps.end) root = perr(&ps, "extra data after the value");
    }
    if (root >= 0) {
        struct reader r = { &ps, c, msg, sizeof msg };
        rc = interpret(&r, &ps.n[root]);
    }
    if (rc != 0) snprintf(err, errlen, "'%s': %s", path, msg);
    free_tree(&ps);
    free(buf);
    return rc;
}

int ds_config_batch(const ds_config *c, uint64_t dp, uint64_t *train, uint64_t *micro, uint64_t *gas, char *err,
                    size_t errlen)
{
    uint64_t tb = c->train_batch_size, mb = c->micro_batch, ga = c->gas;
    int t = c->have_train_batch, m = c->have_micro, g = c->have_gas;
    /* DeepSpeed's _configure_train_batch_size, integer divisions included */
    if (t && m && g) {
    } else if (t && m) {
        ga = tb / mb / dp;
    } else if (t && g) {
        mb = tb / dp / ga;
    } else if (m && g) {
        tb = mb * ga * dp;
    } else if (t) {
        ga = 1;
        mb = tb / dp;
    } else if (m) {
        tb = mb * dp;
        ga = 1;
    } else {
        snprintf(err, errlen, "either train_batch_size or train_micro_batch_size_per_gpu needs to be provided");
        return -1;
    }
    if (!(tb > 0) || !(mb > 0) || !(ga > 0) || tb != mb * ga * dp) {
        snprintf(err, errlen, "check batch related parameters: train_batch_size is not equal to micro_batch_per_gpu * "
                 "gradient_acc_step * world_size %" PRIu64 " != %" PRIu64 " * %" PRIu64 " * %" PRIu64, tb, mb, ga, dp);
        return -1;
    }
    *train = tb;
    *micro = mb;
    *gas = ga;
    return 0;
}
