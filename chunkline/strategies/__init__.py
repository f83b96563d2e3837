"""The built-in chunking strategies; importing this package registers them (one line per strategy)."""

from chunkline.strategies import headings  # noqa: F401
from chunkline.strategies import tokens  # noqa: F401
from chunkline.strategies import blocks, scored  # noqa: F401
from chunkline.strategies import code, regex_split, sections, units  # noqa: F401
