"""The built-in chunking strategies; importing this package registers them (one line per strategy)."""

from chunkline.strategies import (  # noqa: F401  # noqa: F401
    blocks,
    code,
    headings,  # noqa: F401
    regex_split,
    scored,
    sections,
    tokens,  # noqa: F401
    units,
)
