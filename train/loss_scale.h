/*
 * loss_scale.h - Megatron's gradient scaler (megatron/core/optimizer/
 * grad_scaler.py: DynamicGradScaler and ConstantGradScaler) for --fp16, one
 * implementation for every backend: it only sees scalars.
 *
 * It does not scale or check gradients itself (the trainer multiplies the
 * backward's seed by the scale and asks the backend's unscale_check for the
 * non-finite count) and does not print.
 */
#ifndef MDS_LOSS_SCALE_H
#define MDS_LOSS_SCALE_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * --fp16's dynamic loss scale: the loss is multiplied by `scale` before the
 * backward and the main gradients by 1/scale after it; an iteration whose
 * unscaled gradients hold a non-finite value is skipped (no optimizer step)
 * and, after `hysteresis` such iterations, halves the scale (not below
 * min_scale); `window` iterations in a row without one double it (and
 * restore the hysteresis).  --loss-scale X: a constant scale (overflowing
 * iterations are still skipped).  bf16 and fp32 have none: the scale is 1
 * and nothing is skipped.  Shared by every backend (it only sees scalars).
 */
typedef struct train_loss_scaler {
    int enabled;                 /* fp16: skipped iterations exist */
    int dynamic;                 /* DynamicGradScaler; else ConstantGradScaler */
    double scale, min_scale;     /* --initial-loss-scale (2^32) / --loss-scale; --min-loss-scale (1) */
    int window, hysteresis;      /* --loss-scale-window (1000), --hysteresis (2) */
    int growth_tracker, hysteresis_tracker;
} train_loss_scaler;

/* Megatron's defaults for a dynamic scaler; disabled: scale 1. */
void train_loss_scaler_init(train_loss_scaler *s, int enabled, int dynamic, double initial, double min_scale,
                            int window, int hysteresis);
/* DynamicGradScaler.update(found_inf). */
void train_loss_scaler_update(train_loss_scaler *s, int found_inf);

#ifdef __cplusplus
}
#endif

#endif /* MDS_LOSS_SCALE_H */
