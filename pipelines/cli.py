"""The ``chunkline`` command line.

``chunkline chunk FILE...``
    Preview the chunks of markdown files (or every ``.md``/``.markdown`` file under a folder, or what a
    quoted glob matches) in the terminal, or as JSON lines with ``--format jsonl``, with the doc ids
    ``chunkline run`` gives them. Runs the engine directly; no Beam.
``chunkline evaluate CORPUS... --questions FILE [--config [NAME=]FILE ...]``
    Measure what each chunking config does to retrieval: chunk the corpus with it, retrieve the best chunks
    for every question within one token budget (an offline embedding model, BM25, their hybrid), and report recall,
    precision and IoU over the questions' reference character ranges. No Beam.
``chunkline strategies``
    List the registered chunking strategies with their parameters and defaults.
``chunkline run INPUT... --output URL``
    The Beam pipeline: chunk a corpus on any fsspec storage into a Parquet dataset. Arguments chunkline does
    not know must be Beam pipeline options (``--runner DataflowRunner --project ...``); anything else is
    refused with a hint (``--max-tokens 128``: did you mean ``--set max_tokens=128``?).
``chunkline inspect URL [--snapshot ID] [--html FILE]``
    Summarize a published dataset (its latest snapshot, or a kept one): tables, documents by status, token
    histogram, errors; ``--html`` also writes a self-contained HTML report with charts.

Settings come from ``--config FILE`` (its ``chunking`` section), ``CHUNKLINE_CHUNK_*`` environment
variables and ``--set key=value`` (``--set max_tokens=256`` or ``--set chunking.headings.max_heading_level=2``),
in that order of precedence, lowest first.

Every mistake ends with one line on stderr naming what is wrong and what to do, and exit status 2 for a
usage or config error, 1 for a run that failed; ``CHUNKLINE_DEBUG=1`` adds the traceback of an unexpected
error. A run stopped by Ctrl-C (SIGINT) exits with status 130, one stopped by SIGTERM (what ``timeout``,
systemd, Kubernetes and Airflow send) with 143; either way it removes what it staged and releases the
output's lock, and the published dataset stays as it was.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from chunkline import __version__

# The engine, pyarrow and fsspec are imported by the commands that use them, so that `--help`, `--version`
# and a usage error answer at once; Beam only by a run that builds a pipeline.
if TYPE_CHECKING:
    from chunkline.config import ChunkConfig
    from chunkline.dataset.process_hooks import ProcessHooks
    from chunkline.dataset.settings import RunConfig
    from chunkline.record import Chunk

__all__ = ["Terminated", "build_parser", "console_main", "main"]

MARKDOWN_SUFFIXES = (".md", ".markdown")

#: Set (to anything but empty) to see the traceback of an unexpected error.
DEBUG_ENV = "CHUNKLINE_DEBUG"


class _OneLineParser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line: the command, the problem, where help is."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class _UsageError(Exception):
    """An argument no option recognises; the message says which and what was probably meant."""


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
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
    chunk.add_argument(
        "paths",
        nargs="+",
        metavar="FILE",
        help="markdown files, folders to search for *.md, or quoted globs ('docs/**/*.md'), named as `run` names them",
    )
    _add_settings_arguments(chunk)
    chunk.add_argument(
        "--format",
        choices=("table", "jsonl"),
        default="table",
        help="table: a readable preview (default); jsonl: one JSON object per chunk with every column",
    )
    chunk.add_argument(
        "--preview-chars",
        type=_count,
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
            "URLs: folders, files or globs, local or on object storage. Options chunkline does not know must "
            "be Beam pipeline options (--runner, --project, --direct_num_workers, ...) and are passed to Beam."
        ),
    )
    run.add_argument("inputs", nargs="*", metavar="INPUT", help="folders, files or globs (fsspec URLs)")
    run.add_argument("--output", "-o", metavar="URL", help="where the dataset is published (fsspec URL)")
    _add_settings_arguments(run)
    run.add_argument(
        "--workers",
        type=_workers,
        metavar="N",
        help=(
            "N worker processes (Beam's FnApiRunner in multi-processing mode), 0: in-process; default auto: "
            "one per core when the bytes to chunk pay for their start-up, else in-process"
        ),
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
    run.add_argument(
        "--verify-content",
        action="store_true",
        default=None,
        help="read and hash every file to find what changed, not only those whose size, time or ETag moved",
    )
    run.set_defaults(handler=_run_command)

    inspect = commands.add_parser(
        "inspect",
        help="summarize a published dataset",
        description="Show a dataset's run, tables, documents by status, token histogram and errors.",
    )
    inspect.add_argument("url", metavar="URL", help="the dataset's location (fsspec URL)")
    _add_settings_arguments(inspect)
    inspect.add_argument("--errors", type=_count, default=10, metavar="N", help="error rows to show (default 10)")
    inspect.add_argument(
        "--snapshot",
        metavar="ID",
        help="summarize this kept snapshot instead of the latest (ids: the 'snapshots kept' line)",
    )
    inspect.add_argument(
        "--html",
        metavar="PATH",
        help="also write a self-contained HTML report (charts, largest documents, error rows) to PATH",
    )
    inspect.set_defaults(handler=_inspect_command)

    evaluate = commands.add_parser(
        "evaluate",
        help="measure what chunking configs do to retrieval, on your own questions",
        description=(
            "Chunk the corpus with each --config, retrieve the best chunks for every question within the same "
            "token budget with an offline embedding model and with BM25 (and their hybrid, with --retriever "
            "hybrid or all), and report recall, precision and IoU "
            "over the questions' reference character ranges. Questions: Chroma's questions_df.csv, or JSON "
            'Lines {"question": ..., "references": [{"doc_id": ..., "start_char": ..., "end_char": ...}]}.'
        ),
    )
    evaluate.add_argument("corpus", nargs="+", metavar="CORPUS", help="folders, files or globs (as for `run`)")
    evaluate.add_argument("--questions", required=True, metavar="FILE", help="the questions file (CSV or JSONL)")
    evaluate.add_argument(
        "--config",
        dest="configs",
        action="append",
        default=[],
        metavar="[NAME=]FILE",
        help="a config to compare (repeatable; named by NAME or the file's stem); none: the defaults",
    )
    evaluate.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting in every config, e.g. --set max_tokens=256 (repeatable)",
    )
    evaluate.add_argument(
        "--budget-tokens",
        type=_positive_count,
        default=1000,
        metavar="N",
        help="retrieved tokens per question, counted in cl100k_base on the chunks' text; the chunk that crosses "
        "the budget is cut to it (default 1000)",
    )
    evaluate.add_argument(
        "--retriever",
        choices=("embedding", "bm25", "hybrid", "both", "all"),
        default="both",
        help="embedding: wordllama's offline model; bm25: the lexical baseline; hybrid: the two rankings fused "
        "(reciprocal rank fusion, k 60); both: embedding and bm25 (default); all: the three",
    )
    evaluate.add_argument(
        "--expand",
        dest="expansions",
        action="append",
        default=[],
        type=_expand_mode,
        metavar="section:N",
        help="small-to-big: also return, for each ranked chunk, the largest section around it of at most N "
        "tokens (else the chunk), deduplicated, within the same budget; rows beside the chunks' own "
        "(repeatable: --expand section:512 --expand section:1024)",
    )
    evaluate.add_argument(
        "--format", choices=("table", "json"), default="table", help="table (default) or one JSON object"
    )
    evaluate.add_argument("--report", metavar="PATH", help="also write an HTML page with the charts to PATH")
    evaluate.set_defaults(handler=_evaluate_command)

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


def _count(text: str) -> int:
    """A whole number >= 0, for options such as ``--preview-chars``."""
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


def _workers(text: str) -> str:
    """``auto`` or a whole number >= 0, for ``--workers``."""
    if text.strip() != "auto" and not re.fullmatch(r"[0-9]+", text.strip()):
        raise argparse.ArgumentTypeError(f"expected auto or a whole number >= 0, got {text!r}")
    return text.strip()


def _positive_count(text: str) -> int:
    """A whole number >= 1, for ``--budget-tokens``."""
    if not re.fullmatch(r"[0-9]+", text.strip()) or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while :func:`main` ran. A KeyboardInterrupt, so that a run unwinds exactly as on
    Ctrl-C: whatever stops a run on Ctrl-C (discarding what it staged, stopping its worker processes,
    releasing the output's lock) stops it on SIGTERM too."""


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread, once (a second SIGTERM
    while the run unwinds would interrupt its cleanup, so it is ignored); the previous handler is restored
    after. Only where SIGTERM would otherwise end the process on the spot, leaving the output locked: a
    program that calls :func:`main` from another thread, or that handles SIGTERM itself, keeps its handling."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return
    raised = False

    def interrupt(signum: int, frame: object) -> None:
        nonlocal raised
        if not raised:
            raised = True
            raise Terminated

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code. Called in the main thread of a process that
    leaves SIGTERM at its default action (the ``chunkline`` program), a SIGTERM while it runs raises
    :class:`Terminated`, and SIGTERM's handling is restored when it returns."""
    with _sigterm_interrupts():
        return _main(argv)


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    _configure_logging()  # before Beam is imported to check the run's Beam options
    try:
        arguments = _parse_arguments(parser, list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exit_request:  # --help, --version, or a usage error argparse printed on one line
        return exit_request.code if isinstance(exit_request.code, int) else 0 if exit_request.code is None else 2
    except _UsageError as error:
        print(f"chunkline: error: {error}", file=sys.stderr)
        return 2
    arguments.secrets = ()
    from chunkline.dataset.publish import ConcurrentRunError, DatasetNotFoundError
    from chunkline.dataset.storage import StorageError
    from chunkline.settings import ConfigError
    from chunkline.tokenizers import TokenizerUnavailableError

    try:
        return arguments.handler(arguments)
    except (ConfigError, TokenizerUnavailableError, DatasetNotFoundError, ConcurrentRunError) as error:
        _print_error(arguments, str(error))
        return 2
    except BrokenPipeError:  # `chunkline chunk ... | head`
        sys.stderr.close()
        return 0
    except StorageError as error:  # its message names the URL and the operation
        _print_error(arguments, str(error))
        return 1
    except Exception as error:
        if os.environ.get(DEBUG_ENV):
            raise
        _print_error(
            arguments, f"{_first_line(error)} ({type(error).__name__}; rerun with {DEBUG_ENV}=1 for the traceback)"
        )
        return 1


def _print_error(arguments: argparse.Namespace, message: str) -> None:
    """One line on stderr, with every credential of the command's config replaced by ``***``."""
    from chunkline.dataset.storage import scrub_secrets

    message = " ".join(scrub_secrets(message, tuple(arguments.secrets)).split())
    print(f"chunkline: error: {message}", file=sys.stderr)


def _first_line(error: BaseException) -> str:
    """What an unexpected error says, in one line: a runner's error may carry a worker's whole traceback,
    whose last line is the error itself."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


def _parse_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """The parsed command line; for ``run``, the arguments chunkline does not know are kept as
    ``beam_args`` when Beam recognises them as pipeline options, and refused otherwise."""
    command = _subcommand_parser(parser, argv[0]) if argv else None
    beam_options = None
    if argv and argv[0] == "run" and not _only_own_options(command, argv[1:]):
        from chunkline.pipelines.beam_options import BeamOptionError, BeamOptions

        try:
            beam_options = BeamOptions(argv[1:])
        except BeamOptionError as error:
            raise _UsageError(str(error)) from None
        argv = ["run", *beam_options.bind_values(argv[1:], _own_flags(command))]
    arguments, extra = parser.parse_known_args(argv)
    unknown = extra
    if beam_options is not None:
        try:
            unknown = beam_options.unrecognised(extra)
        except BeamOptionError as error:
            raise _UsageError(f"Beam option: {error}") from None
    if unknown:
        flags = _own_flags(command) + (beam_options.flags if beam_options is not None else [])
        raise _UsageError(_describe_unknown(arguments.command, unknown, flags))
    arguments.beam_args = extra
    return arguments


def _only_own_options(parser: argparse.ArgumentParser | None, arguments: list[str]) -> bool:
    """Whether every option among ``arguments`` is one of ``parser``'s own (``--output URL``,
    ``--set=k=v``): then there is no Beam pipeline option to recognise, and Beam is not imported."""
    if parser is None:
        return False
    own = {flag for action in parser._actions for flag in action.option_strings}
    return all(
        argument.split("=", 1)[0] in own for argument in arguments if argument.startswith("-") and argument != "-"
    )


def _subcommand_parser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def _own_flags(parser: argparse.ArgumentParser | None) -> list[str]:
    if parser is None:
        return []
    return [flag for action in parser._actions for flag in action.option_strings if flag.startswith("--")]


def _setting_names() -> dict[str, str]:
    """Each setting's last name -> its ``--set`` key (``max_tokens`` -> ``max_tokens``, ``shards`` ->
    ``output.shards``), the first one for a name two settings share. Storage options are left out: their
    values are credentials, and a hint repeats the value."""
    import dataclasses

    from chunkline.config import ChunkConfig
    from chunkline.dataset.settings import InputConfig, OutputConfig, RunSettings
    from chunkline.registry import available_strategies, get_strategy

    names = {field.name: field.name for field in dataclasses.fields(ChunkConfig) if field.name != "params"}
    for section, cls in (("input", InputConfig), ("output", OutputConfig), ("run", RunSettings)):
        for field in dataclasses.fields(cls):
            if field.name != "storage_options":
                names.setdefault(field.name, f"{section}.{field.name}")
    for strategy in available_strategies():
        for parameter, _, _ in get_strategy(strategy).parameters():
            names.setdefault(parameter, f"chunking.{strategy}.{parameter}")
    return names


def _describe_unknown(command: str, unknown: list[str], flags: list[str]) -> str:
    """The error for the first argument no option recognises, with the likeliest meaning."""
    import difflib

    options = [argument for argument in unknown if argument.startswith("-")]
    if not options:
        # A stray positional: an INPUT after an option. Quoted only when it is a path that exists, since a
        # mistyped `--set key value` would otherwise echo the value.
        shown = f" {unknown[0]}" if Path(unknown[0]).exists() else ""
        return (
            f"unexpected argument{shown} after the options of `chunkline {command}`: give every INPUT "
            "together, before the options"
        )
    flag, equals, value = options[0].partition("=")
    if not equals:
        position = unknown.index(options[0])
        following = unknown[position + 1] if position + 1 < len(unknown) else ""
        value = following if following and not following.startswith("-") else "VALUE"
    name = flag.lstrip("-").replace("-", "_")
    settings = _setting_names()
    if name in settings:
        return f"unknown option {flag}; did you mean `--set {settings[name]}={value}`?"
    close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.75)
    if close:
        return f"unknown option {flag}; did you mean {close[0]}?"
    close = difflib.get_close_matches(name, list(settings), n=1, cutoff=0.8)
    if close:  # the value is not repeated: `--key=...` is close to `keep`, and its value a credential
        return f"unknown option {flag}; did you mean `--set {settings[close[0]]}=VALUE`?"
    beam = " or Beam pipeline options" if command == "run" else ""
    return f"unknown option {flag}: not an option of `chunkline {command}`{beam}; see `chunkline {command} --help`"


class _BeamImportNoise(logging.Filter):
    """Drops the warnings Beam logs at import about packages chunkline does not use: Google Cloud clients,
    and (Beam 2.72 and older) crcmod, for TFRecord files."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("apitools not found", "crcmod package not found"))


