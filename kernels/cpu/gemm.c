/* CPU kernels: gemm (being written). */
