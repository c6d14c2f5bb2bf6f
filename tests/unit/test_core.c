/* Core: status messages, dtype conversions, shapes and tensors. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include <pipedream.h>

#include "kernels/pd_kernels_int.h"

static void test_error_message_has_location(void **state)
{
    pd_status s = PD_ERROR(PD_EINVAL, "bad flag --%s", "depth");
    assert_int_equal(s, PD_EINVAL);
    assert_non_null(strstr(pd_last_error(), "bad flag --depth"));
    assert_non_null(strstr(pd_last_error(), "test_core.c:"));
    assert_string_equal(pd_strerror(PD_ESHAPE), "shape mismatch");
    /* Wrapping the last message in a new one keeps it whole. */
    s = PD_ERROR(PD_EIO, "reading x.json: %s", pd_last_error());
    assert_int_equal(s, PD_EIO);
    assert_non_null(strstr(pd_last_error(), "reading x.json: bad flag --depth (test_core.c:"));
    pd_error_clear();
    assert_string_equal(pd_last_error(), "");
}

static void test_dtype_names_round_trip(void **state)
{
    for (int d = 0; d < PD_DTYPE_COUNT; d++) {
        pd_dtype parsed;
        assert_int_equal(pd_dtype_parse(pd_dtype_name((pd_dtype)d), &parsed), PD_OK);
        assert_int_equal(parsed, d);
    }
    pd_dtype parsed;
    assert_int_equal(pd_dtype_parse("BF16", &parsed), PD_OK);
    assert_int_equal(parsed, PD_BF16);
    assert_int_equal(pd_dtype_parse("f64", &parsed), PD_ENOTFOUND);
    assert_int_equal(pd_dtype_size(PD_F16), 2);
    assert_int_equal(pd_dtype_size(PD_U8), 1);
}

static void test_bf16_rounds_to_nearest_even(void **state)
{
    /* 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1). */
    float in[5] = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-20f, -2.5f, 3.0e38f};
    uint16_t bits[5];
    float out[5];

    assert_int_equal(pd_dtype_convert(PD_BF16, bits, PD_F32, in, 5), PD_OK);
    assert_int_equal(bits[0], 0x3f80);
    assert_int_equal(bits[1], 0x3f80);
    assert_int_equal(bits[2], 0x3f81);
    assert_int_equal(bits[3], 0xc020);
    assert_int_equal(pd_dtype_convert(PD_F32, out, PD_BF16, bits, 5), PD_OK);
    assert_true(out[0] == 1.0f && out[3] == -2.5f);
    assert_true(fabsf(out[4] - 3.0e38f) / 3.0e38f < 1e-2f);
}

static void test_f16_values(void **state)
{
    float in[6] = {1.0f, -2.0f, 65504.0f, 1e6f, 0x1p-24f, 0.1f};
    uint16_t bits[6];
    float out[6];

    assert_int_equal(pd_dtype_convert(PD_F16, bits, PD_F32, in, 6), PD_OK);
    assert_int_equal(bits[0], 0x3c00);
    assert_int_equal(bits[1], 0xc000);
    assert_int_equal(bits[2], 0x7bff); /* largest finite half */
    assert_int_equal(bits[3], 0x7c00); /* overflow to inf */
    assert_int_equal(bits[4], 0x0001); /* smallest subnormal */
    assert_int_equal(bits[5], 0x2e66); /* 0.1 rounds to 0x2e66 */
    assert_int_equal(pd_dtype_convert(PD_F32, out, PD_F16, bits, 6), PD_OK);
    assert_true(out[0] == 1.0f && out[1] == -2.0f && out[2] == 65504.0f && isinf(out[3]));
    assert_true(out[4] == 0x1p-24f);
    assert_true(fabsf(out[5] - 0.1f) < 1e-4f);
}

static void test_integer_conversions(void **state)
{
    int32_t ints[3] = {-3, 0, 1 << 20};
    float f[3];
    uint8_t bytes[3];

    assert_int_equal(pd_dtype_convert(PD_F32, f, PD_I32, ints, 3), PD_OK);
    assert_true(f[0] == -3.0f && f[2] == (float)(1 << 20));
    assert_int_equal(pd_dtype_convert(PD_U8, bytes, PD_F32, f, 3), PD_OK);
    assert_int_equal(bytes[0], 0); /* clamped */
    assert_int_equal(bytes[2], 255);
}

static void test_shapes(void **state)
{
    pd_shape a = pd_shape_make(4, (int64_t)2, (int64_t)3, (int64_t)4, (int64_t)5);
    pd_shape b = pd_shape_make(2, (int64_t)6, (int64_t)20);
    char buf[64];

    assert_int_equal(pd_shape_numel(&a), 120);
    assert_false(pd_shape_equal(&a, &b));
    assert_string_equal(pd_shape_format(&a, buf, sizeof(buf)), "[2,3,4,5]");
    assert_string_equal(pd_shape_format(&a, buf, 5), "[2,3");
    pd_shape scalar = pd_shape_make(0);
    assert_int_equal(pd_shape_numel(&scalar), 1);
}

