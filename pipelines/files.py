"""Writing dataset files so that no reader ever sees half of one (no Beam here)."""

from __future__ import annotations

import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["parquet_bytes", "write_file_atomically"]


def write_file_atomically(fs, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that no reader sees a partial file.

    On a local disk the bytes go to a temporary name first and are renamed into place; object stores
    make a single PUT visible all at once."""
    parent = path.rsplit("/", 1)[0]
    fs.makedirs(parent, exist_ok=True)
    if "file" in _protocols(fs):
        temporary = f"{path}.tmp-{uuid.uuid4().hex}"
        with fs.open(temporary, "wb") as handle:
            handle.write(data)
        fs.mv(temporary, path)
    else:
        with fs.open(path, "wb") as handle:
            handle.write(data)


def _protocols(fs) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def parquet_bytes(table: pa.Table, row_group_rows: int, compression: str) -> bytes:
    """The Parquet encoding of ``table`` (deterministic for the same rows and library versions)."""
    sink = io.BytesIO()
    pq.write_table(
        table,
        sink,
        row_group_size=row_group_rows,
        compression=compression,
        write_statistics=True,
        store_schema=True,
    )
    return sink.getvalue()
