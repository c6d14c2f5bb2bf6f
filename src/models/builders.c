/* Steps every image classifier of the zoo shares: its input nodes, and
 * torchvision's weight initialisation. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <pipedream/models.h>

pd_status pd_model_image_inputs(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    pd_model_io got = {.images = -1, .labels = -1, .logits = -1, .loss = -1, .words = -1};
    pd_shape image_shape, label_shape;

    PD_CHECK(pd_model_check_options(opts));
    image_shape = pd_shape_make(4, (int64_t)opts->batch, (int64_t)opts->channels, (int64_t)opts->height,
                                (int64_t)opts->width);
    label_shape = pd_shape_make(1, (int64_t)opts->batch);
    PD_CHECK(pd_graph_input(g, "images", PD_F32, &image_shape, false, &got.images));
    PD_CHECK(pd_graph_input(g, "labels", PD_I32, &label_shape, false, &got.labels));
    *io = got;
    return PD_OK;
}

/* Parameters are looked up from the newest: builders initialise a layer
 * right after adding it. */
static pd_param *find_param(pd_graph *g, const char *name)
{
    pd_param **params;
    int n = pd_graph_params(g, &params);

    for (int i = n - 1; i >= 0; i--)
        if (strcmp(params[i]->name, name) == 0)
            return params[i];
    return NULL;
}

pd_status pd_model_init_weight(pd_graph *g, const char *node, float std, bool zero_bias)
{
    char name[128];
    pd_param *weight, *bias;

    snprintf(name, sizeof(name), "%s.weight", node);
    weight = find_param(g, name);
    if (!weight)
        return PD_ERROR(PD_ENOTFOUND, "model: no parameter '%s' to initialise", name);
    if (std == 0.0f) {
        const pd_shape *shape = &weight->value.shape;
        int64_t fan_out = shape->dim[0];
        for (int d = 2; d < shape->ndim; d++)
            fan_out *= shape->dim[d];
        std = (float)sqrt(2.0 / (double)fan_out);
    }
    weight->init = PD_INIT_NORMAL;
    weight->init_a = std;
    if (zero_bias) {
        snprintf(name, sizeof(name), "%s.bias", node);
        bias = find_param(g, name);
        if (bias) {
            bias->init = PD_INIT_CONSTANT;
            bias->init_a = 0.0f;
        }
    }
    return PD_OK;
}
