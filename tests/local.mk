# Tests: cmocka unit programs and the backend-ops harness speak TAP (one
# line per case); shell integration tests use the plain driver, where exit
# 77 means "skipped" (missing hardware) and says why.
TEST_EXTENSIONS = .sh
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/config/build-aux/tap-driver.sh
AM_LOG_DRIVER_FLAGS = --ignore-exit --comments
SH_LOG_DRIVER = $(SHELL) $(top_srcdir)/config/build-aux/test-driver
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = CMOCKA_MESSAGE_OUTPUT=TAP; export CMOCKA_MESSAGE_OUTPUT; \
	top_builddir='$(abs_top_builddir)'; top_srcdir='$(abs_top_srcdir)'; \
	export top_builddir top_srcdir; OMP_NUM_THREADS=2; OMP_WAIT_POLICY=passive; export OMP_NUM_THREADS OMP_WAIT_POLICY;

TEST_LDADD = src/libpipedream.la $(OPENBLAS_LDFLAGS) $(OPENBLAS_LIBS) $(JANSSON_LDFLAGS) $(JANSSON_LIBS)

# The backend-ops harness (needs no cmocka).
check_PROGRAMS += tests/backend_ops/test_backend_ops
tests_backend_ops_test_backend_ops_SOURCES = \
	tests/backend_ops/bo.h \
	tests/backend_ops/harness.c \
	tests/backend_ops/cases_basic.c \
	tests/backend_ops/cases_conv_pool.c \
	tests/backend_ops/cases_norm_loss.c \
	tests/backend_ops/cases_sequence.c
tests_backend_ops_test_backend_ops_LDADD = $(TEST_LDADD)
TESTS += tests/backend_ops/test_backend_ops

# Plain TAP, for the programs below that build without cmocka.
noinst_HEADERS += tests/unit/test_tap.h

# The CUDA entries against the CPU's (plain TAP; skips without a GPU).
check_PROGRAMS += tests/unit/test_cuda_ops
tests_unit_test_cuda_ops_LDADD = $(TEST_LDADD)
TESTS += tests/unit/test_cuda_ops

# Channels with device memory: staging on the cpu device, CUDA when present (plain TAP).
check_PROGRAMS += tests/unit/test_transport_gpu
tests_unit_test_transport_gpu_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS)
tests_unit_test_transport_gpu_LDADD = $(TEST_LDADD) $(MPI_LIBS)
TESTS += tests/unit/test_transport_gpu

if HAVE_CMOCKA
noinst_HEADERS += tests/unit/test_files.h tests/unit/test_plans.h tests/unit/test_topo_xml.h tests/unit/test_plan_search.h
UNIT_TESTS = \
	tests/unit/test_core \
	tests/unit/test_caching_allocator \
	tests/unit/test_mem_plan \
	tests/unit/test_graph \
	tests/unit/test_graph_bf16 \
	tests/unit/test_graph_subset \
	tests/unit/test_cpu_conv_linear_pool \
	tests/unit/test_cpu_norm_loss \
	tests/unit/test_cpu_optimizer \
	tests/unit/test_cpu_sequence \
	tests/unit/test_json \
	tests/unit/test_safetensors \
	tests/unit/test_data \
	tests/unit/test_models \
	tests/unit/test_zoo \
	tests/unit/test_loader \
	tests/unit/test_checkpoint \
	tests/unit/test_profile \
	tests/unit/test_s2vt \
	tests/unit/test_plan_states \
	tests/unit/test_plan_pipedream \
	tests/unit/test_plan_default \
	tests/unit/test_plan_file \
	tests/unit/test_plan_coarsen \
	tests/unit/test_topology \
	tests/unit/test_binding \
	tests/unit/test_transport \
	tests/unit/test_sched \
	tests/unit/test_sim_plan \
	tests/unit/test_weight_ring \
	tests/unit/test_cluster_gather \
	tests/unit/test_pipeline_segments \
	tests/unit/test_slurm