def _configure_logging() -> None:
    logging.basicConfig(format="%(message)s", level=logging.WARNING)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_BeamImportNoise())
    logging.getLogger("chunkline").setLevel(logging.INFO)
    # Beam warns at import about optional cloud clients that chunkline does not use, and logs a failing
    # DoFn with its traceback before raising it again, when main reports it in one line.
    logging.getLogger("apache_beam").setLevel(logging.ERROR if os.environ.get(DEBUG_ENV) else logging.CRITICAL)


def _run_command(arguments: argparse.Namespace) -> int:
    from chunkline.dataset.rebuild import PublishRefusedError
    from chunkline.dataset.settings import load_run_config
    from chunkline.pipelines.process_tuning import collector_frozen
    from chunkline.pipelines.run import run_pipeline
    from chunkline.pipelines.worker_watchdog import WorkerDiedError

    overrides = list(arguments.overrides)
    if arguments.workers is not None:
        overrides.append(f"run.workers={arguments.workers}")
    if arguments.fail_on_error:
        overrides.append("run.fail_on_error=true")
    if arguments.reindex:
        overrides.append("run.reindex=true")
    if arguments.verify_content:
        overrides.append("run.verify_content=true")
    if arguments.allow_deletes:
        overrides.append("run.allow_deletes=true")
    config = load_run_config(arguments.config, overrides, inputs=arguments.inputs, output=arguments.output)
    arguments.secrets = tuple(config.secrets())
    _check_before_running(config)
    try:
        with collector_frozen():
            summary = run_pipeline(
                config, arguments.beam_args, fork_workers=_fork_workers, process_hooks=_run_process_hooks()
            )
    except (PublishRefusedError, WorkerDiedError) as error:  # the run failed and published nothing
        print(f"chunkline: error: {error}", file=sys.stderr)
        return 1
    print(summary.describe())
    if config.run.fail_on_error and summary.errors:
        print(f"chunkline: {len(summary.errors)} error row(s) and --fail-on-error: exit status 1", file=sys.stderr)
        return 1
    return 0


