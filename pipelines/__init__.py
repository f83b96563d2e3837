"""Building and running chunkline pipelines, and the ``chunkline`` command line."""
