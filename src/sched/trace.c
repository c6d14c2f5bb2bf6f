/* Chrome trace-event JSON (the "JSON Object Format": {"traceEvents":
 * [...]}): one process per rank, its compute and waits on thread 0, its
 * transfers and all-reduces on thread 1; times in microseconds. */
#include "config.h"

#include <pipedream/json.h>

#include "sched/sched_int.h"

static bool is_comm(pd_sched_op op)
{
    return op == PD_SCHED_SEND_ACT || op == PD_SCHED_SEND_GRAD || op == PD_SCHED_ALLREDUCE;
}

static int add_meta(json_t *events, const char *name, int pid, int tid, const char *value)
{
    json_t *e = json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", name, "ph", "M", "pid", pid, "tid", tid, "args",
                          "name", value);
    return e ? json_array_append_new(events, e) : -1;
}

pd_status pd_sched_write_trace(const pd_sched *s, const pd_sched_result *r, const char *path)
{
    json_t *root = json_object(), *events = json_array();
    pd_status status = PD_OK;
    char label[128];
    int bad = !root || !events;

    for (int k = 0; !bad && k < s->n_ranks; k++) {
        if (s->rank_stage[k] < 0)
            continue;
        snprintf(label, sizeof(label), "rank %d (stage %d, replica %d)", k, s->rank_stage[k], s->rank_replica[k]);
        bad |= add_meta(events, "process_name", k, 0, label) || add_meta(events, "thread_name", k, 0, "compute") ||
               add_meta(events, "thread_name", k, 1, "communication");
    }
    for (int i = 0; !bad && i < r->n_events; i++) {
        const pd_sched_event *e = &r->events[i];
        const pd_sched_action *a = &s->actions[e->rank][e->action];
        json_t *ev;

        if (e->end_ms <= e->start_ms && a->op != PD_SCHED_STEP)
            continue; /* nothing to draw */
        pd_sched_action_format(a, label, sizeof(label));
        ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:{s:i, s:i, s:I}}", "name", label, "cat",
                       pd_sched_op_name(a->op), "ph", "X", "ts", e->start_ms * 1000.0,
                       "dur", (e->end_ms - e->start_ms) * 1000.0, "pid", e->rank, "tid", is_comm(a->op) ? 1 : 0,
                       "args", "minibatch", a->minibatch, "weight_version", a->weight_version, "bytes",
                       (json_int_t)a->bytes);
        bad |= !ev || json_array_append_new(events, ev);
    }
    if (bad || json_object_set_new(root, "traceEvents", events) || json_object_set_new(root, "displayTimeUnit",
                                                                                       json_string("ms"))) {
        if (!json_object_get(root, "traceEvents"))
            json_decref(events);
        json_decref(root);
        return PD_ERROR(PD_ENOMEM, "trace %s: out of host memory", path);
    }
    status = pd_json_write_file(path, root);
    json_decref(root);
    return status;
}
