"""Apache Beam transforms of chunkline: reading markdown, chunking documents, writing Parquet tables."""