check_PROGRAMS += $(UNIT_TESTS)
TESTS += $(UNIT_TESTS)
tests_unit_test_core_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_caching_allocator_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_mem_plan_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_graph_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_graph_bf16_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_graph_subset_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_cpu_conv_linear_pool_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_cpu_norm_loss_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_cpu_optimizer_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_cpu_sequence_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_json_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_safetensors_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_data_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_models_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_zoo_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_loader_CPPFLAGS = $(AM_CPPFLAGS) $(TURBOJPEG_CPPFLAGS)
tests_unit_test_loader_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS) $(TURBOJPEG_LDFLAGS) $(TURBOJPEG_LIBS)
tests_unit_test_checkpoint_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_profile_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_s2vt_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_plan_states_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_plan_pipedream_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_plan_default_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_plan_file_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_plan_coarsen_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_topology_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_binding_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_transport_SOURCES = tests/unit/test_transport.c tests/unit/transport_peer.c tests/unit/transport_peer.h
tests_unit_test_transport_CPPFLAGS = $(AM_CPPFLAGS) $(MPI_CFLAGS) $(VERBS_CPPFLAGS) $(RDMACM_CPPFLAGS)
tests_unit_test_transport_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS) $(MPI_LIBS)
tests_unit_test_sched_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_sim_plan_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_weight_ring_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_cluster_gather_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_pipeline_segments_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
tests_unit_test_slurm_LDADD = $(TEST_LDADD) $(CMOCKA_LIBS)
endif

# Integration tests (shell): real programs on real data.
INTEGRATION_TESTS = \
	tests/integration/cli_errors.sh \
	tests/integration/train_fashion_mnist.sh \
	tests/integration/train_bf16.sh \
	tests/integration/train_s2vt.sh \
	tests/integration/safetensors_python.sh \
	tests/integration/public_api.sh \
	tests/integration/model_info.sh \
	tests/integration/train_resume.sh \
	tests/integration/pytorch_checkpoint.sh \
	tests/integration/profile_cli.sh \
	tests/integration/plan_cli.sh \
	tests/integration/topo_cli.sh \
	tests/integration/topo_mpi.sh \
	tests/integration/topo_measure_netns.sh \
	tests/integration/weight_ring_tsan.sh \
	tests/integration/simulate_cli.sh \
	tests/integration/bench_transport.sh \
	tests/integration/device_script.sh \
	tests/integration/transport_mpi.sh \
	tests/integration/verbs_vm.sh \
	tests/integration/pipeline_exact.sh \
	tests/integration/pipeline_s2vt.sh \
	tests/integration/pipeline_epochs.sh \
	tests/integration/pipeline_resume.sh \
	tests/integration/pipeline_binding.sh \
	tests/integration/pipeline_2bw.sh \
	tests/integration/pipeline_bf16.sh \
	tests/integration/pipeline_devchan.sh \
	tests/integration/slurm_sbatch.sh \
	tests/integration/emulated_run.sh
TESTS += $(INTEGRATION_TESTS)
EXTRA_DIST += $(INTEGRATION_TESTS)
# Sourced by the tests that run mpirun.
EXTRA_DIST += tests/integration/mpi_env.sh tests/integration/pipeline_env.sh
# The paper's experiment scripts slurm_sbatch.sh submits.
EXTRA_DIST += experiments/lib/job.sh experiments/vgg16.sbatch experiments/alexnet.sbatch experiments/resnet50.sbatch \
	experiments/inception_v3.sbatch experiments/s2vt.sbatch
# experiments/reproduce, which emulated_run.sh runs, and its parts.
EXTRA_DIST += experiments/reproduce experiments/lib/predicted.sh experiments/lib/emulated.sh experiments/lib/netns.sh \
	experiments/lib/netns-rank experiments/simulate_paper.sh
# The soft-RoCE VM that verbs_vm.sh boots (tests/rdma/README.md).
EXTRA_DIST += tests/rdma/README.md tests/rdma/vm-setup.sh tests/rdma/vm-initramfs.sh tests/rdma/vm-run.sh tests/rdma/vm-init
# The H200 script and its parts, whose dry run device_script.sh checks (docs/cuda.md).
EXTRA_DIST += tools/device-check.sh tools/device-run.sh tools/device_report.py tools/torch_step_bench.py

# Safetensors files against Python's reference package (skips without python3 + safetensors + numpy).
check_PROGRAMS += tests/integration/st_tool
check_PROGRAMS += tests/integration/pipeline_ref
tests_integration_pipeline_ref_LDADD = $(TEST_LDADD)
tests_integration_st_tool_LDADD = $(TEST_LDADD)
