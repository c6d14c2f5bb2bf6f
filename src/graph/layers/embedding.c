/* Layer: embedding (being written). */
