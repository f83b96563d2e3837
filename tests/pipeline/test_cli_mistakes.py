"""Every mistake a user can make on the command line ends with one clear line on stderr and exit status 2
(usage or config) or 1 (a run that failed): no traceback, no credential, and nothing run or written.

Each case goes through the real command line, ``chunkline.pipelines.cli.main``, or a subprocess where what
matters is everything the program prints (Beam's import noise, a worker's repeated error)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_hostile_tokenizers import PANICKING, byte_level, save

from chunkline.pipelines import cli
from chunkline.pipelines.beam_options import BeamOptions
from chunkline.pipelines.cli import main

from .conftest import manifest, write_files

pytestmark = pytest.mark.timeout(300)

SECRET = "hunter2-Secret-83b1"


@pytest.fixture(autouse=True)
def no_chunkline_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith("CHUNKLINE_"):
            monkeypatch.delenv(name)


@pytest.fixture
def docs(tmp_path) -> Path:
    return write_files(
        tmp_path / "docs",
        {"guide.md": b"# Guide\n\nInstall the collector.\n\n## Sensors\n\nTide and wind.\n", "notes.md": b"Notes.\n"},
    )


def error_line(capsys, *, summary_lines: int = 0) -> str:
    """The one line on stderr (and at most ``summary_lines`` more), checked to hold no traceback or secret."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 1 + summary_lines, err
    assert "Traceback" not in err and SECRET not in err
    return lines[0]


# --------------------------------------------------------------------------------------------------
# options nobody recognises
# --------------------------------------------------------------------------------------------------

UNKNOWN_OPTIONS = {
    "misspelt-flag": (["--fail-on-eror"], "unknown option --fail-on-eror; did you mean --fail-on-error?"),
    "setting-as-flag": (["--max-tokens", "128"], "unknown option --max-tokens; did you mean `--set max_tokens=128`?"),
    "setting-with-equals": (["--strategy=sections"], "did you mean `--set strategy=sections`?"),
    "section-setting": (["--shards", "4"], "did you mean `--set output.shards=4`?"),
    "strategy-parameter": (["--max-heading-level", "2"], "did you mean `--set chunking.headings.max_heading_level=2`?"),
    "misspelt-beam-option": (["--direct_num_worker", "2"], "did you mean --direct_num_workers?"),
    "nothing-close": (["--frobnicate"], "not an option of `chunkline run` or Beam pipeline options"),
}


@pytest.mark.parametrize(("extra", "message"), UNKNOWN_OPTIONS.values(), ids=UNKNOWN_OPTIONS.keys())
def test_an_option_neither_chunkline_nor_beam_knows_exits_2_with_a_hint(docs, tmp_path, capsys, extra, message):
    output = tmp_path / "out"
    assert main(["run", str(docs), "--output", str(output), *extra]) == 2
    assert message in error_line(capsys)
    assert not output.exists()


def test_a_setting_given_as_a_flag_to_chunk_gets_the_same_hint(docs, capsys):
    assert main(["chunk", str(docs / "guide.md"), "--max-tokens", "100"]) == 2
    assert error_line(capsys) == "chunkline: error: unknown option --max-tokens; did you mean `--set max_tokens=100`?"
    assert capsys.readouterr().out == ""


def test_an_input_after_the_options_is_refused_not_dropped(docs, tmp_path, capsys):
    other = write_files(tmp_path / "other", {"x.md": b"# X\n"})
    assert main(["run", str(docs), "--reindex", str(other), "--output", str(tmp_path / "out")]) == 2
    assert f"unexpected argument {other} after the options" in error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_beam_options_are_passed_through_to_a_real_run(docs, tmp_path, capsys):
    output = tmp_path / "out"
    code = main(["run", str(docs), "--output", str(output), "--direct_num_workers", "1", "--save_main_session"])
    assert code == 0, capsys.readouterr().err
    assert manifest(output)["counts"]["documents_ok"] == 2


def test_beam_options_of_other_runners_are_recognised_with_their_values():
    arguments = ["--runner", "DataflowRunner", "--project", "p", "--region", "r", "--temp_location", "gs://b/t"]
    options = BeamOptions(arguments)
    bound = options.bind_values(arguments, ["--output", "--set"])
    assert bound == ["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"]
    assert options.unrecognised(bound) == []
    dask = BeamOptions(["--runner=apache_beam.runners.dask.dask_runner.DaskRunner"])
    assert dask.unrecognised(["--dask_client_address=127.0.0.1:8786"]) == []
    assert options.unrecognised(["--max-tokens=128"]) == ["--max-tokens=128"]


