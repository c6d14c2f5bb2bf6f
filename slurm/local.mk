# Slurm glue: a task's place in its job from the Slurm environment, and
# Slurm's hostlist syntax. slurm/local/ starts a one-node Slurm for tests.
noinst_LTLIBRARIES += slurm/libpd_slurm.la
slurm_libpd_slurm_la_SOURCES = \
	slurm/hostlist.c \
	slurm/env.c
EXTRA_DIST += slurm/local/start.sh slurm/local/stop.sh slurm/local/pidfile.sh
