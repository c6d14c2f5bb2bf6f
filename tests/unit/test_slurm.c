/* Slurm glue: hostlists expanded as `scontrol show hostnames` (Slurm 22.05)
 * expands them (the expected lists below are its output), every malformed
 * hostlist refused with the item named, and a task's place read from a
 * Slurm environment: ranks, node list, tasks per node, GPUs and the device a
 * local rank gets. */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipedream.h>
#include <pipedream/slurm.h>

/* Expands `text` and compares with the space-separated `expected`. */
static void check_expands(const char *text, const char *expected)
{
    pd_slurm_hostlist list = {0, NULL};
    char joined[4096] = "";

    assert_int_equal(pd_slurm_hostlist_expand(text, &list), PD_OK);
    for (int i = 0; i < list.count; i++) {
        if (i)
            strcat(joined, " ");
        strcat(joined, list.hosts[i]);
    }
    if (strcmp(joined, expected) != 0)
        fail_msg("'%s' expanded to '%s', scontrol gives '%s'", text, joined, expected);
    pd_slurm_hostlist_clear(&list);
    assert_null(list.hosts);
    assert_int_equal(list.count, 0);
}

static void check_refused(const char *text, const char *message_part)
{
    pd_slurm_hostlist list = {7, NULL};

    pd_error_clear();
    assert_int_equal(pd_slurm_hostlist_expand(text, &list), PD_EINVAL);
    if (!strstr(pd_last_error(), message_part))
        fail_msg("'%s': message '%s' lacks '%s'", text, pd_last_error(), message_part);
    assert_int_equal(list.count, 7); /* untouched */
}

static void test_hostlist_scontrol(void **state)
{
    (void)state;
    check_expands("node[01-03,7],gpu-a[1-2]", "node01 node02 node03 node7 gpu-a1 gpu-a2");
    check_expands("localhost", "localhost");
    check_expands("n[008-011],x[9-10]", "n008 n009 n010 n011 x9 x10");
    check_expands("n[01-3]", "n01 n02 n03");
    check_expands("n[1-03]", "n1 n2 n3");
    check_expands("n[1,1]", "n1 n1");
    check_expands("n1,n2 n3", "n1 n2 n3");
    check_expands("[1-2]", "1 2");
    check_expands("n[1-2],", "n1 n2");
    check_expands("a,[1-2]", "a 1 2");
    check_expands("a[1-2]b[3-4],c", "a1b3 a1b4 a2b3 a2b4 c");
    check_expands("rack[1-2]-n[1-2]", "rack1-n1 rack1-n2 rack2-n1 rack2-n2");
    check_expands("n[1-2]-[3]", "n1-3 n2-3");
    check_expands("", "");
    check_expands(" , ", "");
}

static void test_hostlist_refused(void **state)
{
    (void)state;
    check_refused("n[3-1]", "'n[3-1]': invalid range '3-1'");
    check_refused("n[]", "invalid range");
    check_refused("n[a-b]", "invalid range 'a-b'");
    check_refused("n[0-2-3]", "invalid range '0-2-3'");
    check_refused("ok,n[1-2]x", "'n[1-2]x': text after the last ']'");
    check_refused("n[1-2", "unbalanced '['");
    check_refused("n[1[2]]", "unbalanced '['");
    check_refused("n1]", "']' without '['");
    check_refused("n[1-1048577]", "more than 1048576 hosts");
    check_refused("a[1-1024]b[1-1025]", "more than 1048576 hosts");
    check_refused("n[1234567890123456789]", "invalid range");
}

/* A fake environment: NAME=value pairs, NULL-terminated. */
static const char *fake_getenv(const char *name, void *ctx)
{
    const char *const *vars = ctx;
    size_t n = strlen(name);

    for (int i = 0; vars[i]; i++)
        if (strncmp(vars[i], name, n) == 0 && vars[i][n] == '=')
            return vars[i] + n + 1;
    return NULL;
}

static void test_env_job(void **state)
{
    /* Task 5 of 7 on the second of three nodes, one GPU bound to it. */
    const char *vars[] = {"SLURM_JOB_ID=4711", "SLURM_PROCID=5", "SLURM_LOCALID=2", "SLURM_NTASKS=7",
                          "SLURM_NODEID=1", "SLURM_JOB_NODELIST=gpu[07-08],cpu1", "SLURM_TASKS_PER_NODE=3(x2),1",
                          "SLURM_GPUS_ON_NODE=4", "CUDA_VISIBLE_DEVICES=2", NULL};
    pd_slurm_env *env = NULL;

    (void)state;
    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)vars, &env), PD_OK);
    assert_true(env->in_job);
    assert_int_equal(env->job_id, 4711);
    assert_int_equal(env->rank, 5);
    assert_int_equal(env->local_rank, 2);
    assert_int_equal(env->world_size, 7);
    assert_int_equal(env->node_index, 1);
    assert_int_equal(env->nodes.count, 3);
    assert_string_equal(env->nodes.hosts[0], "gpu07");
    assert_string_equal(env->nodes.hosts[1], "gpu08");
    assert_string_equal(env->nodes.hosts[2], "cpu1");
    assert_int_equal(env->tasks_per_node[0], 3);
    assert_int_equal(env->tasks_per_node[1], 3);
    assert_int_equal(env->tasks_per_node[2], 1);
    assert_int_equal(env->gpus_on_node, 4);
    assert_int_equal(env->n_visible_gpus, 1);
    assert_string_equal(env->visible_gpus[0], "2");
    assert_int_equal(pd_slurm_env_gpu(env), 0); /* the one GPU Slurm bound is CUDA's device 0 */
    pd_slurm_env_destroy(env);
}