def _run_process_hooks() -> ProcessHooks:
    """The tuning of :mod:`chunkline.pipelines.process_tuning` in the ``chunkline`` program, which owns its
    process (set before any worker is forked, so that the workers inherit it); none for a program that
    calls :func:`main`, whose process is its own."""
    from chunkline.dataset.process_hooks import NO_PROCESS_HOOKS
    from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING, map_large_allocations

    if not _fork_workers:
        return NO_PROCESS_HOOKS
    map_large_allocations()
    return RUN_PROCESS_TUNING


def _own_process_parsing(chars: int) -> AbstractContextManager[None]:
    """The ``chunkline`` program's tuning of a parse of ``chars`` characters (the collector paused for a
    large document: :mod:`chunkline.pipelines.process_tuning`); nothing in a program that calls :func:`main`."""
    if not _fork_workers:
        return nullcontext()
    from chunkline.pipelines.process_tuning import RUN_PROCESS_TUNING

    return RUN_PROCESS_TUNING.parsing(chars)


def _check_before_running(config: RunConfig) -> None:
    """What would otherwise fail only once the output is locked or the pipeline has started: every URL's
    filesystem is known and installed, the output is not an existing file, and the tokenizer can load (once,
    here, so that a missing rank file is one error instead of one per worker; a rank file that matches its
    published hash is not parsed here: a run with nothing to chunk never needs it)."""
    from fsspec.registry import get_filesystem_class

    from chunkline.settings import ConfigError
    from chunkline.tokenizers import check_counter_loads

    for setting, url in [*(("input", path) for path in config.input.paths), ("output", config.output.url)]:
        parts = url.split("::")  # zip::file:///corpus.zip: each link of a chain names a filesystem
        for number, part in enumerate(parts):
            protocol = part.split("://", 1)[0] if "://" in part or number < len(parts) - 1 else "file"
            try:
                get_filesystem_class(protocol)
            except (ValueError, ImportError) as error:
                raise ConfigError(f"{setting} {url}: {error}") from None
    output = config.output.url
    if "://" not in output and "::" not in output or output.startswith("file://"):
        local = Path(output.removeprefix("file://")).expanduser().absolute()
        existing = next((path for path in (local, *local.parents) if path.exists()), None)
        if existing is not None and not existing.is_dir():
            raise ConfigError(
                f"output {output}: {existing} is a file; --output names the folder the dataset is published in"
            )
    check_counter_loads(config.chunking)


