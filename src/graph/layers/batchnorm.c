/* Layer: batchnorm (being written). */
