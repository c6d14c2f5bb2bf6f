/* Per-layer profiles: what the partitioner knows about a model on a device.
 * A profile lists the nodes of a model's graph in a topological order, each
 * with its forward and backward compute time per minibatch, the bytes of its
 * output activation and of its trainable weights, and its input edges.
 *
 * Profiles come from three places: pd_profile_measure() times every layer
 * of a model on a real device; pd_profile_read_json() reads a
 * `*.profile.json` file written by pd_profile_write_json(); and
 * pd_profile_import_graph_txt() reads the `graph.txt` profiles of the
 * original PipeDream (pd_profile_export_graph_txt() writes them).
 *
 * Data loading follows PipeDream's convention: an input node's forward time
 * is the time to produce its minibatch (the loader's), not compute. */
#ifndef PIPEDREAM_PROFILE_H
#define PIPEDREAM_PROFILE_H

#include <stdint.h>

#include <pipedream/graph.h>
#include <pipedream/models.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pd_profile pd_profile;

/* The type of input nodes, whatever their source. */
#define PD_PROFILE_INPUT_TYPE "input"

/* One node. In a profile, strings and `inputs` are owned by the profile. */
typedef struct pd_profile_node {
    /* Unique within the profile, non-empty, no white space: the layer's
     * name, or the node id of a graph.txt file ("node12"). */
    const char *name;
    /* The layer type ("conv2d", ...) of a measured profile or the module
     * class of an imported one ("Conv2d"); PD_PROFILE_INPUT_TYPE for inputs. */
    const char *type;
    /* Free text on one line: graph.txt's module description, or the layer
     * type and output shape of a measured node. */
    const char *description;
    double fwd_ms, bwd_ms;    /* per minibatch, >= 0; medians when measured */
    int64_t activation_bytes; /* the output for the whole minibatch, >= 0 */
    int64_t weight_bytes;     /* the trainable parameters, >= 0 */
    int64_t flops;            /* of the forward pass (pd_graph_node_flops); -1 unknown */
    int n_inputs;
    const int *inputs; /* indices of the nodes feeding this one, each smaller than its own */
} pd_profile_node;

/* What a profile is of, and how it was obtained. Strings are owned by the
 * profile once it is created. */
typedef struct pd_profile_info {
    const char *model;  /* non-empty */
    int batch;          /* samples per minibatch; 0 when unknown (imports) */
    /* Of the activations and their gradients as a training step stores
     * them, and so as they cross a stage boundary: f32, or bf16 for a
     * graph in --precision bf16 (pd_graph_set_precision; the weights stay
     * f32 masters, weight_bytes f32). Profiles from before bf16 say f32. */
    pd_dtype dtype;
    const char *device; /* "cpu", "cuda:0", ... or a description of the source's */
    const char *source; /* "measured", or where the profile was imported from */
    /* Measurement: warm-up steps, timed iterations and the median time of a
     * whole training step (forward + backward) measured alongside; all 0
     * for imports. */
    int warmup, iterations;
    double step_ms;
    /* How the data-loading time of the input nodes was obtained (one line). */
    const char *data_note;
} pd_profile_info;

/* Creates an empty profile described by `info` (copied). PD_EINVAL names a
 * bad field. Free with pd_profile_destroy. */
pd_status pd_profile_create(const pd_profile_info *info, pd_profile **out);

/* Frees the profile. NULL is ignored. */
void pd_profile_destroy(pd_profile *p);

/* Appends a node (strings and inputs copied) and sets *index (nullable) to
 * its index. PD_EINVAL naming the node and field for an empty or duplicate
 * name, white space in the name, a line break in the description, a time or
 * size that is negative or not finite, or an input index not below the new
 * node's. */
pd_status pd_profile_add_node(pd_profile *p, const pd_profile_node *node, int *index);

/* The profile's description; valid while the profile lives. */
const pd_profile_info *pd_profile_get_info(const pd_profile *p);

/* Number of nodes, and node `index` (0 <= index < size; NULL otherwise). */
int pd_profile_size(const pd_profile *p);
const pd_profile_node *pd_profile_node_at(const pd_profile *p, int index);

/* The index of the node called `name`, -1 if there is none. */
int pd_profile_find(const pd_profile *p, const char *name);

/* Sums over the nodes: forward + backward time of the non-input nodes (the
 * compute of one training step on one worker), the forward time of the
 * input nodes (data loading), and the trainable weight bytes. */
double pd_profile_compute_ms(const pd_profile *p);
double pd_profile_data_loading_ms(const pd_profile *p);
int64_t pd_profile_weight_bytes(const pd_profile *p);

/* ---- measurement (profile.c) ---- */