def _inspect_command(arguments: argparse.Namespace) -> int:
    from chunkline.dataset.settings import load_run_config
    from chunkline.pipelines.describe import describe_dataset

    # The output's storage options (an endpoint, a profile, keys) come from the same config file,
    # environment variables and --set as for `chunkline run`.
    config = load_run_config(arguments.config, list(arguments.overrides), output=arguments.url, require_inputs=False)
    arguments.secrets = tuple(config.secrets())
    storage_options = dict(config.output.storage_options)
    if arguments.snapshot and arguments.html:
        print("chunkline: error: --html reports the latest snapshot; leave out --snapshot or --html", file=sys.stderr)
        return 2
    if arguments.html and not _report_extra_installed(arguments):
        return 2
    summary = describe_dataset(
        arguments.url, error_rows=arguments.errors, storage_options=storage_options, snapshot=arguments.snapshot
    )
    print(summary)
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


def _report_extra_installed(arguments: argparse.Namespace) -> bool:
    """Whether matplotlib (the ``report`` extra) can draw the HTML reports; if not, says so in one line."""
    from chunkline.pipelines.report import ReportExtraMissingError, require_matplotlib

    try:
        require_matplotlib()
    except ReportExtraMissingError as error:
        _print_error(arguments, str(error))
        return False
    return True


