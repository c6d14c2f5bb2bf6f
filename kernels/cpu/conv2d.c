/* CPU kernels: conv2d (being written). */
