/* Learning-rate schedules as pure functions of (step, total steps): no state
 * is carried from step to step, so a resumed run recomputes exactly the
 * values the uninterrupted one used. Computed in double, rounded once to the
 * optimizer's float by the caller. */
#include "config.h"

#include <math.h>
#include <string.h>

#include <pipedream/trainer.h>

static const char *const kind_names[] = {"constant", "step", "poly", "cosine"};
#define N_KINDS ((int)(sizeof(kind_names) / sizeof(kind_names[0])))

const char *pd_lr_kind_name(pd_lr_kind kind)
{
    return (int)kind >= 0 && (int)kind < N_KINDS ? kind_names[kind] : "unknown";
}

pd_status pd_lr_kind_parse(const char *name, pd_lr_kind *out)
{
    for (int k = 0; name && k < N_KINDS; k++)
        if (strcmp(name, kind_names[k]) == 0) {
            *out = (pd_lr_kind)k;
            return PD_OK;
        }
    return PD_ERROR(PD_EINVAL, "unknown learning-rate schedule '%s' (known: constant, step, poly, cosine)",
                    name ? name : "(null)");
}

pd_status pd_lr_schedule_check(const pd_lr_schedule *s)
{
    if (!s)
        return PD_ERROR(PD_EINVAL, "lr schedule: NULL");
    if ((int)s->kind < 0 || (int)s->kind >= N_KINDS)
        return PD_ERROR(PD_EINVAL, "lr schedule: unknown kind %d", (int)s->kind);
    if (!isfinite(s->lr) || s->lr < 0)
        return PD_ERROR(PD_EINVAL, "lr schedule: lr %g must be finite and >= 0", s->lr);
    if (s->warmup_steps < 0)
        return PD_ERROR(PD_EINVAL, "lr schedule: warmup_steps %lld must be >= 0", (long long)s->warmup_steps);
    if (s->kind == PD_LR_STEP) {
        if (s->step_size <= 0)
            return PD_ERROR(PD_EINVAL, "lr schedule: step_size %lld must be > 0", (long long)s->step_size);
        if (!(s->gamma > 0 && s->gamma <= 1))
            return PD_ERROR(PD_EINVAL, "lr schedule: gamma %g must lie in (0, 1]", s->gamma);
    }
    if (s->kind == PD_LR_POLY && !(isfinite(s->power) && s->power > 0))
        return PD_ERROR(PD_EINVAL, "lr schedule: power %g must be finite and > 0", s->power);
    return PD_OK;
}

double pd_lr_schedule_at(const pd_lr_schedule *s, int64_t step, int64_t total_steps)
{
    if (step < 0)
        step = 0;
    if (step < s->warmup_steps)
        return s->lr * (double)(step + 1) / (double)s->warmup_steps;

    const int64_t t = step - s->warmup_steps;
    const int64_t span = total_steps - s->warmup_steps; /* decay steps */
    switch (s->kind) {
    case PD_LR_STEP:
        return s->lr * pow(s->gamma, (double)(t / s->step_size));
    case PD_LR_POLY:
        if (span <= 0 || t >= span)
            return 0.0;
        return s->lr * pow(1.0 - (double)t / (double)span, s->power);
    case PD_LR_COSINE:
        if (span <= 0 || t >= span)
            return 0.0;
        return s->lr * 0.5 * (1.0 + cos(M_PI * (double)t / (double)span));
    case PD_LR_CONSTANT:
    default:
        return s->lr;
    }
}
