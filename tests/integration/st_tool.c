/* The C side of the Python interoperability test.
 *   st_tool write PATH [numpy]  writes a fixed set of tensors (every dtype, a
 *                               0-d and an empty tensor, metadata format=pt);
 *                               "numpy" leaves out BF16, which numpy lacks
 *   st_tool dump PATH           prints the file as JSON: metadata, and per
 *                               tensor (in file order) name, dtype, shape, the
 *                               raw bytes in hex and, for dtypes pipedream
 *                               has, the values (integers exactly, floats
 *                               as f32, null if not finite)
 * Exit status 0 on success, 1 on any failure (message on stderr). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream/json.h>
#include <pipedream/kernels.h>
#include <pipedream/safetensors.h>

static int write_fixed(const char *path, int with_bf16)
{
    static const float weight[2][3] = {{0.5f, -1.25f, 3.0e-8f}, {1.0e30f, -0.0f, 65504.0f}};
    static const uint16_t bf16[3] = {0x3f80, 0xc0a0, 0x7f80};               /* 1, -5, inf */
    static const uint16_t f16[2][2] = {{0x3c00, 0xc200}, {0x0001, 0x7bff}}; /* 1, -3, 2^-24, 65504 */
    static const int32_t step = -2147483647 - 1;
    static const uint8_t mask[4] = {0, 1, 254, 255};
    static const int32_t ids[2][2] = {{7, -7}, {123456, 2147483647}};
    const char *meta[] = {"format", "pt"};
    pd_st_entry e[] = {
        {.name = "stage0.conv.weight",
         .dtype = PD_F32,
         .shape = pd_shape_make(2, (int64_t)2, (int64_t)3),
         .data = weight},
        {.name = "stage0.half", .dtype = PD_F16, .shape = pd_shape_make(2, (int64_t)2, (int64_t)2), .data = f16},
        {.name = "step", .dtype = PD_I32, .shape = pd_shape_make(0), .data = &step},
        {.name = "ids", .dtype = PD_I32, .shape = pd_shape_make(2, (int64_t)2, (int64_t)2), .data = ids},
        {.name = "mask", .dtype = PD_U8, .shape = pd_shape_make(1, (int64_t)4), .data = mask},
        {.name = "empty", .dtype = PD_F32, .shape = pd_shape_make(2, (int64_t)0, (int64_t)5), .data = NULL},
        {.name = "stage0.bias.bf16", .dtype = PD_BF16, .shape = pd_shape_make(1, (int64_t)3), .data = bf16},
    };
    int n = (int)(sizeof(e) / sizeof(e[0])) - (with_bf16 ? 0 : 1);

    if (pd_safetensors_write(path, e, n, meta, 1) != PD_OK) {
        fprintf(stderr, "st_tool: %s\n", pd_last_error());
        return 1;
    }
    return 0;
}

static char *hex(const void *data, size_t n)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;
    char *s = malloc(2 * n + 1);

    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        s[2 * i] = digits[p[i] >> 4];
        s[2 * i + 1] = digits[p[i] & 15];
    }
    s[2 * n] = '\0';
    return s;
}

/* Integers exactly, floats as f32; and a check that read_into gives the
 * same bytes as the mapped file. */
static json_t *values(pd_device *cpu, const pd_safetensors *st, const pd_st_info *info)
{
    size_t n = (size_t)pd_shape_numel(&info->shape);
    float *f = malloc((n ? n : 1) * sizeof(float));
    json_t *list = json_array();
    pd_tensor *t = NULL;

    if (!f || !list || pd_tensor_create(cpu, info->dtype, &info->shape, &t) != PD_OK ||
        pd_safetensors_read_into(st, info->name, t) != PD_OK || memcmp(t->data, info->data, info->nbytes) != 0 ||
        pd_dtype_convert(PD_F32, f, info->dtype, info->data, n) != PD_OK) {
        json_decref(list);
        list = NULL;
    }
    for (size_t i = 0; list && i < n; i++) {
        if (info->dtype == PD_I32)
            json_array_append_new(list, json_integer(((const int32_t *)t->data)[i]));
        else if (info->dtype == PD_U8)
            json_array_append_new(list, json_integer(((const uint8_t *)t->data)[i]));
        else
            json_array_append_new(list, isfinite(f[i]) ? json_real(f[i]) : json_null());
    }
    pd_tensor_destroy(t);
    free(f);
    return list;
}

static int dump(const char *path)
{
    pd_safetensors *st;
    pd_device *cpu;
    json_t *root = json_object(), *meta = json_object(), *tensors = json_array();
    const char *key, *value;
    int rc = 1;

    if (pd_device_open("cpu", &cpu) != PD_OK) {
        fprintf(stderr, "st_tool: %s\n", pd_last_error());
        return 1;
    }
    if (pd_safetensors_open(path, &st) != PD_OK) {
        fprintf(stderr, "st_tool: %s\n", pd_last_error());
        goto out_device;
    }
    for (int i = 0; i < pd_safetensors_metadata_count(st); i++) {
        pd_safetensors_metadata_entry(st, i, &key, &value);
        json_object_set_new(meta, key, json_string(value));
    }
    for (int i = 0; i < pd_safetensors_count(st); i++) {
        pd_st_info info;
        json_t *t = json_object(), *shape = json_array(), *v = NULL;
        char *bytes = NULL;
        pd_safetensors_entry(st, i, &info);
        for (int d = 0; d < info.shape.ndim; d++)
            json_array_append_new(shape, json_integer(info.shape.dim[d]));
        bytes = hex(info.data, info.nbytes);
        if (info.supported && !(v = values(cpu, st, &info))) {
            fprintf(stderr, "st_tool: reading '%s' failed: %s\n", info.name, pd_last_error());
            free(bytes);
            json_decref(t);
            json_decref(shape);
            goto out_file;
        }
        json_object_set_new(t, "name", json_string(info.name));
        json_object_set_new(t, "dtype", json_string(info.dtype_name));
        json_object_set_new(t, "shape", shape);
        json_object_set_new(t, "hex", json_string(bytes ? bytes : ""));
        json_object_set_new(t, "values", v ? v : json_null());
        json_array_append_new(tensors, t);
        free(bytes);
    }
    json_object_set(root, "metadata", meta);
    json_object_set(root, "tensors", tensors);
    if (json_dumpf(root, stdout, JSON_COMPACT) == 0 && printf("\n") > 0)
        rc = 0;
out_file:
    pd_safetensors_close(st);
out_device:
    pd_device_close(cpu);
    json_decref(meta);
    json_decref(tensors);
    json_decref(root);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "write") == 0)
        return write_fixed(argv[2], !(argc >= 4 && strcmp(argv[3], "numpy") == 0));
    if (argc == 3 && strcmp(argv[1], "dump") == 0)
        return dump(argv[2]);
    fprintf(stderr, "usage: st_tool write PATH [numpy] | st_tool dump PATH\n");
    return 2;
}
