/* Layer: pool2d (being written). */