def _expand_mode(value: str) -> int:
    """``--expand section:N``'s N."""
    from chunkline.evaluation.expansion import parse_expand

    try:
        return parse_expand(value)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _evaluate_command(arguments: argparse.Namespace) -> int:
    from chunkline.dataset.settings import storage_secrets
    from chunkline.evaluation.corpus import CorpusError, load_input_config, read_corpus
    from chunkline.evaluation.evaluate import (
        EvaluationError,
        evaluate_configs,
        format_table,
        load_named_configs,
        require_retrievers,
    )
    from chunkline.evaluation.questions import MAX_CSV_FIELD_CHARS, QuestionsFileError, load_questions
    from chunkline.evaluation.retrieval import EvaluationExtraMissingError
    from chunkline.tokenizers import counter_for

    started = time.perf_counter()
    # A long passage in a Chroma CSV's references is one field, over the 128 KB Python's csv reads by
    # default: a process-wide setting, so this command raises it, not the library.
    csv.field_size_limit(max(csv.field_size_limit(), MAX_CSV_FIELD_CHARS))
    input_config = load_input_config(arguments.corpus, arguments.overrides)
    arguments.secrets = tuple(storage_secrets(input_config.storage_options))
    configs = load_named_configs(arguments.configs, arguments.overrides)
    for config in configs.values():
        counter_for(config)  # a tokenizer that cannot load fails here, before any work
    retrievers = {"both": ("embedding", "bm25"), "all": ("embedding", "bm25", "hybrid")}.get(
        arguments.retriever, (arguments.retriever,)
    )
    if arguments.report and not _report_extra_installed(arguments):
        return 2  # before the evaluation, not after it

    def progress(message: str) -> None:
        print(f"chunkline: {message}", file=sys.stderr, flush=True)

    try:
        require_retrievers(retrievers)
        questions = load_questions(arguments.questions, storage_options=dict(input_config.storage_options))
        corpus = read_corpus(input_config)
        for doc_id, why in corpus.left_out.items():
            progress(f"{doc_id}: left out: {why}")
        result = evaluate_configs(
            corpus,
            questions,
            configs,
            budget_tokens=arguments.budget_tokens,
            retrievers=retrievers,
            progress=progress,
            expansions=list(dict.fromkeys(arguments.expansions)),
        )
    except (QuestionsFileError, CorpusError, EvaluationError, EvaluationExtraMissingError) as error:
        _print_error(arguments, str(error))
        return 2
    if arguments.format == "json":
        print(json.dumps(result.to_dict(), ensure_ascii=False, indent=2))
    else:
        print(format_table(result))
    if arguments.report:
        from chunkline.pipelines.evaluation_report import render_evaluation_report
        from chunkline.pipelines.report import save_html

        try:
            save_html(render_evaluation_report(result.to_dict()), arguments.report)
        except OSError as error:
            _print_error(arguments, f"cannot write the HTML report to {arguments.report}: {error}")
            return 2
        progress(f"HTML report: {arguments.report}")
    elapsed = time.perf_counter() - started
    progress(f"evaluated {len(configs)} config(s) x {len(retrievers)} retriever(s) in {elapsed:.1f} s")
    return 0