def test_a_beam_option_before_the_inputs_keeps_its_value(docs, tmp_path, capsys):
    # `--runner X docs` once made X an input; the runner here is Beam's in-process FnApiRunner.
    output = tmp_path / "out"
    assert main(["run", "--runner", "FnApiRunner", str(docs), "--output", str(output)]) == 0, capsys.readouterr().err
    assert manifest(output)["config"]["input"]["paths"] == [str(docs)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--runner", "NoSuchRunner"], "unknown Beam runner 'NoSuchRunner'; known runners: DataflowRunner"),
        (["--runner", "no_such_package.Runner"], "Beam runner no_such_package.Runner cannot be loaded"),
        (["--direct_num_workers", "many"], "Beam option: argument --direct_num_workers: invalid int value: 'many'"),
    ],
)
def test_a_bad_runner_or_beam_value_exits_2_before_anything_runs(docs, tmp_path, capsys, extra, message):
    assert main(["run", str(docs), "--output", str(tmp_path / "out"), *extra]) == 2
    assert message in error_line(capsys)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "chunkline: error: the following arguments are required: COMMAND (see `chunkline --help`)"),
        (["chunk"], "chunkline chunk: error: the following arguments are required: FILE"),
        (["chunk", "x.md", "--preview-chars", "-3"], "argument --preview-chars: expected a whole number >= 0"),
        (["inspect", "out", "--errors", "some"], "argument --errors: expected a whole number >= 0, got 'some'"),
        (["run", "docs", "--workers", "two"], "argument --workers: expected auto or a whole number >= 0, got 'two'"),
        (["strategies", "--verbose"], "unknown option --verbose: not an option of `chunkline strategies`"),
    ],
)
def test_usage_errors_are_one_line(capsys, argv, message):
    assert main(argv) == 2
    assert message in error_line(capsys)


# --------------------------------------------------------------------------------------------------
# the output, the config file
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("below", ["", "/dataset"], ids=["the-file", "below-the-file"])
def test_an_output_that_is_an_existing_file_exits_2(docs, tmp_path, capsys, below):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"not a folder\n")
    assert main(["run", str(docs), "--output", f"{blocker}{below}"]) == 2
    assert error_line(capsys) == (
        f"chunkline: error: output {blocker}{below}: {blocker} is a file; --output names the folder the dataset "
        "is published in"
    )
    assert blocker.read_bytes() == b"not a folder\n"


def test_an_output_on_an_unknown_filesystem_exits_2(docs, capsys):
    assert main(["run", str(docs), "--output", "nosuchfs://bucket/out"]) == 2
    assert error_line(capsys) == "chunkline: error: output nosuchfs://bucket/out: Protocol not known: nosuchfs"


def test_config_file_mistakes_exit_2_naming_the_file(docs, tmp_path, capsys):
    latin1 = tmp_path / "latin1.yaml"
    latin1.write_bytes("chunking:\n  strategy: t\xeate\n".encode("latin-1"))
    listing = tmp_path / "list.yaml"
    listing.write_text("- chunking\n", encoding="utf-8")
    twice = tmp_path / "twice.yaml"
    twice.write_text("chunking:\n  max_tokens: 256\n  headings:\n    max_heading_level: 2\n  max_tokens: 1024\n")
    cases = {
        tmp_path / "missing.yaml": "does not exist; check the --config path",
        tmp_path: "is a folder; --config takes a YAML file",
        latin1: "is not UTF-8 text (byte 23); save it as UTF-8",
        listing: "expected a mapping at the top level, found list",
        twice: "the key 'max_tokens' is given twice in one mapping (lines 2 and 5); keep one",
    }
    for path, message in cases.items():
        for command in (["run", str(docs), "--output", str(tmp_path / "out")], ["chunk", str(docs)], ["inspect", "x"]):
            assert main([*command, "--config", str(path)]) == 2
            line = error_line(capsys)
            assert str(path) in line and message in line, (command, line)
    assert not (tmp_path / "out").exists()


