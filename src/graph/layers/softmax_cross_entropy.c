/* Layer: softmax_cross_entropy (being written). */
