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
 *        [width-mult F] [precision P]
 * (synthetic data of 1 x SIDE x SIDE, as `pipedream train --dataset
 * synthetic --channels 1 --height SIDE --width SIDE` loads it; for MODEL
 * s2vt, with SIDE 0, the captioning task of `--dataset s2vt-synthetic` at
 * its own sizes; momentum 0.9, constant lr: the command's defaults;
 * `precision bf16` trains as `--precision bf16` does). The
 * model, its data and the optimizer are the single-process trainer's, so
 * that only the weight versions are this program's. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>

#include "runtime/pd_runtime_int.h"

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

static void usage(void)
{
    fprintf(stderr, "usage: pipeline_ref PLAN PROFILE MODEL BATCH SIDE STEPS SEED LR [2bw M] [width-mult F] "
                    "[precision P]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    int accumulate = 0; /* 2BW's M; 0: stashing */
    float width_mult = 1.0f;
    pd_precision precision = PD_PRECISION_F32;

    if (argc < 9 || argc % 2 == 0)
        usage();
    for (int i = 9; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "2bw") == 0 && atoi(argv[i + 1]) >= 1)
            accumulate = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "width-mult") == 0 && atof(argv[i + 1]) > 0)
            width_mult = (float)atof(argv[i + 1]);
        else if (strcmp(argv[i], "precision") == 0 && pd_precision_parse(argv[i + 1], &precision) == PD_OK)
            continue;
        else
            usage();
    }
    const int batch = atoi(argv[4]), side = atoi(argv[5]), steps = atoi(argv[6]);
    const bool s2vt = strcmp(argv[3], "s2vt") == 0;
    const float lr = (float)atof(argv[8]);
    pd_profile *profile;
    pd_plan *plan;
    pd_trainer *trainer;
    pd_trainer_parts parts;

    if (s2vt && side != 0)
        usage();
    if (pd_profile_read_json(argv[2], &profile) || pd_plan_read_json(argv[1], profile, &plan))
        die("plan");
    const pd_trainer_options to = {
        .model = argv[3],
        .model_options = {.width_multiplier = width_mult},
        .train_data = {.kind = s2vt ? "s2vt-synthetic" : "synthetic", .split = "train", .batch = batch,
                       .channels = s2vt ? 0 : 1, .height = side, .width = side},
        .steps = steps,
        .optimizer = PD_OPTIMIZER_SGD,
        .lr = lr,
        .momentum = 0.9,
        .seed = strtoull(argv[7], NULL, 10),
        .precision = precision,
    };
    if (pd_trainer_create(&to, &trainer))
        die("model");
    pd_trainer_get_parts(trainer, &parts);
    pd_graph *g = parts.g;
    pd_optimizer *opt = parts.opt;
    pd_param **params;
    int n = pd_graph_params(g, &params);
    int *stage = param_stages(g, plan, profile, params, n);
    size_t floats = 0;
    for (int i = 0; i < n; i++)
        if (stage[i] >= 0)
            floats += (size_t)pd_tensor_numel(&params[i]->value);
    float *history = malloc(sizeof(float) * floats * (size_t)(steps + 1)); /* weights after k updates */
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
        if (pd_trainer_load(trainer, false, &valid) || pd_graph_forward(g, b, true) ||
            pd_tensor_copy_to_host(pd_graph_output(g, parts.io.loss), &loss, sizeof(loss)) ||
            pd_graph_backward(g, b, parts.io.loss, NULL))
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
    free(history);
    free(stage);
    pd_trainer_destroy(trainer);
    pd_plan_destroy(plan);
    pd_profile_destroy(profile);
    return 0;
}
