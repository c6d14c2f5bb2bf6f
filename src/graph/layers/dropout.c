/* Layer: dropout (being written). */