def _markdown_files(paths: Sequence[str]) -> Iterator[tuple[Path, str, str | None]]:
    """(file, doc_id, why it is not read or None) for each path: a file (doc_id its name), or every markdown
    file under a folder (doc_id its path relative to the folder), found and named as ``chunkline run`` does
    (:func:`chunkline.dataset.inputs.walk_local_folder`, :func:`chunkline.dataset.inputs.doc_id_of`): links
    inside the folder are followed, a link out of it or in a loop and a folder that cannot be listed come
    with the reason."""
    from chunkline.dataset.inputs import doc_id_of, utf8_name, walk_local_folder

    for raw in paths:
        path = Path(raw)
        if any(character in raw for character in "*?[") and not path.exists():
            yield from _glob_files(raw)
            continue
        if not path.is_dir():
            yield path, doc_id_of(path.as_posix(), path.parent.as_posix()), None
            continue
        root = str(path).rstrip("/") or "/"
        try:
            entries = list(walk_local_folder(root))
        except OSError as error:
            yield path, utf8_name(path.name), f"cannot be listed: {error.strerror or error}"
            continue
        for entry in entries:
            file = Path(entry.path)
            doc_id = doc_id_of(entry.path, root)
            markdown = file.suffix.lower() in MARKDOWN_SUFFIXES
            if entry.kind == "file" and markdown:
                yield file, doc_id, None
            elif entry.kind == "unlisted":
                yield file, doc_id, f"folder cannot be listed ({entry.detail}); its files are not shown"
            elif entry.kind == "link_outside" and (markdown or entry.is_folder):
                yield file, doc_id, f"a link to {utf8_name(entry.detail)!r}, outside {utf8_name(root)!r}; not read"
            elif entry.kind == "link_loop":
                yield file, doc_id, f"a link to {utf8_name(entry.detail)!r}, a folder it is inside; not followed"


