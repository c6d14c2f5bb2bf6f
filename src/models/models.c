/* The model registry: name -> builder, and the option checks every builder
 * shares. New models add one row to `registry`. */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include <pipedream/models.h>

typedef struct model_entry {
    const char *name;
    const char *description;
    pd_status (*build)(pd_graph *g, const pd_model_options *opts, pd_model_io *io);
} model_entry;

static const model_entry registry[] = {
    {"lenet", "LeNet-5 (2 conv, 3 fc; 61,706 parameters on 1x28x28, 10 classes)", pd_model_lenet},
    /* mlp.c, vgg16.c, alexnet.c, resnet50.c, inception_v3.c */
    {"mlp", "multi-layer perceptron, 2 hidden layers of 256 (269,322 parameters on 1x28x28, 10 classes)", pd_model_mlp},
    {"vgg16", "VGG-16 as torchvision (138,357,544 parameters on 3x224x224, 1000 classes)", pd_model_vgg16},
    {"alexnet", "AlexNet as torchvision (61,100,840 parameters on 3x224x224, 1000 classes)", pd_model_alexnet},
    {"resnet50", "ResNet-50 as torchvision (25,557,032 parameters on 3x224x224, 1000 classes)", pd_model_resnet50},
    {"inception_v3", "Inception-v3 as torchvision, no aux head (23,834,568 parameters on 3x299x299, 1000 classes)",
     pd_model_inception_v3},
    /* s2vt.c */
    {"s2vt", "S2VT video captioning, 2 stacked LSTMs of 1000 (33,074,500 parameters on 4096 features, 10000 words)",
     pd_model_s2vt},
};
#define REGISTRY_SIZE ((int)(sizeof(registry) / sizeof(registry[0])))

const char *pd_model_name(int index) { return index >= 0 && index < REGISTRY_SIZE ? registry[index].name : NULL; }

static const model_entry *find_model(const char *name)
{
    for (int i = 0; i < REGISTRY_SIZE; i++)
        if (name && strcmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

const char *pd_model_description(const char *name)
{
    const model_entry *m = find_model(name);
    return m ? m->description : NULL;
}

pd_status pd_model_check_options(const pd_model_options *opts)
{
    if (!opts)
        return PD_ERROR(PD_EINVAL, "model: NULL options");
    if (opts->batch <= 0)
        return PD_ERROR(PD_EINVAL, "model: batch %d must be positive", opts->batch);
    if (opts->channels <= 0 || opts->height <= 0 || opts->width <= 0)
        return PD_ERROR(PD_EINVAL, "model: input %dx%dx%d (channels x height x width) must be positive",
                        opts->channels, opts->height, opts->width);
    if (opts->classes < 2)
        return PD_ERROR(PD_EINVAL, "model: %d classes; at least 2 are needed", opts->classes);
    if (!isfinite(opts->width_multiplier) || !(opts->width_multiplier > 0) || opts->width_multiplier > 64)
        return PD_ERROR(PD_EINVAL, "model: width multiplier %g must lie in (0, 64]",
                        (double)opts->width_multiplier);
    return PD_OK;
}

int pd_model_scale(int count, float width_multiplier)
{
    double scaled = floor((double)count * width_multiplier + 0.5);
    return scaled < 1 ? 1 : (int)scaled;
}

pd_status pd_model_build(const char *name, pd_graph *g, const pd_model_options *opts, pd_model_io *io)
{
    const model_entry *m = find_model(name);
    char known[256] = "";

    if (!m) {
        for (int i = 0; i < REGISTRY_SIZE; i++) {
            size_t used = strlen(known);
            snprintf(known + used, sizeof(known) - used, "%s%s", i ? ", " : "", registry[i].name);
        }
        return PD_ERROR(PD_ENOTFOUND, "unknown model '%s' (known: %s)", name ? name : "(null)", known);
    }
    if (!g || !io)
        return PD_ERROR(PD_EINVAL, "model %s: NULL graph or output", name);
    return m->build(g, opts, io);
}
