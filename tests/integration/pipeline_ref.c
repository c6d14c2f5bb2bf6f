/* The sequential references of PipeDream's 1F1B, for
 * tests/integration/pipeline_exact.sh and pipeline_2bw.sh: one process
 * trains the whole model with SGD, minibatch by minibatch.
 *
 * Weight stashing (the default): minibatch b's forward and backward passes
 * use, for the parameters of stage s, the weights after max(0, b - w_s + 1)
 * updates (w_s = stages from s to the last: the 1F1B warm-up of an
 * unreplicated pipeline, so stage s runs w_s - 1 minibatches stale), and
 * the update applies that gradient to the newest weights.
 *
 * `2bw M` (PipeDream-2BW): minibatch b of batch k = b / M runs, at every
 * stage, on the weights after max(0, k - 1) updates; the gradients of the
 * batch's minibatches are summed in order, divided by their count, and
 * update k + 1 applies them to the newest weights: W(k+1) = W(k) - lr
 * grad f(W(k-1)). A last batch shorter than M updates with what it has.
 *
 * Prints one loss per line (%.9g, exact for f32).
 *
 * Usage: pipeline_ref PLAN PROFILE MODEL BATCH SIDE STEPS SEED LR [2bw M]
 * (synthetic data of 1 x SIDE x SIDE, as `pipedream train --dataset
 * synthetic --channels 1 --height SIDE --width SIDE` loads it; momentum
 * 0.9, constant lr: the command's defaults). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

static void die(const char *what)
{
    fprintf(stderr, "pipeline_ref: %s: %s\n", what, pd_last_error());
    exit(1);
}

/* The plan stage of every parameter ("<node>.<suffix>"), -1 for buffers. */
static int *param_stages(pd_graph *g, const pd_plan *plan, const pd_profile *profile, pd_param **params, int n)
{
    int *stage = malloc(sizeof(int) * (size_t)n);

    for (int i = 0; i < n; i++) {
        char node[sizeof(params[i]->name)];
        snprintf(node, sizeof(node), "%s", params[i]->name);
        *strrchr(node, '.') = '\0';
        stage[i] = -1;
        for (int s = 0; s < plan->n_stages && params[i]->trainable; s++)
            for (int l = 0; l < plan->stages[s].n_layers; l++)
                if (strcmp(pd_profile_node_at(profile, plan->stages[s].layers[l])->name, node) == 0)
                    stage[i] = s;
        if (params[i]->trainable && stage[i] < 0) {
            fprintf(stderr, "pipeline_ref: parameter %s is in no stage\n", params[i]->name);
            exit(1);
        }
    }
    (void)g;
    return stage;
}

/* Copies the trainable parameters (their gradients with `grads`) to
 * (save) or from the flat snapshot. */
static void snapshot_of(pd_param **params, int n, const int *stage, int only_stage, float *flat, int save, int grads)
{
    for (int i = 0; i < n; i++) {
        pd_tensor *t = grads ? &params[i]->grad : &params[i]->value;
        size_t bytes = pd_tensor_nbytes(t);
        if (stage[i] >= 0 && (only_stage < 0 || stage[i] == only_stage)) {
            if ((save ? pd_tensor_copy_to_host(t, flat, bytes) : pd_tensor_copy_from_host(t, flat, bytes)) != PD_OK)
                die("copy");
        }
        if (stage[i] >= 0)
            flat += bytes / sizeof(float);
    }
}

static void snapshot(pd_param **params, int n, const int *stage, int only_stage, float *flat, int save)
{
    snapshot_of(params, n, stage, only_stage, flat, save, 0);
}

