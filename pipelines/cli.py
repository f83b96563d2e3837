"""The ``chunkline`` command line.

``chunkline chunk FILE...``
    Preview the chunks of markdown files (or every ``.md``/``.markdown`` file under a folder) in the
    terminal, or as JSON lines with ``--format jsonl``. Runs the engine directly; no Beam.
``chunkline strategies``
    List the registered chunking strategies with their parameters and defaults.
``chunkline run INPUT... --output URL``
    The Beam pipeline: chunk a corpus on any fsspec storage into a Parquet dataset. Arguments chunkline does
    not know are Beam pipeline options (``--runner DataflowRunner --project ...``).
``chunkline inspect URL [--html FILE]``
    Summarize a published dataset: tables, documents by status, token histogram, errors; ``--html`` also
    writes a self-contained HTML report with charts.

Settings come from ``--config FILE`` (its ``chunking`` section), ``CHUNKLINE_CHUNK_*`` environment
variables and ``--set key=value`` (``--set max_tokens=256`` or ``--set chunking.headings.max_heading_level=2``),
in that order of precedence, lowest first.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from chunkline import __version__
from chunkline.config import ChunkConfig, ConfigError, load_chunk_config
from chunkline.engine import chunk_document
from chunkline.pipelines.listing import utf8_name, walk_local_folder
from chunkline.pipelines.publish import ConcurrentRunError, DatasetNotFoundError
from chunkline.record import Chunk
from chunkline.registry import available_strategies, get_strategy
from chunkline.structure import parse_markdown
from chunkline.tokenizers import TokenizerUnavailableError, get_token_counter

__all__ = ["main", "console_main", "build_parser"]

MARKDOWN_SUFFIXES = (".md", ".markdown")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkline",
        description="Markdown chunking for retrieval pipelines: exact positions, heading paths, token-exact limits.",
    )
    parser.add_argument("--version", action="version", version=f"chunkline {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    chunk = commands.add_parser(
        "chunk",
        help="preview the chunks of markdown files in the terminal (no Beam)",
        description="Chunk markdown files and show each chunk's index, lines, tokens and heading path.",
    )
    chunk.add_argument("paths", nargs="+", metavar="FILE", help="markdown files, or folders to search for *.md")
    _add_settings_arguments(chunk)
    chunk.add_argument(
        "--format",
        choices=("table", "jsonl"),
        default="table",
        help="table: a readable preview (default); jsonl: one JSON object per chunk with every column",
    )
    chunk.add_argument(
        "--preview-chars",
        type=int,
        default=60,
        metavar="N",
        help="characters of each chunk's text shown in the table (default 60)",
    )
    chunk.set_defaults(handler=_chunk_command)

    run = commands.add_parser(
        "run",
        help="run the Beam pipeline: markdown in, Parquet chunks out",
        description=(
            "Chunk every markdown file of the inputs into a Parquet dataset at --output. Inputs are fsspec "
            "URLs: folders, files or globs, local or on object storage. Options chunkline does not know are "
            "passed to Beam as pipeline options."
        ),
    )
    run.add_argument("inputs", nargs="*", metavar="INPUT", help="folders, files or globs (fsspec URLs)")
    run.add_argument("--output", "-o", metavar="URL", help="where the dataset is published (fsspec URL)")
    _add_settings_arguments(run)
    run.add_argument(
        "--workers",
        type=int,
        metavar="N",
        help="run N worker processes (Beam's multi-processing DirectRunner); default: in-process",
    )
    run.add_argument(
        "--fail-on-error",
        action="store_true",
        default=None,
        help="exit with status 1 when any document produced an error row",
    )
    run.add_argument(
        "--allow-deletes",
        action="store_true",
        default=None,
        help="publish even when the run deletes more than output.max_deleted_fraction of the documents",
    )
    run.add_argument(
        "--reindex",
        action="store_true",
        default=None,
        help="chunk every document again, even those unchanged since the output's last snapshot",
    )
    run.set_defaults(handler=_run_command)

    inspect = commands.add_parser(
        "inspect",
        help="summarize a published dataset",
        description="Show a dataset's run, tables, documents by status, token histogram and errors.",
    )
    inspect.add_argument("url", metavar="URL", help="the dataset's location (fsspec URL)")
    _add_settings_arguments(inspect)
    inspect.add_argument("--errors", type=int, default=10, metavar="N", help="error rows to show (default 10)")
    inspect.add_argument(
        "--html",
        metavar="PATH",
        help="also write a self-contained HTML report (charts, largest documents, error rows) to PATH",
    )
    inspect.set_defaults(handler=_inspect_command)

    strategies = commands.add_parser(
        "strategies",
        help="list the chunking strategies and their parameters",
        description="List every registered chunking strategy with its parameters and their defaults.",
    )
    strategies.set_defaults(handler=_strategies_command)
    return parser


def _add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="YAML config file (see configs/default.yaml)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting, e.g. --set max_tokens=256 (repeatable)",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    arguments, extra = parser.parse_known_args(argv)
    if extra and arguments.command != "run":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    arguments.beam_args = extra
    _configure_logging()
    try:
        return arguments.handler(arguments)
    except (ConfigError, TokenizerUnavailableError, DatasetNotFoundError, ConcurrentRunError) as error:
        print(f"chunkline: error: {error}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `chunkline chunk ... | head`
        sys.stderr.close()
        return 0


class _BeamImportNoise(logging.Filter):
    """Drops the warning Beam logs at import about Google Cloud clients chunkline does not use."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("apitools not found")