def _glob_files(pattern: str) -> Iterator[tuple[Path, str, str | None]]:
    """The files a glob the shell left alone matches (``'docs/**/*.md'``), listed and named as
    ``chunkline run`` lists and names a glob input: doc ids relative to the part before the first wildcard."""
    from chunkline.dataset.inputs import match_input, utf8_name
    from chunkline.dataset.settings import InputConfig

    try:
        sources = list(match_input(pattern, 0, InputConfig()))
    except FileNotFoundError as error:  # the part before the first wildcard is no folder
        yield Path(pattern), utf8_name(pattern), str(error)
        return
    except OSError as error:
        yield Path(pattern), utf8_name(pattern), f"cannot be listed: {error.strerror or error}"
        return
    if not sources:
        yield Path(pattern), utf8_name(pattern), "matches no file"
    for source in sources:
        yield Path(source.path), source.doc_id, source.problem.message if source.problem else None


def _chunk_command(arguments: argparse.Namespace) -> int:
    from chunkline.config import load_chunk_config
    from chunkline.dataset.decoding import decode_file
    from chunkline.dataset.inputs import utf8_name
    from chunkline.encode_ahead import encode_ahead_default, parse_encoding_ahead
    from chunkline.engine import chunk_document
    from chunkline.tokenizers import TokenizerFailedError, counter_for

    config = load_chunk_config(arguments.config, arguments.overrides)
    counter = counter_for(config)
    encode_ahead = encode_ahead_default()
    out = sys.stdout
    if hasattr(out, "reconfigure"):  # text as it is, and a terminal that cannot show a character gets \\u...
        out.reconfigure(errors="backslashreplace")
    started = time.perf_counter()
    files_done = failures = chunk_total = token_total = byte_total = 0
    for file, doc_id, problem in _markdown_files(arguments.paths):
        label = utf8_name(file.as_posix())  # a name that is not UTF-8 cannot be printed as it is
        if problem is not None:
            failures += 1
            print(f"chunkline: {label}: {problem}", file=sys.stderr)
            continue
        try:
            data = _read_markdown_file(file)
            text = decode_file(data, "strict")[0]
        except (OSError, UnicodeDecodeError, ValueError) as error:
            failures += 1
            print(f"chunkline: {label}: {_describe_read_error(error)}", file=sys.stderr)
            continue
        try:
            with _own_process_parsing(len(text)):
                document, offsets = parse_encoding_ahead(text, config.parser, counter, encode_ahead)
            chunks = chunk_document(document, config, counter, doc_id=doc_id, source_uri=label, offsets=offsets)
        except TokenizerFailedError as error:  # this file's text, not the config: the other files go on
            failures += 1
            print(f"chunkline: {label}: {error}; skipped", file=sys.stderr)
            continue
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
        + (f", {failures} file(s) could not be read or chunked" if failures else "")
    )
    print(summary, file=sys.stderr if arguments.format == "jsonl" else out)
    return 1 if failures else 0


def _read_markdown_file(file: Path) -> bytes:
    """The bytes of a regular file no larger than ``chunkline run``'s default ``input.max_file_bytes``
    (``/dev/zero`` would be read until memory runs out)."""
    from chunkline.dataset.settings import InputConfig

    limit = InputConfig.max_file_bytes
    if file.exists() and not file.is_file():
        raise ValueError("not a regular file; skipped")
    with file.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"over {limit:,} bytes (input.max_file_bytes of `chunkline run`); skipped")
    return data


def _describe_read_error(error: Exception) -> str:
    from chunkline.dataset.decoding import BinaryFileError

    if isinstance(error, UnicodeDecodeError):
        return f"not valid UTF-8 (byte {error.start}: {error.reason}); skipped"
    if isinstance(error, BinaryFileError):
        return f"{error}; skipped"
    return f"cannot be read: {error.strerror or error}" if isinstance(error, OSError) else str(error)


