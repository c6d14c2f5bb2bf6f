noinst_LTLIBRARIES += src/graph/libpd_graph.la
src_graph_libpd_graph_la_SOURCES = \
	src/graph/pd_layer.h \
	src/graph/pd_graph_int.h \
	src/graph/graph.c \
	src/graph/graph_alloc.c \
	src/graph/graph_build.c \
	src/graph/graph_precision.c \
	src/graph/graph_stash.c \
	src/graph/mem_plan.c \
	src/graph/pd_mem_plan.h \
	src/graph/optimizer.c \
	src/graph/layers/input.c \
	src/graph/layers/relu.c \
	src/graph/layers/add.c \
	src/graph/layers/flatten.c \
	src/graph/layers/concat.c \
	src/graph/layers/conv2d.c \
	src/graph/layers/linear.c \
	src/graph/layers/pool2d.c \
	src/graph/layers/batchnorm.c \
	src/graph/layers/lrn.c \
	src/graph/layers/dropout.c \
	src/graph/layers/softmax_cross_entropy.c \
	src/graph/layers/embedding.c \
	src/graph/layers/lstm.c
