/* Layer: lrn (being written). */
