/* CPU kernels: dropout (being written). */
