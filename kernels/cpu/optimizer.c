/* CPU kernels: optimizer (being written). */
