/* pipedream: pipeline-parallel DNN training (PipeDream) in C.
 * The installed API: status codes and logging, tensors and devices, the
 * device compute table, the layer graph and optimizers, JSON and safetensors
 * files, data sets and the model registry. */
#ifndef PIPEDREAM_H
#define PIPEDREAM_H

#include <pipedream/status.h>
#include <pipedream/log.h>
#include <pipedream/tensor.h>
#include <pipedream/kernels.h>
#include <pipedream/graph.h>
#include <pipedream/optim.h>
#include <pipedream/json.h>
#include <pipedream/safetensors.h>
#include <pipedream/data.h>
#include <pipedream/models.h>
#include <pipedream/loader.h>
#include <pipedream/sequence.h>
#include <pipedream/profile.h>
#include <pipedream/checkpoint.h>
#include <pipedream/trainer.h>
#include <pipedream/weight_ring.h>
#include <pipedream/plan.h>
#include <pipedream/slurm.h>
#include <pipedream/topology.h>
#include <pipedream/sched.h>
#include <pipedream/transport.h>
#include <pipedream/pipeline.h>

#endif
