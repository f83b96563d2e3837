"""The built-in chunking strategies; importing this package registers them."""

from chunkline.strategies import headings  # noqa: F401