def test_a_yaml_error_near_a_credential_names_the_line_not_the_text(docs, tmp_path, capsys):
    config = tmp_path / "chunkline.yaml"
    config.write_text(f"output:\n  storage_options:\n    password: {SECRET}: x\n", encoding="utf-8")
    assert main(["run", str(docs), "--config", str(config), "--output", str(tmp_path / "out")]) == 2
    assert error_line(capsys) == (
        f"chunkline: error: {config}: not valid YAML (line 3, column 34: mapping values are not allowed here)"
    )


@pytest.mark.parametrize("value", [f"{{password: {SECRET}: x}}", SECRET, f"{{password: '{SECRET}}}"])
def test_a_malformed_storage_options_set_names_the_key_only(docs, tmp_path, capsys, value):
    assert main(["run", str(docs), "--output", str(tmp_path / "out"), "--set", f"output.storage_options={value}"]) == 2
    assert error_line(capsys).startswith("chunkline: error: output.storage_options: ")


def test_a_storage_option_set_as_digits_reaches_the_filesystem_as_text(docs, tmp_path, monkeypatch, capsys):
    seen = {}
    original = cli._check_before_running

    def record(config):
        seen.update(config.output.storage_options)
        original(config)

    monkeypatch.setattr(cli, "_check_before_running", record)
    output = tmp_path / "out"
    arguments = ["--set", "output.storage_options.auto_mkdir=true", "--set", "input.storage_options.auto_mkdir=0"]
    assert main(["run", str(docs), "--output", str(output), *arguments]) == 0, capsys.readouterr().err
    assert seen == {"auto_mkdir": "true"}  # text as given, not YAML's True
    assert manifest(output)["config"]["output"]["storage_options"] == {"auto_mkdir": "***"}


# --------------------------------------------------------------------------------------------------
# settings that would fail only once the pipeline ran
# --------------------------------------------------------------------------------------------------

LATE_FAILURES = {
    "compression": ("output.compression=bogus", "output: compression must be one of none, snappy, gzip"),
    "row-group-rows": (f"output.row_group_rows={10**21}", "row_group_rows must be a whole number from 1 to"),
    "max-file-bytes": (f"input.max_file_bytes={10**21}", "max_file_bytes must be a whole number from 1 to"),
    "regex-timeout": ("chunking.regex.timeout_seconds=inf", "timeout_seconds must be a number of seconds > 0"),
}


@pytest.mark.parametrize(("setting", "message"), LATE_FAILURES.values(), ids=LATE_FAILURES.keys())
def test_a_setting_that_would_fail_every_document_exits_2_before_the_pipeline(docs, tmp_path, capsys, setting, message):
    output = tmp_path / "out"
    regex = ["--set", "chunking.strategy=regex", "--set", "chunking.regex.pattern=^#"]
    assert main(["run", str(docs), "--output", str(output), *regex, "--set", setting]) == 2
    assert message in error_line(capsys)
    assert not output.exists()


@pytest.mark.parametrize(
    ("tokenizer_file", "message"),
    [
        ("/dev/zero", "tokenizer_file '/dev/zero' for encoding 'o200k_base' cannot be read: not a regular file"),
        ("{tmp}", "cannot be read: a folder"),
        ("{tmp}/missing.tiktoken", "cannot be read: no such file"),
        ("{tmp}/huge.tiktoken", "cannot be read: 67,108,865 bytes, over the 64 MB a rank file can have"),
    ],
)
def test_a_tokenizer_file_that_cannot_be_one_is_refused_without_reading_it(
    docs, tmp_path, capsys, tokenizer_file, message
):
    with open(tmp_path / "huge.tiktoken", "wb") as huge:
        huge.truncate(64 * 2**20 + 1)  # sparse: no disk or memory used
    settings = ["--set", "tokenizer=o200k_base", "--set", f"tokenizer_file={tokenizer_file.format(tmp=tmp_path)}"]
    for command in (["run", str(docs), "--output", str(tmp_path / "out")], ["chunk", str(docs)]):
        assert main([*command, *settings]) == 2
        assert message in error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_special_tokens_that_fill_max_tokens_exit_2_naming_the_tokenizer_and_the_figures(docs, tmp_path, capsys):
    """A post-processor that adds 8 special tokens to every count, and max_tokens 8: every chunk would be
    one character over the limit, so the config is refused before any work."""
    tokenizer_file = save(byte_level(8), tmp_path, "eight-special-tokens")
    settings = ["--set", "tokenizer=huggingface", "--set", f"tokenizer_file={tokenizer_file}"]
    settings += ["--set", "count_special_tokens=true", "--set", "max_tokens=8", "--set", "overlap_tokens=0"]
    for command in (["run", str(docs), "--output", str(tmp_path / "out")], ["chunk", str(docs)]):
        assert main([*command, *settings]) == 2
        assert error_line(capsys) == (
            f"chunkline: error: chunking.tokenizer_file {tokenizer_file}: its post-processor adds 8 special "
            "tokens to every count (count_special_tokens: true), which leaves 0 of chunking.max_tokens 8 for "
            "text, and one character can take 4: set max_tokens to at least 12, or count_special_tokens: false"
        )
    assert not (tmp_path / "out").exists()


