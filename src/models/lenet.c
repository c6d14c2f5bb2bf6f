/* LeNet-5 as commonly trained on (Fashion-)MNIST: ReLU activations and max
 * pooling in place of the original's scaled tanh and subsampling, and a
 * padded first convolution so 28x28 inputs keep the 32x32 geometry. */
#include "config.h"

#include <pipedream/models.h>

pd_status pd_model_lenet(pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    const pd_conv2d_desc conv1 = {5, 5, 1, 1, 2, 2, 1, 1, 1};
    const pd_conv2d_desc conv2 = {5, 5, 1, 1, 0, 0, 1, 1, 1};
    const pd_pool2d_desc pool = {PD_POOL_MAX, 2, 2, 2, 2, 0, 0, false, false};
    pd_model_io got;
    int x;

    PD_CHECK(pd_model_image_inputs(g, opts, &got));
    const float m = opts->width_multiplier;
    PD_CHECK(pd_graph_conv2d(g, "conv1", got.images, pd_model_scale(6, m), &conv1, true, &x));
    PD_CHECK(pd_graph_relu(g, "relu1", x, &x));
    PD_CHECK(pd_graph_pool2d(g, "pool1", x, &pool, &x));
    PD_CHECK(pd_graph_conv2d(g, "conv2", x, pd_model_scale(16, m), &conv2, true, &x));
    PD_CHECK(pd_graph_relu(g, "relu2", x, &x));
    PD_CHECK(pd_graph_pool2d(g, "pool2", x, &pool, &x));
    PD_CHECK(pd_graph_flatten(g, "flatten", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc1", x, pd_model_scale(120, m), true, &x));
    PD_CHECK(pd_graph_relu(g, "relu3", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc2", x, pd_model_scale(84, m), true, &x));
    PD_CHECK(pd_graph_relu(g, "relu4", x, &x));
    PD_CHECK(pd_graph_linear(g, "fc3", x, opts->classes, true, &got.logits));
    PD_CHECK(pd_graph_softmax_cross_entropy(g, "loss", got.logits, got.labels, &got.loss));
    *io = got;
    return PD_OK;
}