def _configure_logging() -> None:
    logging.basicConfig(format="%(message)s", level=logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_BeamImportNoise())
    logging.getLogger("chunkline").setLevel(logging.INFO)
    # Beam warns at import about optional cloud clients that chunkline does not use.
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


def _run_command(arguments: argparse.Namespace) -> int:
    from chunkline.pipelines.config import load_run_config
    from chunkline.pipelines.rebuild import PublishRefusedError
    from chunkline.pipelines.run import run_pipeline

    overrides = list(arguments.overrides)
    if arguments.workers is not None:
        overrides.append(f"run.workers={arguments.workers}")
    if arguments.fail_on_error:
        overrides.append("run.fail_on_error=true")
    if arguments.reindex:
        overrides.append("run.reindex=true")
    if arguments.allow_deletes:
        overrides.append("run.allow_deletes=true")
    config = load_run_config(arguments.config, overrides, inputs=arguments.inputs, output=arguments.output)
    try:
        summary = run_pipeline(config, arguments.beam_args)
    except PublishRefusedError as error:  # the run failed on purpose and published nothing
        print(f"chunkline: error: {error}", file=sys.stderr)
        return 1
    print(summary.describe())
    if config.run.fail_on_error and summary.errors:
        print(f"chunkline: {len(summary.errors)} error row(s) and --fail-on-error: exit status 1", file=sys.stderr)
        return 1
    return 0


def _inspect_command(arguments: argparse.Namespace) -> int:
    from chunkline.pipelines.config import load_run_config
    from chunkline.pipelines.inspect import describe_dataset

    # The output's storage options (an endpoint, a profile, keys) come from the same config file,
    # environment variables and --set as for `chunkline run`.
    config = load_run_config(arguments.config, list(arguments.overrides), output=arguments.url, require_inputs=False)
    storage_options = dict(config.output.storage_options)
    print(describe_dataset(arguments.url, error_rows=arguments.errors, storage_options=storage_options))
    if arguments.html:
        from chunkline.pipelines.report import build_html_report, save_html

        page = build_html_report(arguments.url, storage_options)
        try:
            save_html(page, arguments.html)
        except OSError as error:
            print(f"chunkline: error: cannot write the HTML report to {arguments.html}: {error}", file=sys.stderr)
            return 2
        print(f"\nHTML report: {arguments.html}")
    return 0


def _markdown_files(paths: Sequence[str]) -> Iterator[tuple[Path, str, str | None]]:
    """(file, doc_id, why it is not read or None) for each path: a file (doc_id its name), or every markdown
    file under a folder (doc_id its path relative to the folder), found and named as ``chunkline run`` does
    (:func:`chunkline.pipelines.listing.walk_local_folder`): links inside the folder are followed, a link
    out of it or in a loop and a folder that cannot be listed come with the reason."""
    for raw in paths:
        path = Path(raw)
        if not path.is_dir():
            yield path, utf8_name(path.name), None
            continue
        root = str(path).rstrip("/") or "/"
        try:
            entries = list(walk_local_folder(root))
        except OSError as error:
            yield path, utf8_name(path.name), f"cannot be listed: {error.strerror or error}"
            continue
        for entry in entries:
            file = Path(entry.path)
            doc_id = utf8_name(entry.path[len(root) :].lstrip("/"))
            markdown = file.suffix.lower() in MARKDOWN_SUFFIXES
            if entry.kind == "file" and markdown:
                yield file, doc_id, None
            elif entry.kind == "unlisted":
                yield file, doc_id, f"folder cannot be listed ({entry.detail}); its files are not shown"
            elif entry.kind == "link_outside" and (markdown or entry.is_folder):
                yield file, doc_id, f"a link to {utf8_name(entry.detail)!r}, outside {utf8_name(root)!r}; not read"
            elif entry.kind == "link_loop":
                yield file, doc_id, f"a link to {utf8_name(entry.detail)!r}, a folder it is inside; not followed"


