"""Configuration files shipped with chunkline (``default.yaml``)."""
