/* CPU kernels: lrn (being written). */
