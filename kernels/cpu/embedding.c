/* CPU kernels: embedding (being written). */