def test_chunk_reports_a_file_the_tokenizer_fails_on_and_shows_the_others(docs, tmp_path, capsys):
    build, trigger = PANICKING["split-nested-quantifier"]
    tokenizer_file = save(build(), tmp_path, "split-nested-quantifier")
    runs = write_files(tmp_path / "more", {"runs.md": f"# Runs\n\n{trigger}\n".encode()}) / "runs.md"
    settings = ["--set", "tokenizer=huggingface", "--set", f"tokenizer_file={tokenizer_file}"]
    assert main(["chunk", str(runs), str(docs / "guide.md"), *settings]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        f"chunkline: {runs.as_posix()}: the Hugging Face tokenizer {tokenizer_file} failed on this text (Onig: "
        "Regex search error: retry-limit-in-match over); its normalizer or pre-tokenizer cannot handle it; skipped"
    ]
    assert f"== {(docs / 'guide.md').as_posix()}: " in captured.out
    assert "1 file(s), " in captured.out and "1 file(s) could not be read or chunked" in captured.out


def test_chunk_skips_a_file_that_is_not_regular(capsys):
    assert main(["chunk", "/dev/zero"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["chunkline: /dev/zero: not a regular file; skipped"]
    assert captured.out.startswith("0 file(s), 0 chunk(s)")


# --------------------------------------------------------------------------------------------------
# failures while running
# --------------------------------------------------------------------------------------------------


def test_a_storage_failure_is_one_line_with_exit_1(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"not a dataset\n")
    assert main(["inspect", str(blocker)]) == 1
    assert error_line(capsys).startswith(f"chunkline: error: cannot read file://{blocker}/_manifest.json")


def test_an_unexpected_error_is_one_line_with_exit_1_and_the_debug_hint(docs, tmp_path, monkeypatch, capsys):
    def failing_pipeline(config, beam_args, *, fork_workers=False, process_hooks=None):
        raise RuntimeError(
            f"Traceback (most recent call last):\n  File 'x'\nKeyError: key {SECRET} [while running 'Write']"
        )

    monkeypatch.setattr("chunkline.pipelines.run.run_pipeline", failing_pipeline)
    arguments = ["run", str(docs), "--output", str(tmp_path / "out"), "--set", f"output.storage_options.key={SECRET}"]
    assert main(arguments) == 1
    assert error_line(capsys) == (
        "chunkline: error: KeyError: key *** [while running 'Write'] (RuntimeError; rerun with CHUNKLINE_DEBUG=1 "
        "for the traceback)"
    )
    monkeypatch.setenv("CHUNKLINE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="while running 'Write'"):
        main(arguments)


@pytest.mark.slow
def test_a_missing_tokenizer_is_reported_once_by_the_program(docs, tmp_path):
    """The whole stderr of ``chunkline run``: the encoding is loaded once, in the driver, before any work."""
    arguments = ["run", str(docs), "--output", str(tmp_path / "out"), "--set", "tokenizer=o200k_base"]
    environment = {name: value for name, value in os.environ.items() if not name.startswith("CHUNKLINE_")}
    completed = subprocess.run(
        [sys.executable, "-m", "chunkline.pipelines.cli", *arguments],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
    )
    assert completed.returncode == 2
    lines = completed.stderr.strip().splitlines()
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("chunkline: error: tiktoken encoding 'o200k_base' needs o200k_base.tiktoken")
    assert "set chunking.tokenizer_file" in lines[0]
    assert not (tmp_path / "out").exists()
