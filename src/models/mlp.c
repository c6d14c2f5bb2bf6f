/* The multi-layer perceptron. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <pipedream/models.h>

#define MLP_HIDDEN 256

pd_status pd_model_mlp(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    pd_model_io got;
    int x;

    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    const int hidden = pd_model_scale(MLP_HIDDEN, opts->width_multiplier);
    PD_CHECK(pd_graph_flatten(g, "flatten", got.images, &x));
    PD_CHECK(pd_graph_linear(g, "fc1", x, hidden, true, &x));
    PD_CHECK(pd_graph_relu(g, "relu1", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc2", x, hidden, true, &x));
    PD_CHECK(pd_graph_relu(g, "relu2", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc3", x, opts->classes, true, &got.logits));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
