/* A per-rank timeline as gnuplot input: one rectangle per compute action
 * or wait, coloured by kind, ranks on the y axis. */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "sched/sched_int.h"

/* Colour index per operation (gnuplot's linetype palette). */
static int colour(pd_sched_op op)
{
    switch (op) {
    case PD_SCHED_FORWARD: return 1;
    case PD_SCHED_BACKWARD: return 2;
    case PD_SCHED_LOAD: return 3;
    case PD_SCHED_EVAL: return 4;
    case PD_SCHED_RECV_ACT:
    case PD_SCHED_RECV_GRAD: return 5;
    default: return 6;
    }
}

pd_status pd_sched_write_plot(const pd_sched *s, const pd_sched_result *r, const char *data_path,
                              const char *script_path, const char *png_path)
{
    FILE *data = fopen(data_path, "w"), *script = NULL;

    if (!data)
        return PD_ERROR(PD_EIO, "plot: cannot write %s: %s", data_path, strerror(errno));
    fprintf(data, "# rank start_ms end_ms colour op minibatch\n");
    for (int i = 0; i < r->n_events; i++) {
        const pd_sched_event *e = &r->events[i];
        const pd_sched_action *a = &s->actions[e->rank][e->action];
        if (e->end_ms > e->start_ms && a->op != PD_SCHED_SEND_ACT && a->op != PD_SCHED_SEND_GRAD &&
            a->op != PD_SCHED_ALLREDUCE)
            fprintf(data, "%d %.6f %.6f %d %s %d\n", e->rank, e->start_ms, e->end_ms, colour(a->op),
                    pd_sched_op_name(a->op), a->minibatch);
    }
    if (fclose(data) != 0)
        return PD_ERROR(PD_EIO, "plot: cannot write %s", data_path);
    script = fopen(script_path, "w");
    if (!script)
        return PD_ERROR(PD_EIO, "plot: cannot write %s: %s", script_path, strerror(errno));
    fprintf(script,
            "# pipedream simulate: per-rank timeline (%s). Run: gnuplot %s\n"
            "set terminal pngcairo size 1400,%d\n"
            "set output '%s'\n"
            "set xlabel 'time (ms)'\n"
            "set ylabel 'rank'\n"
            "set yrange [-0.5:%d.5] reverse\n"
            "set ytics 1\n"
            "set key outside right\n"
            "set style fill solid 0.9 noborder\n"
            "plot for [c=1:6] '%s' using ($4==c ? ($2+$3)/2 : 1/0):1:(($3-$2)/2):(0.4) with boxxyerror lc c \\\n"
            "  title word('forward backward load eval wait other', c)\n",
            pd_sched_type_name(s->type), script_path, 120 + 40 * s->n_ranks, png_path, s->n_ranks - 1, data_path);
    if (fclose(script) != 0)
        return PD_ERROR(PD_EIO, "plot: cannot write %s", script_path);
    return PD_OK;
}
