/* CPU kernels: softmax_cross_entropy (being written). */