def _chunk_command(arguments: argparse.Namespace) -> int:
    config = load_chunk_config(arguments.config, arguments.overrides)
    counter = get_token_counter(config.tokenizer, config.tokenizer_file)
    out = sys.stdout
    started = time.perf_counter()
    files_done = failures = chunk_total = token_total = byte_total = 0
    for file, doc_id, problem in _markdown_files(arguments.paths):
        label = utf8_name(file.as_posix())  # a name that is not UTF-8 cannot be printed as it is
        if problem is not None:
            failures += 1
            print(f"chunkline: {label}: {problem}", file=sys.stderr)
            continue
        try:
            data = file.read_bytes()
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as error:
            failures += 1
            print(f"chunkline: {label}: {_describe_read_error(error)}", file=sys.stderr)
            continue
        chunks = chunk_document(parse_markdown(text), config, counter, doc_id=doc_id, source_uri=label)
        files_done += 1
        chunk_total += len(chunks)
        token_total += sum(chunk.token_count for chunk in chunks)
        byte_total += len(data)
        if arguments.format == "jsonl":
            for chunk in chunks:
                out.write(json.dumps(chunk.to_dict(), ensure_ascii=False) + "\n")
        else:
            _print_table(out, label, chunks, config, arguments.preview_chars)
    if files_done == 0 and failures == 0:
        print("chunkline: no markdown files found in " + ", ".join(arguments.paths), file=sys.stderr)
        return 1
    elapsed = time.perf_counter() - started
    summary = (
        f"{files_done} file(s), {chunk_total} chunk(s), {token_total} tokens, "
        f"{byte_total / 1e6:.2f} MB in {elapsed:.2f} s"
        + (f", {failures} file(s) could not be read" if failures else "")
    )
    print(summary, file=sys.stderr if arguments.format == "jsonl" else out)
    return 1 if failures else 0


def _describe_read_error(error: Exception) -> str:
    if isinstance(error, UnicodeDecodeError):
        return f"not valid UTF-8 (byte {error.start}: {error.reason}); skipped"
    return f"cannot be read: {error.strerror or error}" if isinstance(error, OSError) else str(error)


def _print_table(out: TextIO, label: str, chunks: list[Chunk], config: ChunkConfig, preview_chars: int) -> None:
    max_tokens = max((chunk.token_count for chunk in chunks), default=0)
    out.write(f"== {label}: {len(chunks)} chunk(s), largest {max_tokens} of {config.max_tokens} tokens\n")
    out.write(f"{'#':>4}  {'lines':>11}  {'tokens':>6}  heading path / text\n")
    for chunk in chunks:
        lines = f"{chunk.start_line}-{chunk.end_line}"
        marker = "*" if chunk.is_sub_split else " "
        path = " > ".join(chunk.heading_path) or "(preamble)"
        preview = chunk.text[:preview_chars].encode("unicode_escape").decode("ascii")
        if len(chunk.text) > preview_chars:
            preview += "..."
        out.write(f"{chunk.chunk_index:>4}  {lines:>11}  {chunk.token_count:>6}{marker} {path}\n")
        out.write(f"{'':>27}{preview}\n")
    out.write("\n")


def _strategies_command(arguments: argparse.Namespace) -> int:
    out = sys.stdout
    default = ChunkConfig()
    out.write(
        f"Common settings (chunking.*): max_tokens={default.max_tokens}, overlap_tokens={default.overlap_tokens}, "
        f"tokenizer={default.tokenizer}, tokenizer_file=None\n\n"
    )
    for name in available_strategies():
        strategy = get_strategy(name)
        marker = " (default)" if name == default.strategy else ""
        out.write(f"{name}{marker}\n")
        if strategy.description:
            out.write(f"    {strategy.description.splitlines()[0]}\n")
        for parameter, type_name, value in strategy.parameters():
            out.write(f"    chunking.{name}.{parameter}: {type_name} = {value!r}\n")
        out.write("\n")
    return 0


def console_main() -> None:
    """The ``chunkline`` program: :func:`main`, then an exit that skips the interpreter's teardown.

    pyarrow's native thread pool, once used from a pipeline's worker thread, sometimes aborts the
    interpreter's teardown ("terminate called without an active exception", apache/arrow#34314): a run
    that has published its dataset would then exit with status 134 instead of 0. Everything is flushed and
    the process exits with :func:`main`'s status without that teardown."""
    try:
        status = main()
    except SystemExit as exit_request:  # argparse errors, --help, --version
        status = exit_request.code
    except KeyboardInterrupt:
        status = 130
    except BaseException:  # as the interpreter would report it
        traceback.print_exc()
        status = 1
    if status is None:
        status = 0
    elif not isinstance(status, int):
        print(status, file=sys.stderr)
        status = 1
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`chunkline chunk ... | head`)
            pass
    os._exit(status)


if __name__ == "__main__":
    console_main()
