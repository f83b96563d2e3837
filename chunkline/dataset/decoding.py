"""Decoding a file's bytes into the text that is chunked, the same for ``chunkline run`` and ``chunkline chunk``.

:func:`decode_file` refuses binary bytes (:func:`looks_binary`) with :class:`BinaryFileError` and decodes
the rest as UTF-8 (:func:`decode_markdown`): strictly, raising ``UnicodeDecodeError``, or with each invalid
sequence replaced by U+FFFD and recorded so byte offsets still point into the file. No Beam here.
"""

from __future__ import annotations

import codecs
import threading

__all__ = ["BinaryFileError", "decode_file", "decode_markdown", "looks_binary"]

# Share of control characters (other than tab, line breaks and form feed) above which text is binary.
_BINARY_CONTROL_SHARE = 0.10
_BINARY_SAMPLE_BYTES = 8192
_TEXT_CONTROLS = {9, 10, 12, 13}
# Every byte except the suspicious control bytes: deleting these leaves only the control bytes to count.
_NOT_SUSPICIOUS = bytes(byte for byte in range(256) if byte >= 32 or byte in _TEXT_CONTROLS)


def looks_binary(data: bytes) -> bool:
    """True for bytes that are not text: NUL bytes in invalid UTF-8, or mostly control characters."""
    sample = data[:_BINARY_SAMPLE_BYTES]
    if not sample:
        return False
    controls = len(sample.translate(None, _NOT_SUSPICIOUS))
    if controls / len(sample) > _BINARY_CONTROL_SHARE:
        return True
    if b"\x00" in sample:
        try:
            sample.decode("utf-8")
        except UnicodeDecodeError as error:
            # A sample cut inside a character is not proof of anything; a bad byte earlier is.
            return error.start < len(sample) - 4
    return False


# Bytes that start a character in UTF-8 (every byte but the continuation bytes 0x80-0xBF): deleting them
# leaves the continuation bytes, so a valid stretch's length in characters is bytes minus those left.
_CHARACTER_STARTS = bytes(byte for byte in range(256) if byte & 0xC0 != 0x80)
_REPLACE_AND_RECORD = "chunkline.replace_and_record"
_replaced_spans = threading.local()


def _replace_and_record(error: UnicodeError) -> tuple[str, int]:
    """A codec error handler: what ``errors="replace"`` does (one U+FFFD per invalid sequence the decoder
    reports), recording each sequence's byte span for :func:`decode_markdown`."""
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _replaced_spans.spans.append((error.start, error.end))
    return "\ufffd", error.end


codecs.register_error(_REPLACE_AND_RECORD, _replace_and_record)


def decode_markdown(data: bytes, errors: str) -> tuple[str, str, list[tuple[int, int]]]:
    """(text, encoding label, replaced bytes) of a file's bytes.

    A byte order mark stays in the text, so offsets match the file. With ``errors="replace"`` each run of
    invalid bytes that the strict decoder reports as one error becomes one U+FFFD, and the third item lists
    ``(char_offset, byte_length)`` for each, so byte offsets can still point into the file. The bytes are
    decoded once, whatever the number of errors."""
    if errors == "strict":
        return data.decode("utf-8"), "utf-8", []
    _replaced_spans.spans = spans = []
    try:
        text = data.decode("utf-8", _REPLACE_AND_RECORD)
    finally:
        _replaced_spans.spans = []
    replaced: list[tuple[int, int]] = []
    char_offset = 0
    valid_start = 0
    for error_start, error_end in spans:
        valid = data[valid_start:error_start]
        char_offset += len(valid) - len(valid.translate(None, _CHARACTER_STARTS))
        replaced.append((char_offset, error_end - error_start))
        char_offset += 1
        valid_start = error_end
    return text, ("utf-8 (replaced)" if replaced else "utf-8"), replaced


class BinaryFileError(ValueError):
    """The bytes are not text (see :func:`looks_binary`)."""


def decode_file(data: bytes, errors: str) -> tuple[str, str, list[tuple[int, int]]]:
    """:func:`decode_markdown` of bytes that are text; raises :class:`BinaryFileError` for binary bytes and,
    with ``errors="strict"``, ``UnicodeDecodeError`` for invalid UTF-8."""
    if looks_binary(data):
        raise BinaryFileError("file is binary (control bytes or NUL bytes in invalid UTF-8), not markdown text")
    return decode_markdown(data, errors)
