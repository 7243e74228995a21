/*
 * loss_scale.c - Megatron's gradient scaler; see loss_scale.h.
 */
#include "loss_scale.h"

#include <string.h>

void train_loss_scaler_init(train_loss_scaler *s, int enabled, int dynamic, double initial, double min_scale,
                            int window, int hysteresis)
{
    memset(s, 0, sizeof *s);
    s->enabled = enabled;
    s->dynamic = enabled && dynamic;
    s->scale = enabled ? initial : 1.0;
    s->min_scale = min_scale;
    s->window = window;
    s->hysteresis = hysteresis;
    s->hysteresis_tracker = hysteresis;
}

void train_loss_scaler_update(train_loss_scaler *s, int found_inf)
{
    if (!s->dynamic)
        return;
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) {   /* torch.max(scale * backoff_factor, min_scale) */
            double b = s->scale * 0.5;
            s->scale = b > s->min_scale ? b : s->min_scale;
        }
    } else {
        s->growth_tracker++;
        if (s->growth_tracker == s->window) {
            s->growth_tracker = 0;
            s->hysteresis_tracker = s->hysteresis;
            s->scale *= 2.0;
        }
    }
}

