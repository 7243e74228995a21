/*
 * dsconfig.c - Megatron-DeepSpeed's ds_config.json for mdstrain; see
 * dsconfig.h.  The JSON is read by jsontree.h with Python's json options;
 * what Python accepts and DeepSpeed refuses (duplicate keys) is checked on
 * the tree, then DeepSpeed's keys are interpreted.
 */
#include "dsconfig.h"

#include "jsontree.h"
#include "readfile.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

/* ---- DeepSpeed's keys --------------------------------------------------- */

struct reader {
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
static int get_count(struct reader *r, const jt_node *v, const char *name, uint64_t *out)
{
    if (v->type != JT_NUMBER || !v->is_int || !(v->num > 0) || v->num > 9007199254740992.0)
        return bad(r, "\"%s\" must be a positive integer", name);
    *out = (uint64_t)v->num;
    return 0;
}

static int get_number(struct reader *r, const jt_node *v, const char *name, double *out)
{
    if (v->type != JT_NUMBER || !isfinite(v->num)) return bad(r, "\"%s\" must be a number", name);
    *out = v->num;
    return 0;
}

static int get_bool(struct reader *r, const jt_node *v, const char *name, int *out)
{
    if (v->type != JT_TRUE && v->type != JT_FALSE) return bad(r, "\"%s\" must be true or false", name);
    *out = v->type == JT_TRUE;
    return 0;
}

static int in_list(const char *key, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(key, *list) == 0) return 1;
    return 0;
}

