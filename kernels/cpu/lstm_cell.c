/* CPU kernels: lstm_cell (being written). */