static void test_tensor_lifecycle(void **state)
{
    pd_device *dev;
    pd_tensor *t;
    pd_shape shape = pd_shape_make(2, (int64_t)3, (int64_t)4);
    float host[12], back[12];

    assert_int_equal(pd_device_open("cpu", &dev), PD_OK);
    assert_int_equal(pd_tensor_create_zero(dev, PD_F32, &shape, &t), PD_OK);
    assert_true(pd_tensor_is_contiguous(t));
    assert_int_equal(t->stride[0], 4);
    assert_int_equal(pd_tensor_nbytes(t), 48);
    assert_int_equal(pd_tensor_copy_to_host(t, back, sizeof(back)), PD_OK);
    for (int i = 0; i < 12; i++) {
        assert_true(back[i] == 0.0f);
        host[i] = (float)i;
    }
    assert_int_equal(pd_tensor_copy_from_host(t, host, sizeof(host)), PD_OK);
    assert_int_equal(pd_tensor_copy_to_host(t, back, sizeof(back)), PD_OK);
    assert_memory_equal(host, back, sizeof(host));
    assert_int_equal(pd_tensor_copy_from_host(t, host, 8), PD_ESHAPE); /* wrong size is refused */
    pd_shape other = pd_shape_make(1, (int64_t)12);
    assert_int_equal(pd_tensor_expect(t, PD_F32, &other, "weights"), PD_ESHAPE);
    assert_non_null(strstr(pd_last_error(), "weights: expected f32 [12], got f32 [3,4]"));
    pd_tensor_destroy(t);
    pd_device_close(dev);
}

static void test_device_names(void **state)
{
    pd_device *dev = NULL;
    assert_int_equal(pd_device_open("tpu", &dev), PD_ENOTFOUND);
    assert_int_equal(pd_device_open("cpu:1", &dev), PD_ENOTFOUND);
    assert_int_equal(pd_device_open("cuda:x", &dev), PD_EINVAL);
    assert_null(dev);
}

/* Entries a device may leave NULL (pd_device_ops: "Optional"), by their
 * index among the table's function pointers. */
static bool is_optional_entry(size_t i)
{
    const size_t optional[] = {offsetof(pd_device_ops, export_dmabuf), offsetof(pd_device_ops, ipc_export),
                               offsetof(pd_device_ops, ipc_open), offsetof(pd_device_ops, ipc_close),
                               offsetof(pd_device_ops, flush_rdma_writes)};

    for (size_t k = 0; k < sizeof(optional) / sizeof(optional[0]); k++)
        if (optional[k] == i * sizeof(void (*)(void)))
            return true;
    return false;
}

static pd_status fake_export_dmabuf(pd_device *dev, const void *ptr, size_t bytes, int *fd, uint64_t *offset)
{
    return PD_ENOTSUP;
}
static pd_status fake_flush(pd_device *dev) { return PD_OK; }

static void test_unsupported_entry_names_itself(void **state)
{
    /* A backend that implements nothing gets the default table: every
     * entry reports PD_ENOTSUP naming itself and the device, none is NULL. */
    pd_device_ops empty = {0}, table;
    pd_device dev = {.kind = PD_DEVICE_CPU};
    pd_tensor t;
    pd_shape shape = pd_shape_make(1, (int64_t)4);

    snprintf(dev.name, sizeof(dev.name), "bare");
    pd_device_ops_overlay(&table, &empty);
    pd_tensor_view(&t, &dev, PD_F32, &shape, NULL);
    assert_int_equal(table.fill(&dev, &t, 1.0f), PD_ENOTSUP);
    assert_non_null(strstr(pd_last_error(), "fill is unsupported on device bare"));
    assert_int_equal(table.lrn_forward(&dev, NULL, &t, &t), PD_ENOTSUP);
    assert_non_null(strstr(pd_last_error(), "lrn_forward"));
    for (size_t i = 0; i < sizeof(table) / sizeof(void (*)(void)); i++)
        if (!is_optional_entry(i))
            assert_non_null(((void (**)(void))&table)[i]);
    /* The optional entries pass through as the backend has them: NULL for
     * one without, its own where it has one. */
    assert_null(table.export_dmabuf);
    assert_null(table.ipc_open);
    assert_null(table.flush_rdma_writes);
    pd_device_ops with = {.export_dmabuf = fake_export_dmabuf, .flush_rdma_writes = fake_flush};
    pd_device_ops_overlay(&table, &with);
    assert_ptr_equal(table.export_dmabuf, fake_export_dmabuf);
    assert_ptr_equal(table.flush_rdma_writes, fake_flush);
    assert_null(table.ipc_export);
    assert_non_null(table.fill);
    /* A CUDA name fails cleanly where the backend or the GPU is absent. */
    pd_device *gpu = NULL;
    pd_status s = pd_device_open("cuda", &gpu);
    if (s == PD_OK)
        pd_device_close(gpu);
    else
        assert_true(s == PD_ENOTSUP || s == PD_EDEVICE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_message_has_location),
        cmocka_unit_test(test_dtype_names_round_trip),
        cmocka_unit_test(test_bf16_rounds_to_nearest_even),
        cmocka_unit_test(test_f16_values),
        cmocka_unit_test(test_integer_conversions),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_tensor_lifecycle),
        cmocka_unit_test(test_device_names),
        cmocka_unit_test(test_unsupported_entry_names_itself),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