/* fp16 / bf16: "enabled", and fp16's loss scaler. */
static int read_precision(struct reader *r, const jt_node *o, int fp16)
{
    const char *sec = fp16 ? "fp16" : "bf16";
    if (o->type != JT_OBJECT) return bad(r, "\"%s\" must be an object", sec);
    ds_config *c = r->c;
    /* read for nothing: when inputs are cast, when gradients are checked */
    static const char *const ignored[] = {"auto_cast", "immediate_grad_update", "check_grad_overflow", NULL};
    /* true changes the training: refused (false is DeepSpeed's default) */
    static const char *const must_be_false[] = {"consecutive_hysteresis", "fp16_master_weights_and_grads", NULL};
    for (size_t k = 0; k < o->len; k++) {
        const jt_node *v = &o->kids[k];
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
static int read_offload(struct reader *r, const jt_node *o, const char *name)
{
    if (o->type != JT_OBJECT) return bad(r, "\"zero_optimization\": \"%s\" must be an object", name);
    for (size_t k = 0; k < o->len; k++) {
        const jt_node *v = &o->kids[k];
        if (strcmp(v->key, "device") == 0) {
            if (v->type != JT_STRING) return bad(r, "\"%s\": \"device\" must be a string", name);
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

static int read_zero(struct reader *r, const jt_node *o)
{
    if (o->type != JT_OBJECT) return bad(r, "\"zero_optimization\" must be an object");
    static const char *const knobs[] = {
        "allgather_partitions", "allgather_bucket_size", "reduce_scatter", "reduce_bucket_size", "overlap_comm",
        "contiguous_gradients", "round_robin_gradients", "elastic_checkpoint", "load_from_fp32_weights",
        "sub_group_size", "cpu_offload", "ignore_unused_parameters", "legacy_stage1", "use_multi_rank_bucket_allreduce",
        "stage3_max_live_parameters", "stage3_max_reuse_distance", "stage3_param_persistence_threshold",
        "stage3_prefetch_bucket_size", "stage3_gather_16bit_weights_on_model_save", "stage3_model_persistence_threshold",
        "stage3_gather_fp16_weights_on_model_save", "prefetch_bucket_size", "param_persistence_threshold",
        "max_live_parameters", "max_reuse_distance", "memory_efficient_linear", NULL};
    for (size_t k = 0; k < o->len; k++) {
        const jt_node *v = &o->kids[k];
        if (strcmp(v->key, "stage") == 0) {
            if (v->type != JT_NUMBER || !v->is_int || v->num < 0 || v->num > 3)
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
static int sched_number(struct reader *r, const jt_node *v, double *out)
{
    if (v->type == JT_ARRAY) {
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
static int read_scheduler(struct reader *r, const jt_node *o)
{
    if (o->type != JT_OBJECT) return bad(r, "\"scheduler\" must be an object");
    train_ds_schedule *s = &r->c->sched;
    const jt_node *type = NULL, *params = NULL;
    for (size_t k = 0; k < o->len; k++) {
        const jt_node *v = &o->kids[k];
        if (strcmp(v->key, "type") == 0) type = v;
        else if (strcmp(v->key, "params") == 0) params = v;
        else return bad(r, "\"scheduler\": unknown key \"%s\"", v->key);
    }
    if (!type) return 0;
    if (type->type != JT_STRING) return bad(r, "\"scheduler\": \"type\" must be a string");
    int decay = strcmp(type->str, "WarmupDecayLR") == 0;
    if (!decay && strcmp(type->str, "WarmupLR") != 0) {
        char what[96];
        snprintf(what, sizeof what, "\"scheduler\": \"type\": \"%.40s\"", type->str);
        refuse(r, what);
        return 0;
    }
    if (!params || params->type != JT_OBJECT)
        return bad(r, "\"scheduler\": %s needs a \"params\" object (DeepSpeed calls %s(optimizer, **params))",
                   type->str, type->str);
    /* the constructor's defaults */
    s->type = decay ? TRAIN_DS_WARMUP_DECAY_LR : TRAIN_DS_WARMUP_LR;
    s->min_lr = 0.0;
    s->max_lr = 0.001;
    s->warmup_num_steps = 1000;
    s->last_batch_iteration = -1;
    int have_total = 0;
    for (size_t k = 0; k < params->len; k++) {
        const jt_node *v = &params->kids[k];
        double *dst = NULL;
        if (strcmp(v->key, "warmup_min_lr") == 0) dst = &s->min_lr;
        else if (strcmp(v->key, "warmup_max_lr") == 0) dst = &s->max_lr;
        else if (strcmp(v->key, "warmup_num_steps") == 0) dst = &s->warmup_num_steps;
        else if (strcmp(v->key, "last_batch_iteration") == 0) dst = &s->last_batch_iteration;
        else if (decay && strcmp(v->key, "total_num_steps") == 0) dst = &s->total_num_steps, have_total = 1;
        if (dst) {
            if (sched_number(r, v, dst)) return -1;
        } else if (strcmp(v->key, "warmup_type") == 0) {
            if (v->type != JT_STRING) return bad(r, "\"scheduler\": \"warmup_type\" must be a string");
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

static int interpret(struct reader *r, const jt_node *root)
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
    if (root->type != JT_OBJECT) return bad(r, "the top level must be an object");
    for (size_t k = 0; k < root->len; k++) {
        const jt_node *v = &root->kids[k];
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

/* What Python's json.load accepts but this reader does not (a NUL in a
 * string: no DeepSpeed key or value needs one), and DeepSpeed's duplicate
 * keys (it loads with object_pairs_hook=dict_raise_error_on_duplicate_keys,
 * which sees every object). */
static int check_tree(struct reader *r, const jt_node *n)
{
    const jt_node *dup;
    if ((n->type == JT_STRING && !jt_str(n)) || (n->key && strlen(n->key) != n->keylen))
        return bad(r, "line %u: \\u0000 in a string is not supported", (unsigned)n->line);
    if (jt_has_duplicate_key(n, &dup)) return bad(r, "duplicate key \"%s\" (line %u)", dup->key, (unsigned)dup->line);
    for (size_t k = 0; (n->type == JT_OBJECT || n->type == JT_ARRAY) && k < n->len; k++)
        if (check_tree(r, &n->kids[k])) return -1;
    return 0;
}

int ds_config_read(const char *path, ds_config *c, int *io, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->loss_scale = c->initial_scale_power = c->loss_scale_window = c->hysteresis = c->min_loss_scale = -1;
    *io = 0;
    unsigned char *buf;
    size_t n;
    int rf = read_whole_file(path, &buf, &n);
    if (rf != READFILE_OK) {
        *io = 1;
        snprintf(err, errlen, "cannot %s '%s': %s", rf == READFILE_OPEN ? "open" : "read", path,
                 rf == READFILE_OPEN ? strerror(errno) : rf == READFILE_NOMEM ? "out of memory" : "read error");
        return -1;
    }
    char msg[400];
    jt_doc *d = NULL;
    jt_err e;
    jt_options opt = { MAX_DEPTH, 1 };   /* Python's json: NaN, Infinity */
    struct reader r = { c, msg, sizeof msg };
    int rc = jt_parse_opts(&d, (const char *)buf, n, &opt, &e);
    if (rc) snprintf(msg, sizeof msg, "invalid JSON at line %u column %u: %s", (unsigned)e.line, (unsigned)e.col, e.why);
    else rc = check_tree(&r, jt_root(d)) ? -1 : interpret(&r, jt_root(d));
    if (rc != 0) snprintf(err, errlen, "'%s': %s", path, msg);
    jt_free(d);
    free(buf);
    return rc ? -1 : 0;
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
