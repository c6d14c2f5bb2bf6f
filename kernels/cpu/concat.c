/* CPU kernels: concat (being written). */
