/* Layer: conv2d (being written). */
