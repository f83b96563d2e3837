"""Decoding a file's bytes: ``encoding_errors: replace`` gives one U+FFFD per invalid sequence, records
where each stands in the file, and decodes the bytes once however many sequences are invalid."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkline.dataset.decoding import decode_markdown


def reference_decode(data: bytes) -> tuple[str, list[tuple[int, int]]]:
    """The replacement as first written: strict decoding, restarted after each invalid sequence."""
    parts: list[str] = []
    replaced: list[tuple[int, int]] = []
    position = 0
    length = 0
    while True:
        try:
            part = data[position:].decode("utf-8")
        except UnicodeDecodeError as error:
            part = data[position : position + error.start].decode("utf-8")
            parts.append(part)
            length += len(part)
            replaced.append((length, error.end - error.start))
            parts.append("\ufffd")
            length += 1
            position += error.end
            continue
        parts.append(part)
        return "".join(parts), replaced


class CountingBytes(bytes):
    """Bytes that add the length of every decode of themselves or of their slices to a shared tally."""

    def __new__(cls, data: bytes, tally: list[int]):
        instance = super().__new__(cls, data)
        instance.tally = tally
        return instance

    def __getitem__(self, key):
        part = super().__getitem__(key)
        return CountingBytes(part, self.tally) if isinstance(key, slice) else part

    def decode(self, *args, **kwargs) -> str:
        self.tally[0] += len(self)
        return super().decode(*args, **kwargs)


# Valid UTF-8 of every length, lone continuation bytes, truncated sequences, overlong forms, surrogates
# encoded in UTF-8, bytes that never occur in UTF-8, a real U+FFFD, and a byte order mark.
_PIECES = st.one_of(
    st.text(max_size=12).map(lambda text: text.encode("utf-8")),
    st.sampled_from(
        [
            b"\x80",
            b"\xbf",
            b"\xc3",
            b"\xe2\x82",
            b"\xf0\x9f\x98",
            b"\xc0\xaf",
            b"\xed\xa0\x80",
            b"\xff",
            b"\xfe",
            b"\xf8\x88\x80\x80\x80",
            b"\xef\xbf\xbd",
            b"\xef\xbb\xbf",
            b"\xe9t\xe9",
            b"\r\n",
        ]
    ),
    st.binary(max_size=6),
)


@settings(max_examples=400)
@given(pieces=st.lists(_PIECES, max_size=30))
@pytest.mark.slow
def test_replace_gives_what_restarting_the_strict_decoder_gave(pieces):
    data = b"".join(pieces)
    text, encoding, replaced = decode_markdown(data, "replace")
    expected_text, expected_replaced = reference_decode(data)
    assert text == expected_text
    assert replaced == expected_replaced
    assert encoding == ("utf-8 (replaced)" if expected_replaced else "utf-8")
    # Each recorded character is a U+FFFD standing for that many bytes of the file.
    assert all(text[char] == "\ufffd" for char, _ in replaced)
    assert sum(length for _, length in replaced) + len(text.encode("utf-8")) - 3 * len(replaced) == len(data)


def test_replace_records_a_replacement_after_multibyte_characters_at_its_character_offset():
    data = "Café 🦀 ".encode() + b"\xe9" + " naïve".encode() + b"\xff\xfe"
    text, encoding, replaced = decode_markdown(data, "replace")
    assert text == "Café 🦀 \ufffd naïve\ufffd\ufffd"
    assert replaced == [(7, 1), (14, 1), (15, 1)]
    assert encoding == "utf-8 (replaced)"


def test_strict_decoding_raises_at_the_first_invalid_byte():
    with pytest.raises(UnicodeDecodeError) as raised:
        decode_markdown(b"fine\n\xe9t\xe9\n", "strict")
    assert raised.value.start == 5


def latin1_prose(size_bytes: int) -> bytes:
    paragraph = "Le café de la rue Saint-Honoré ouvre à sept heures; les élèves y étudient. "
    return (paragraph * (size_bytes // len(paragraph) + 1)).encode("latin-1")[:size_bytes]


@pytest.mark.parametrize("size_bytes", [20_000, 160_000])
def test_replace_decodes_latin1_prose_once_however_many_bytes_are_invalid(size_bytes):
    """Latin-1 prose has an invalid byte every dozen bytes; restarting the decoder after each one decoded
    the rest of the file again, so the work grew with the square of the file's size."""
    tally = [0]
    data = latin1_prose(size_bytes)
    text, _, replaced = decode_markdown(CountingBytes(data, tally), "replace")
    assert len(replaced) > size_bytes // 20
    assert text == data.decode("utf-8", "replace")
    assert tally[0] <= 2 * size_bytes
