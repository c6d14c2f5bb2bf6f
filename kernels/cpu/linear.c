/* CPU kernels: linear (being written). */
