/* CPU kernels: batchnorm (being written). */
