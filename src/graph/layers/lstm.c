/* Layer: lstm (being written). */
