/* test_backend_ops: one table of layer cases, run over every backend present.
 * For each case and backend the harness builds a graph (inputs + the layer
 * under test), fills the inputs, runs forward, seeds the backward pass with a
 * fixed random projection r (loss = sum(out * r)), and compares the analytic
 * gradients of every float input that requires a gradient and of every
 * trainable parameter with central finite differences. Across backends it also
 * compares outputs and gradients with the CPU's. Output is TAP. */
#ifndef BO_H
#define BO_H

#include <stddef.h>

#include <pipedream.h>

typedef enum {
    BO_FILL_UNIFORM = 0,        /* U(-1, 1) */
    BO_FILL_AWAY_FROM_ZERO = 1, /* |x| in [0.1, 1): no kink of ReLU within eps */
    BO_FILL_DISTINCT = 2,       /* a shuffled ramp, neighbours 0.05 apart: max-pool ties never flip */
} bo_fill;

typedef struct bo_case {
    const char *layer; /* the layer type under test, e.g. "conv2d" */
    const char *name;  /* what this case varies, e.g. "k3 s2 p1 groups=2" */
    /* Adds inputs and the layer under test to g and sets *out to the node
     * whose output is checked. Inputs that need gradients are created with
     * requires_grad. `arg` is the case's own configuration. */
    pd_status (*build)(pd_graph *g, const void *arg, int *out);
    const void *arg;
    bo_fill fill;     /* how float inputs are filled */
    int int_range;    /* i32 inputs are drawn from [0, int_range) */
    float eps;        /* finite-difference step (0: 1e-2) */
    double tolerance; /* bound on the relative gradient error (0: 1e-3) */
} bo_case;

/* The case groups, one per file cases_<group>.c. */
extern const bo_case bo_cases_basic[];
extern const size_t bo_cases_basic_count;
extern const bo_case bo_cases_conv_pool[];
extern const size_t bo_cases_conv_pool_count;
extern const bo_case bo_cases_norm_loss[];
extern const size_t bo_cases_norm_loss_count;
extern const bo_case bo_cases_sequence[];
extern const size_t bo_cases_sequence_count;

#endif