def _print_table(out: TextIO, label: str, chunks: list[Chunk], config: ChunkConfig, preview_chars: int) -> None:
    max_tokens = max((chunk.token_count for chunk in chunks), default=0)
    out.write(f"== {label}: {len(chunks)} chunk(s), largest {max_tokens} of {config.max_tokens} tokens\n")
    out.write(f"{'#':>4}  {'lines':>11}  {'tokens':>6}  {'embed':>5}  heading path / text\n")
    for chunk in chunks:
        lines = f"{chunk.start_line}-{chunk.end_line}"
        marker = "*" if chunk.is_sub_split else " "
        path = _one_line(" > ".join(chunk.heading_path)) or "(preamble)"
        preview = _one_line(chunk.text[:preview_chars])
        if len(chunk.text) > preview_chars:
            preview += "..."
        out.write(
            f"{chunk.chunk_index:>4}  {lines:>11}  {chunk.token_count:>6}{marker} {chunk.embed_token_count:>5}  {path}\n"
        )
        context = _embed_context_of(chunk)
        if context and context != path:
            out.write(f"{'':>34}embeds after: {_one_line(context)}\n")
        out.write(f"{'':>34}{preview}\n")
    out.write("\n")


# What the table preview escapes: control characters (line breaks, tabs, escape sequences), the Unicode
# line and paragraph separators and the bidirectional overrides and isolates, which would break the table's
# lines or reorder them. Every other character, accents, CJK and emoji included, is shown as it is.
_NOT_SHOWN_AS_IS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _one_line(text: str) -> str:
    """``text`` as it is, on one line: a character in ``_NOT_SHOWN_AS_IS`` is written as its escape."""
    return _NOT_SHOWN_AS_IS.sub(
        lambda match: _ESCAPES.get(match[0]) or match[0].encode("unicode_escape").decode(), text
    )


def _embed_context_of(chunk: Chunk) -> str:
    """What ``embed_text`` puts before the chunk's own text: its context line, and a table header."""
    shared = len(os.path.commonprefix([chunk.text[::-1], chunk.embed_text[::-1]]))
    return chunk.embed_text[: len(chunk.embed_text) - shared].rstrip("\n")


def _strategies_command(arguments: argparse.Namespace) -> int:
    from chunkline.config import ChunkConfig
    from chunkline.registry import available_strategies, get_strategy

    out = sys.stdout
    default = ChunkConfig()
    out.write(
        f"Common settings (chunking.*): max_tokens={default.max_tokens}, overlap_tokens={default.overlap_tokens}, "
        f"min_tokens={default.min_tokens} (half of max_tokens; 0: off), "
        f"tokenizer={default.tokenizer} (a tiktoken encoding, or huggingface with tokenizer_file naming a "
        "tokenizer.json), tokenizer_file=None, tokenizer_sha256=None, count_special_tokens=False, "
        f"embed_context={default.embed_context!r} (the context line of embed_text: {{title}}, {{heading_path}}, "
        "{breadcrumb}, or none)\n\n"
    )
    for name in available_strategies():
        strategy = get_strategy(name)
        marker = " (default)" if name == default.strategy else ""
        out.write(f"{name}{marker}\n")
        if strategy.description:
            out.write(f"    {strategy.description.splitlines()[0]}\n")
        if strategy.merges_fragments:
            out.write("    merges fragments: chunks under chunking.min_tokens are packed with their neighbours\n")
        for parameter, type_name, value in strategy.parameters():
            out.write(f"    chunking.{name}.{parameter}: {type_name} = {value!r}\n")
        out.write("\n")
    return 0


_fork_workers = False
"""True in the ``chunkline`` program (:func:`console_main`): its runs may fork their worker processes and
tune the process (:mod:`chunkline.pipelines.process_tuning`). A program that calls :func:`main` may hold
threads of its own (gRPC's among them), so its runs never fork, and its process is left alone."""


def console_main() -> None:
    """The ``chunkline`` program: :func:`main`, then an exit that skips the interpreter's teardown.

    pyarrow's native thread pool, once used from a pipeline's worker thread, sometimes aborts the
    interpreter's teardown ("terminate called without an active exception", apache/arrow#34314): a run
    that has published its dataset would then exit with status 134 instead of 0. Everything is flushed and
    the process exits with :func:`main`'s status without that teardown."""
    global _fork_workers
    _fork_workers = True
    try:
        status = main()
    except SystemExit as exit_request:  # argparse errors, --help, --version
        status = exit_request.code
    except KeyboardInterrupt as interruption:  # 128 + the signal's number, as a shell reports it
        signal_name, status = ("SIGTERM", 143) if isinstance(interruption, Terminated) else ("SIGINT", 130)
        print(f"chunkline: stopped by {signal_name} (exit status {status})", file=sys.stderr)
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