static void test_env_gpus(void **state)
{
    /* All of a node's GPUs visible to every task: local rank picks. */
    const char *shared[] = {"SLURM_LOCALID=3", "CUDA_VISIBLE_DEVICES=0,1,GPU-5d3c", NULL};
    const char *unset[] = {"SLURM_LOCALID=5", "SLURM_GPUS_ON_NODE=4", NULL};
    const char *none[] = {"SLURM_LOCALID=1", "SLURM_GPUS_ON_NODE=2", "CUDA_VISIBLE_DEVICES=NoDevFiles", NULL};
    const char *cpu[] = {"SLURM_LOCALID=1", NULL};
    pd_slurm_env *env = NULL;

    (void)state;
    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)shared, &env), PD_OK);
    assert_false(env->in_job);
    assert_int_equal(env->n_visible_gpus, 3);
    assert_string_equal(env->visible_gpus[2], "GPU-5d3c");
    assert_int_equal(env->gpus_on_node, 3);
    assert_int_equal(pd_slurm_env_gpu(env), 0);
    pd_slurm_env_destroy(env);

    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)unset, &env), PD_OK);
    assert_int_equal(env->n_visible_gpus, -1);
    assert_int_equal(pd_slurm_env_gpu(env), 1);
    pd_slurm_env_destroy(env);

    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)none, &env), PD_OK);
    assert_int_equal(env->n_visible_gpus, 0);
    assert_int_equal(pd_slurm_env_gpu(env), -1);
    pd_slurm_env_destroy(env);

    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)cpu, &env), PD_OK);
    assert_int_equal(env->gpus_on_node, -1);
    assert_int_equal(pd_slurm_env_gpu(env), -1);
    pd_slurm_env_destroy(env);
}

static void test_env_outside_job(void **state)
{
    const char *vars[] = {NULL};
    const char *old[] = {"SLURM_NPROCS=4", "SLURM_NODELIST=a[1-2]", NULL};
    pd_slurm_env *env = NULL;

    (void)state;
    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)vars, &env), PD_OK);
    assert_false(env->in_job);
    assert_int_equal(env->job_id, -1);
    assert_int_equal(env->rank, -1);
    assert_int_equal(env->world_size, -1);
    assert_int_equal(env->nodes.count, 0);
    assert_null(env->tasks_per_node);
    pd_slurm_env_destroy(env);

    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)old, &env), PD_OK);
    assert_int_equal(env->world_size, 4);
    assert_int_equal(env->nodes.count, 2);
    pd_slurm_env_destroy(env);
    pd_slurm_env_destroy(NULL);
}

static void check_env_refused(const char *const *vars, const char *message_part)
{
    pd_slurm_env *env = (pd_slurm_env *)&env; /* must stay untouched */

    pd_error_clear();
    assert_int_equal(pd_slurm_env_read(fake_getenv, (void *)vars, &env), PD_EINVAL);
    if (!strstr(pd_last_error(), message_part))
        fail_msg("message '%s' lacks '%s'", pd_last_error(), message_part);
    assert_ptr_equal(env, (pd_slurm_env *)&env);
}

static void test_env_refused(void **state)
{
    const char *rank[] = {"SLURM_PROCID=x1", NULL};
    const char *negative[] = {"SLURM_LOCALID=-1", NULL};
    const char *beyond[] = {"SLURM_PROCID=4", "SLURM_NTASKS=4", NULL};
    const char *job[] = {"SLURM_JOB_ID=12a", NULL};
    const char *list[] = {"SLURM_JOB_NODELIST=n[2-1]", NULL};
    const char *node[] = {"SLURM_JOB_NODELIST=n[1-2]", "SLURM_NODEID=2", NULL};
    const char *tasks_short[] = {"SLURM_JOB_NODELIST=n[1-3]", "SLURM_TASKS_PER_NODE=2(x2)", NULL};
    const char *tasks_long[] = {"SLURM_JOB_NODELIST=n[1-3]", "SLURM_TASKS_PER_NODE=2(x2),1,1", NULL};
    const char *tasks_bad[] = {"SLURM_JOB_NODELIST=n[1-3]", "SLURM_TASKS_PER_NODE=2(x2,1", NULL};
    const char *tasks_alone[] = {"SLURM_TASKS_PER_NODE=2", NULL};

    (void)state;
    check_env_refused(rank, "SLURM_PROCID='x1' is not a count");
    check_env_refused(negative, "SLURM_LOCALID='-1'");
    check_env_refused(beyond, "SLURM_PROCID=4 is not below SLURM_NTASKS=4");
    check_env_refused(job, "SLURM_JOB_ID='12a'");
    check_env_refused(list, "'n[2-1]': invalid range");
    check_env_refused(node, "SLURM_NODEID=2 but the node list 'n[1-2]' has 2 nodes");
    check_env_refused(tasks_short, "does not give one count for each of the 3 nodes");
    check_env_refused(tasks_long, "does not give one count for each of the 3 nodes");
    check_env_refused(tasks_bad, "SLURM_TASKS_PER_NODE='2(x2,1' is not a list");
    check_env_refused(tasks_alone, "without SLURM_JOB_NODELIST");
}

/* The process environment (lookup NULL) is read too. */
static void test_env_process(void **state)
{
    pd_slurm_env *env = NULL;

    (void)state;
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "2", 1);
    assert_int_equal(pd_slurm_env_read(NULL, NULL, &env), PD_OK);
    assert_int_equal(env->rank, 1);
    assert_int_equal(env->world_size, 2);
    pd_slurm_env_destroy(env);
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostlist_scontrol), cmocka_unit_test(test_hostlist_refused),
        cmocka_unit_test(test_env_job),           cmocka_unit_test(test_env_gpus),
        cmocka_unit_test(test_env_outside_job),   cmocka_unit_test(test_env_refused),
        cmocka_unit_test(test_env_process),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