int main(int argc, char **argv)
{
    if ((argc != 9 && argc != 11) || (argc == 11 && (strcmp(argv[9], "2bw") != 0 || atoi(argv[10]) < 1))) {
        fprintf(stderr, "usage: pipeline_ref PLAN PROFILE MODEL BATCH SIDE STEPS SEED LR [2bw M]\n");
        return 2;
    }
    const int batch = atoi(argv[4]), side = atoi(argv[5]), steps = atoi(argv[6]);
    const int accumulate = argc == 11 ? atoi(argv[10]) : 0; /* 2BW's M; 0: stashing */
    const uint64_t seed = strtoull(argv[7], NULL, 10);
    const float lr = (float)atof(argv[8]);
    pd_profile *profile;
    pd_plan *plan;
    pd_device *dev;
    pd_loader *loader;
    pd_loader_info info;
    pd_graph *g;
    pd_model_io io;
    pd_optimizer *opt;

    if (pd_profile_read_json(argv[2], &profile) || pd_plan_read_json(argv[1], profile, &plan))
        die("plan");
    pd_loader_options lo = {.kind = "synthetic", .split = "train", .batch = batch, .channels = 1, .height = side,
                            .width = side, .train = true, .seed = seed};
    if (pd_device_open("cpu", &dev) || pd_loader_open(&lo, &loader))
        die("data");
    pd_loader_get_info(loader, &info);
    pd_model_options mo = {.batch = batch, .channels = 1, .height = side, .width = side, .classes = info.classes,
                           .width_multiplier = 1.0f};
    if (pd_graph_create(dev, seed, &g) || pd_model_build(argv[3], g, &mo, &io) || pd_graph_allocate(g))
        die("model");
    pd_sgd_desc sgd = {.lr = lr, .momentum = 0.9f};
    if (pd_optimizer_create_sgd(g, &sgd, &opt))
        die("optimizer");
    pd_param **params;
    int n = pd_graph_params(g, &params);
    int *stage = param_stages(g, plan, profile, params, n);
    size_t floats = 0;
    for (int i = 0; i < n; i++)
        if (stage[i] >= 0)
            floats += (size_t)pd_tensor_numel(&params[i]->value);
    float *history = malloc(sizeof(float) * floats * (size_t)(steps + 1)); /* weights after k updates */
    float *images = malloc(sizeof(float) * (size_t)batch * side * side);
    int32_t *labels = malloc(sizeof(int32_t) * (size_t)batch);
    float *grad_sum = malloc(sizeof(float) * (floats ? floats : 1)); /* 2BW: the batch's gradients */
    float *grad = malloc(sizeof(float) * (floats ? floats : 1));
    snapshot(params, n, stage, -1, history, 1);

    for (int b = 0; b < steps; b++) {
        int valid;
        float loss;
        for (int s = 0; s < plan->n_stages && !accumulate; s++) {
            int warm = plan->n_stages - s, version = b - warm + 1 > 0 ? b - warm + 1 : 0;
            snapshot(params, n, stage, s, history + floats * (size_t)version, 0);
        }
        if (accumulate) { /* batch k on the weights after k - 1 updates, every stage */
            int k = b / accumulate;
            snapshot(params, n, stage, -1, history + floats * (size_t)(k > 0 ? k - 1 : 0), 0);
        }
        if (pd_loader_next(loader, images, labels, &valid) ||
            pd_tensor_copy_from_host(pd_graph_output(g, io.images), images, sizeof(float) * (size_t)batch * side * side) ||
            pd_tensor_copy_from_host(pd_graph_output(g, io.labels), labels, sizeof(int32_t) * (size_t)batch) ||
            pd_graph_forward(g, b, true) ||
            pd_tensor_copy_to_host(pd_graph_output(g, io.loss), &loss, sizeof(loss)) ||
            pd_graph_backward(g, b, io.loss, NULL))
            die("step");
        printf("%.9g\n", (double)loss);
        int update = b; /* updates before this one */
        if (accumulate) {
            /* As the stage sums its backward passes, then averages. */
            const int count = b % accumulate + 1;
            snapshot_of(params, n, stage, -1, count == 1 ? grad_sum : grad, 1, 1);
            for (size_t k = 0; count > 1 && k < floats; k++)
                grad_sum[k] += grad[k];
            if (count < accumulate && b + 1 < steps)
                continue;
            for (size_t k = 0; count > 1 && k < floats; k++)
                grad_sum[k] /= (float)count;
            snapshot_of(params, n, stage, -1, grad_sum, 0, 1);
            update = b / accumulate;
        }
        snapshot(params, n, stage, -1, history + floats * (size_t)update, 0); /* the newest weights */
        pd_optimizer_set_lr(opt, lr);
        if (pd_optimizer_step(opt))
            die("update");
        snapshot(params, n, stage, -1, history + floats * (size_t)(update + 1), 1);
    }
    free(grad);
    free(grad_sum);
    free(labels);
    free(images);
    free(history);
    free(stage);
    pd_optimizer_destroy(opt);
    pd_graph_destroy(g);
    pd_loader_destroy(loader);
    pd_device_close(dev);
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    return 0;
}
