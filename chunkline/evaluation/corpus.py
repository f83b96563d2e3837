"""The corpus an evaluation chunks, read exactly as ``chunkline run`` reads it. No Beam here.

The same listing (folders, files and globs on any fsspec storage, ``input.extensions``, ``include`` and
``exclude``), the same doc ids (POSIX paths relative to the input's root), the same choice between two
inputs that hold the same doc id, and the same decoding (:func:`chunkline.dataset.decoding.decode_file`,
``input.encoding_errors``): a reference span's offsets mean the same characters here as in the chunks of a
published dataset. A file ``chunkline run`` would turn into an error row is left out, with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from chunkline.dataset.decoding import BinaryFileError, decode_file
from chunkline.dataset.inputs import SourceFile, choose_source, match_input, read_source
from chunkline.dataset.settings import InputConfig, storage_secrets
from chunkline.dataset.storage import StorageError, fresh_filesystem, scrub_secrets, with_storage_retries
from chunkline.settings import ConfigError, build_dataclass, deep_merge, env_overrides, parse_assignments
from chunkline.structure import MarkdownDocument, parse_markdown

__all__ = ["Corpus", "CorpusDocument", "CorpusError", "load_input_config", "read_corpus"]


class CorpusError(ValueError):
    """An input that is missing, cannot be listed or holds no markdown file that can be read."""


@dataclass(frozen=True)
class CorpusDocument:
    doc_id: str
    source_uri: str
    document: MarkdownDocument
    """The parsed document; ``document.text`` is the decoded text reference offsets point into."""
    replaced_bytes: tuple[tuple[int, int], ...] = ()

    @property
    def text(self) -> str:
        return self.document.text


@dataclass(frozen=True)
class Corpus:
    documents: dict[str, CorpusDocument]
    """By doc id, in doc id order."""
    left_out: dict[str, str] = field(default_factory=dict)
    """doc id -> why the file was not read (what ``chunkline run`` would write as its error row)."""


def load_input_config(
    paths: Iterable[str], overrides: Iterable[str] = (), environ: Mapping[str, str] | None = None
) -> InputConfig:
    """The ``input`` settings for ``paths``: defaults, ``CHUNKLINE_INPUT_*`` variables, then ``--set
    input.key=value`` overrides (other sections of the overrides are left to their own readers)."""
    environment = os.environ if environ is None else environ
    data = env_overrides(environment, {"CHUNKLINE_INPUT_": "input"}).get("input", {})
    data = deep_merge(data, parse_assignments(overrides, default_section="chunking").get("input", {}))
    data = deep_merge(data, {"paths": list(paths)})
    return build_dataclass(InputConfig, data, "input")


def _list(url: str, input_index: int, config: InputConfig, secrets: tuple[str, ...]) -> list[SourceFile]:
    """The files of one input (a transient storage error retried); raises :class:`CorpusError` for an input
    that is missing or cannot be listed."""
    try:
        return with_storage_retries(lambda: list(match_input(url, input_index, config)), url, "list", secrets=secrets)
    except FileNotFoundError as error:
        what = str(error) if str(error).startswith(f"input {url} ") else f"input {url} does not exist ({error})"
        raise CorpusError(scrub_secrets(f"corpus {what}", secrets)) from None
    except StorageError as error:
        raise CorpusError(scrub_secrets(str(error), secrets)) from None
    except Exception as error:
        first_line = (str(error).strip().splitlines() or [""])[0]
        raise CorpusError(
            scrub_secrets(f"cannot list corpus input {url} ({type(error).__name__}: {first_line})", secrets)
        ) from None


def read_corpus(config: InputConfig) -> Corpus:
    """Every markdown document of ``config.paths``, decoded, with the ones that cannot be read left out.

    Raises :class:`CorpusError` for an input that is missing, cannot be listed or matches no file, and when
    not a single document could be read."""
    if not config.paths:
        raise ConfigError("no corpus: give at least one CORPUS folder, file or glob")
    secrets = tuple(storage_secrets(config.storage_options))
    matches: dict[str, list[SourceFile]] = {}
    for input_index, url in enumerate(config.paths):
        found = _list(url, input_index, config, secrets)
        if not found:
            raise CorpusError(f"corpus input {url} matches no file (names ending in {', '.join(config.extensions)})")
        for source in found:
            matches.setdefault(source.doc_id, []).append(source)
    filesystems = {}
    documents: dict[str, CorpusDocument] = {}
    left_out: dict[str, str] = {}
    for doc_id in sorted(matches):
        chosen, _ = choose_source(doc_id, matches[doc_id])
        if chosen.problem is None and chosen.path:
            if chosen.input_index not in filesystems:
                filesystems[chosen.input_index] = fresh_filesystem(
                    config.paths[chosen.input_index], config.storage_options
                )[0]
            chosen = read_source(chosen, filesystems[chosen.input_index], config.max_file_bytes, secrets)
        if chosen.problem is not None:
            left_out[doc_id] = chosen.problem.message
            continue
        try:
            text, _, replaced = decode_file(chosen.data or b"", config.encoding_errors)
        except BinaryFileError as error:
            left_out[doc_id] = str(error)
            continue
        except UnicodeDecodeError as error:
            left_out[doc_id] = (
                f"not valid UTF-8 at byte {error.start} ({error.reason}); set input.encoding_errors=replace to "
                "read it with U+FFFD in place of bad bytes"
            )
            continue
        document = parse_markdown(text)
        if document.front_matter is not None and document.front_matter.error is not None:
            left_out[doc_id] = document.front_matter.error
            continue
        documents[doc_id] = CorpusDocument(doc_id, chosen.source_uri, document, tuple(replaced))
    if not documents:
        reasons = "; ".join(f"{doc_id}: {why}" for doc_id, why in list(left_out.items())[:3])
        raise CorpusError(
            f"no document of the corpus {', '.join(config.paths)} could be read" + (f" ({reasons})" if reasons else "")
        )
    return Corpus(documents, left_out)