/* How to measure. */
typedef struct pd_profile_options {
    int warmup;     /* whole training steps run before timing, >= 0 */
    int iterations; /* timed repetitions of every node, >= 1; medians are kept */
    /* Optional: writes one minibatch into the graph's input nodes (real
     * data from a loader). It is timed as the data-loading entry, which goes
     * to the first input node. NULL: the inputs hold valid random values
     * (i32 inputs within the range their consumers accept) written once,
     * and the data-loading time is 0. */
    pd_status (*feed)(void *ctx, pd_graph *g);
    void *feed_ctx;
    const char *feed_note; /* what `feed` loads, for the data note */
    /* pd_profile_measure: the graph's precision (pd_graph_set_precision
     * before allocating; 0: f32). pd_profile_measure_graph reads what the
     * given graph stores instead. */
    pd_precision precision;
} pd_profile_options;

/* Measures every node of the allocated graph `g`, whose last node must be a
 * scalar loss: `warmup` whole training steps, then `iterations` times the
 * forward pass of each node in topological order and the backward pass of
 * each in reverse order (pd_graph_run_node), timed one by one between two
 * device events (pd_device_ops.event_*: CUDA events on a GPU, the monotonic
 * clock on the CPU), the device synchronised before and after each (so on a
 * GPU a node's time includes its launch latency); each time kept is the
 * median over the iterations. A whole step (pd_graph_forward +
 * pd_graph_backward) is timed in every iteration too and its median kept as
 * step_ms; the sum of the per-node medians is logged with it, with a warning
 * when they differ by more than a factor 1.5 (on a CPU shared with other
 * work, a whole step is descheduled more often than a short node, whose
 * median then skips the disturbed samples). The
 * node's activation bytes (in the dtype the graph stores the output in:
 * half of f32's for the bf16 tensors of a graph in bf16), trainable weight
 * bytes (f32) and FLOPs come from the graph; the profile's dtype is bf16
 * when the graph stores any activation in bf16, else f32. `model` names
 * the profile; the batch is the first input's first dimension. The
 * graph's input values are overwritten; its parameters are not updated. PD_EINVAL for bad options, PD_ENOTSUP for an input whose
 * valid values cannot be chosen, and what the passes return. */
pd_status pd_profile_measure_graph(pd_graph *g, const char *model, const pd_profile_options *opts,
                                   pd_profile **out);

/* Builds the registered model `model` for `model_opts` on `dev` (borrowed)
 * with parameters from `seed` in opts->precision, allocates it and
 * measures it as pd_profile_measure_graph does. */
pd_status pd_profile_measure(const char *model, const pd_model_options *model_opts, pd_device *dev, uint64_t seed,
                             const pd_profile_options *opts, pd_profile **out);

/* ---- files ---- */

/* Writes the profile as JSON (format "pipedream-profile", version 1),
 * atomically (pd_json_write_file). PD_EIO on failure. */
pd_status pd_profile_write_json(const pd_profile *p, const char *path);

/* Reads a file written by pd_profile_write_json. Every field is validated;
 * PD_EFORMAT names the file and the field ("x.profile.json: nodes[3].fwd_ms:
 * expected a number >= 0, got -1"), PD_EIO/PD_ENOTFOUND an unreadable file. */
pd_status pd_profile_read_json(const char *path, pd_profile **out);

/* Reads a PipeDream graph.txt profile (format in
 * ../shared/pipedream-profiles/README.md): node lines
 * "ID -- DESCRIPTION -- forward_compute_time=F, backward_compute_time=B,
 * activation_size=A, parameter_size=P" (an optional " -- stage_id=S" after
 * them is accepted and ignored; A may be a list "[a; b]", whose sum is kept)
 * and edge lines "\tID -- ID". Nodes may come in any order; they are sorted
 * topologically, earliest in the file first among those ready, and each
 * node's inputs keep the order of the edge lines. Nodes whose description
 * starts with "Input" get the type PD_PROFILE_INPUT_TYPE. The profile's
 * model is `model`, its batch `batch` (0: unknown), dtype f32. PD_EFORMAT
 * names the path and line number of a malformed line, a duplicate node, an
 * edge to an unknown node, and a cycle. */
pd_status pd_profile_import_graph_txt(const char *path, const char *model, int batch, pd_profile **out);

/* Writes the profile in graph.txt form: one node line per node in the
 * profile's order, then one edge line per input. Numbers are printed with
 * three decimals where that reads back exactly, else with 17 significant
 * digits, so an import of the file gives the same numbers. Input nodes whose
 * description does not start with "Input" are described as "Input(...)" so
 * PipeDream recognises them. PD_EIO on failure; the file is replaced
 * atomically. */
pd_status pd_profile_export_graph_txt(const pd_profile *p, const char *path);

#ifdef __cplusplus
}
#endif
#endif
