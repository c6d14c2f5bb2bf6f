/* CPU kernels: pool2d (being written). */
