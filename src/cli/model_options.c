/* The options that name a model, its input and how it is timed, shared by
 * `pipedream profile` and `pipedream bench step`. */
#include "config.h"

#include <stdint.h>

#include "cli/pd_cli.h"

int pd_cli_model_option(const char *verb, int c, const char *arg, pd_cli_model_args *a, int *bad)
{
    const int64_t dim_max = 1 << 16;
    char name[64];

#define OPTION_NAME(option) (snprintf(name, sizeof(name), "%s: %s", verb, option), name)
    switch (c) {
    case PD_CLI_MODEL_OPT_MODEL: a->model = arg; break;
    case PD_CLI_MODEL_OPT_BATCH:
        *bad = pd_cli_parse_int64(OPTION_NAME("--batch-size"), arg, 1, dim_max, &a->batch);
        break;
    case PD_CLI_MODEL_OPT_CHANNELS:
        *bad = pd_cli_parse_int64(OPTION_NAME("--channels"), arg, 1, dim_max, &a->channels);
        break;
    case PD_CLI_MODEL_OPT_HEIGHT:
        *bad = pd_cli_parse_int64(OPTION_NAME("--height"), arg, 1, dim_max, &a->height);
        break;
    case PD_CLI_MODEL_OPT_WIDTH: *bad = pd_cli_parse_int64(OPTION_NAME("--width"), arg, 1, dim_max, &a->width); break;
    case PD_CLI_MODEL_OPT_CLASSES:
        *bad = pd_cli_parse_int64(OPTION_NAME("--classes"), arg, 2, 1 << 24, &a->classes);
        break;
    case PD_CLI_MODEL_OPT_WIDTH_MULT:
        *bad = pd_cli_parse_double(OPTION_NAME("--width-mult"), arg, 1e-3, 64, &a->width_mult);
        break;
    case PD_CLI_MODEL_OPT_DEVICE: a->device = arg; break;
    case PD_CLI_MODEL_OPT_PRECISION: a->precision = arg; break;
    case PD_CLI_MODEL_OPT_WARMUP:
        *bad = pd_cli_parse_int64(OPTION_NAME("--warmup"), arg, 0, 1000000, &a->warmup);
        break;
    case PD_CLI_MODEL_OPT_ITERATIONS:
        *bad = pd_cli_parse_int64(OPTION_NAME("--iterations"), arg, 1, 1000000, &a->iterations);
        break;
    case PD_CLI_MODEL_OPT_SEED: *bad = pd_cli_parse_int64(OPTION_NAME("--seed"), arg, 0, INT64_MAX, &a->seed); break;
    default: return 0;
    }
#undef OPTION_NAME
    return 1;
}
