/* Layer: linear (being written). */
