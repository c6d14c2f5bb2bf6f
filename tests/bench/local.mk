# Benchmarks: built and run by `make bench` only (never by `make check`).
# BENCH_FLAGS passes options through, e.g. make bench BENCH_FLAGS=--csv.
EXTRA_PROGRAMS = tests/bench/bench_plan
CLEANFILES += tests/bench/bench_plan$(EXEEXT)
tests_bench_bench_plan_LDADD = $(TEST_LDADD)

PD_BENCH_PROFILES = $(abs_top_srcdir)/profiles/pipedream

bench: tests/bench/bench_plan$(EXEEXT)
	./tests/bench/bench_plan --profiles $(PD_BENCH_PROFILES) $(BENCH_FLAGS)
.PHONY: bench
