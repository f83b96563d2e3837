"""Security: credentials from the environment never leave the process, YAML configs cannot run code, an
output inside an input is refused before anything is written, and doc_ids never climb out of the input.

Elsewhere: credentials given with ``--set`` and echoed by a storage error (``test_publishing.py``,
``test_credentials_are_never_written_or_printed``); the first output-inside-input cases and memory URLs
(``test_publishing.py``); a Python-object tag in front matter (``test_bad_input.py``); a config file's tags
for the chunking settings alone (``tests/test_config.py``); user regexes that could hang a run
(``tests/test_hostile_input.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from chunkline.dataset.settings import load_run_config
from chunkline.pipelines.cli import main
from chunkline.settings import ConfigError

from .conftest import CORPUS, documents, rows, run, write_corpus, write_files

pytestmark = pytest.mark.timeout(300)

# --------------------------------------------------------------------------------------------------
# Credentials in the environment
# --------------------------------------------------------------------------------------------------

#: Variables a storage backend would read, and chunkline's own storage-option overrides.
ENVIRONMENT_SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAENVSECRET0000001",
    "AWS_SECRET_ACCESS_KEY": "envsecret-aws-4f1c9e77d2",
    "AWS_SESSION_TOKEN": "envsecret-session-8b3d0a61",
    "AZURE_STORAGE_KEY": "envsecret-azure-6e2f5c90",
    "AZURE_STORAGE_CONNECTION_STRING": "AccountName=harbour;AccountKey=envsecret-azconn-1d7b",
    "CHUNKLINE_INPUT_STORAGE_OPTIONS__KEY": "envsecret-input-key-93ab71",
    "CHUNKLINE_INPUT_STORAGE_OPTIONS__SECRET": "envsecret-input-secret-05c4e2",
    "CHUNKLINE_OUTPUT_STORAGE_OPTIONS__TOKEN": "envsecret-output-token-7a1f38",
}

# ``chunkline`` with a local storage whose errors repeat its credentials, like a careless storage client.
ECHOING_CLI = """
import sys
from fsspec.implementations.local import LocalFileSystem

original_open = LocalFileSystem._open

def storage_that_echoes_credentials(self, path, mode="rb", *args, **kwargs):
    if path.endswith("locked.md") and "r" in mode:
        raise PermissionError(f"403 Forbidden: options {self.storage_options} may not read {path}")
    return original_open(self, path, mode, *args, **kwargs)

LocalFileSystem._open = storage_that_echoes_credentials
import chunkline.dataset.inputs  # every read through the storage's open, not plain system calls
chunkline.dataset.inputs._read_local_file = lambda path, limit: None
from chunkline.pipelines.cli import console_main
sys.argv = ["chunkline", *sys.argv[1:]]
console_main()
"""


def _chunkline(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, **ENVIRONMENT_SECRETS, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-c", ECHOING_CLI, *arguments], cwd=cwd, env=environment, capture_output=True, timeout=240
    )


def _secrets_in(data: bytes) -> list[str]:
    return [name for name, value in ENVIRONMENT_SECRETS.items() if value.encode() in data]


@pytest.mark.parametrize("workers", [0, 2], ids=["in-process", "two-worker-processes"])
@pytest.mark.slow
def test_credentials_from_the_environment_never_appear_in_outputs_logs_or_errors(tmp_path, workers):
    root = write_corpus(tmp_path / "corpus")
    write_files(root, {"private/locked.md": b"# Locked\n\nOnly for the harbour master.\n", "bad.md": b"# Bad \xff\n"})
    blocker = write_files(tmp_path, {"blocker": b"a file where a folder should be\n"}) / "blocker"
    runner = ["--workers", str(workers)] if workers else []
    processes = {
        "run": _chunkline(["run", str(root), "--output", "dataset", *runner], tmp_path),
        "inspect": _chunkline(["inspect", "dataset", "--errors", "20"], tmp_path),
        "failed run": _chunkline(["run", str(root), "--output", str(blocker / "dataset"), *runner], tmp_path),
        "missing input": _chunkline(
            ["run", str(root), str(tmp_path / "missing"), "--output", "dataset", *runner], tmp_path
        ),
    }
    assert processes["run"].returncode == 0, processes["run"].stderr.decode()
    assert processes["missing input"].returncode == 1, processes["missing input"].stderr.decode()
    assert f"input {tmp_path / 'missing'} does not exist".encode() in processes["missing input"].stderr
    assert processes["inspect"].returncode == 0, processes["inspect"].stderr.decode()
    # An output below a file is refused before anything is written, in one line naming the file.
    assert processes["failed run"].returncode == 2, processes["failed run"].stderr.decode()
    assert processes["failed run"].stderr.decode().splitlines() == [
        f"chunkline: error: output {blocker / 'dataset'}: {blocker} is a file; --output names the folder the "
        "dataset is published in"
    ]

    # Every byte printed or logged by every process.
    for name, process in processes.items():
        for stream in ("stdout", "stderr"):
            assert not _secrets_in(getattr(process, stream)), (
                f"{name} {stream}: {_secrets_in(getattr(process, stream))}"
            )
    # Every byte of every file the runs wrote (the dataset, and anything else under tmp_path).
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len([path for path in written if "dataset" in path.parts]) >= 5
    for path in written:
        assert not _secrets_in(path.read_bytes()), f"{path}: {_secrets_in(path.read_bytes())}"

    output = tmp_path / "dataset"
    errors = {row["doc_id"]: row for row in rows(output, "errors")}
    assert {"bad.md"} <= set(errors)
    if not workers:  # the echoing storage is patched into this process only, not into Beam's workers
        assert set(errors) == {"private/locked.md", "bad.md"}
        assert "options {'key': '***', 'secret': '***'} may not read" in errors["private/locked.md"]["message"]
        assert "may not read" in processes["run"].stdout.decode() and "***" in processes["run"].stdout.decode()
    config = json.loads((output / "_manifest.json").read_text())["config"]
    assert config["input"]["storage_options"] == {"key": "***", "secret": "***"}
    assert config["output"]["storage_options"] == {"token": "***"}


# --------------------------------------------------------------------------------------------------
# YAML config files
# --------------------------------------------------------------------------------------------------

PAYLOADS = {
    "apply-as-output": 'output:\n  url: !!python/object/apply:os.system ["touch {marker}"]\n',
    "apply-in-input-paths": 'input:\n  paths:\n    - docs\n    - !!python/object/apply:os.system ["touch {marker}"]\n',
    "apply-as-section": 'run: !!python/object/apply:os.system ["touch {marker}"]\n',
    "new-in-storage-options": 'input:\n  storage_options:\n    key: !!python/object/new:os.system ["touch {marker}"]\n',
    "apply-subprocess": 'chunking:\n  max_tokens: !!python/object/apply:subprocess.check_call [["touch", "{marker}"]]\n',
}


@pytest.mark.parametrize("payload", PAYLOADS.values(), ids=PAYLOADS.keys())
def test_python_tags_in_a_run_config_are_refused_and_never_run(tmp_path, payload, capsys):
    marker = tmp_path / "payload-ran"
    config = tmp_path / "chunkline.yaml"
    config.write_text(payload.format(marker=marker))
    root = write_corpus(tmp_path / "docs")

    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run_config(config, [], environ={}, inputs=[str(root)], output=str(tmp_path / "out"))
    assert main(["run", str(root), "--config", str(config), "--output", str(tmp_path / "out")]) == 2
    assert "chunkline: error:" in capsys.readouterr().err
    assert not marker.exists(), "the config file's payload ran"
    assert not (tmp_path / "out").exists()

    # Control: the payload is live; an unsafe YAML loader would have run it.
    yaml.unsafe_load(config.read_text())
    assert marker.exists()


# --------------------------------------------------------------------------------------------------
# An output inside an input
# --------------------------------------------------------------------------------------------------


def _tree(base: Path) -> dict[str, bytes | None]:
    return {
        path.relative_to(base).as_posix(): (path.read_bytes() if path.is_file() else None)
        for path in sorted(base.rglob("*"))
    }


OUTPUT_INSIDE_INPUT = {
    "relative-spelled-differently": (["docs"], "./docs/../docs/out"),
    "relative-same-folder": (["./docs/"], "docs"),
    "relative-input-absolute-output": (["docs"], "{base}/docs/guide/../out"),
    "file-url-output": (["{base}/docs"], "file://{base}/docs/../docs/out"),
    "file-url-input-relative-output": (["file://{base}/docs"], "docs/out"),
    "file-url-both": (["file://{base}/docs/"], "file://{base}/docs/build/dataset"),
    "local-url-output": (["docs"], "local://{base}/docs/out"),
    "through-a-symlink": (["docs"], "link-to-docs/out"),
    "glob-input": (["docs/**/*.md"], "./docs/build"),
    "glob-in-a-subfolder": (["docs/guide/*.md"], "docs/guide/out"),
    "second-input": (["other", "./docs"], "docs/./out"),
}


@pytest.mark.parametrize(("inputs", "output"), OUTPUT_INSIDE_INPUT.values(), ids=OUTPUT_INSIDE_INPUT.keys())
def test_output_inside_an_input_is_refused_before_anything_is_written(tmp_path, monkeypatch, capsys, inputs, output):
    write_corpus(tmp_path / "docs")
    write_files(tmp_path / "other", {"x.md": b"# X\n"})
    (tmp_path / "link-to-docs").symlink_to(tmp_path / "docs", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    before = _tree(tmp_path)
    inputs = [item.format(base=tmp_path) for item in inputs]
    output = output.format(base=tmp_path)

    with pytest.raises(ConfigError, match="inside input"):
        run(inputs, output)
    assert main(["run", *inputs, "--output", output]) == 2
    assert "inside input" in capsys.readouterr().err
    assert _tree(tmp_path) == before, "a refused run created or changed files"


@pytest.mark.parametrize(
    ("inputs", "output"),
    [(["memory://docs"], "memory:///docs/out"), (["memory:///docs/"], "memory://docs/./out")],
    ids=["memory-without-slash", "memory-dot"],
)
def test_memory_output_inside_a_memory_input_spelled_differently_is_refused(memory_fs, inputs, output):
    memory_fs.pipe("/docs/a.md", b"# A\n")
    with pytest.raises(ConfigError, match="inside input"):
        run(inputs, output)
    assert sorted(memory_fs.store) == ["/docs/a.md"]


# --------------------------------------------------------------------------------------------------
# doc_ids stay inside the input
# --------------------------------------------------------------------------------------------------


def _assert_safe_doc_ids(output: Path) -> set[str]:
    found = set()
    for table in ("chunks", "documents", "errors"):
        for row in rows(output, table):
            doc_id = row["doc_id"]
            assert ".." not in doc_id.split("/"), f"{table}: {doc_id!r} climbs out of its input"
            assert not doc_id.startswith("/"), f"{table}: {doc_id!r} is absolute"
            assert "" not in doc_id.split("/") and "." not in doc_id.split("/"), f"{table}: {doc_id!r} is not clean"
            found.add(doc_id)
    return found


INPUT_SPELLINGS = {
    "dot-dot": "{root}/guide/advanced/../..",
    "relative-dot-dot": "../corpus/./guide/..",
    "file-url": "file://{root}/",
    "file-url-dot-dot": "file://{root}/reference/..",
    "glob": "{root}/**/*.md",
    "relative-glob-dot-dot": "../corpus/guide/../**/*.md",
    "glob-dot-dot-after-wildcard": "{root}/guide/*/../*.md",
}


@pytest.mark.parametrize("spelling", INPUT_SPELLINGS.values(), ids=INPUT_SPELLINGS.keys())
@pytest.mark.slow
def test_doc_ids_never_climb_out_of_the_input_whatever_its_spelling(tmp_path, monkeypatch, spelling):
    root = write_corpus(tmp_path / "corpus")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    output = tmp_path / "out"
    run([spelling.format(root=root)], output)
    found = _assert_safe_doc_ids(output)
    assert found, "no document was read"
    # Each doc_id is the tail of a corpus path (relative to the folder before the first wildcard).
    assert all(any(doc_id == path or path.endswith("/" + doc_id) for path in CORPUS) for doc_id in found), found


def test_zip_members_that_climb_out_are_reported_not_read_and_the_others_get_clean_doc_ids(tmp_path):
    archive = tmp_path / "upload.zip"
    members = {
        "ok/a.md": b"# A\n\nInside.\n",
        "../evil.md": b"# Evil\n\nClimbs one level.\n",
        "../../up/deeper.md": b"# Deeper\n",
        "ok/../../sneaky.md": b"# Sneaky\n",
        "/absolute.md": b"# Absolute\n\nA leading slash.\n",
        "x/../inner.md": b"# Inner\n\nStays inside once normalized.\n",
        "./dotted.md": b"# Dotted\n",
    }
    with zipfile.ZipFile(archive, "w") as bundle:
        for name, data in members.items():
            bundle.writestr(zipfile.ZipInfo(name), data)
    assert set(zipfile.ZipFile(archive).namelist()) == set(members)

    output = tmp_path / "out"
    run([f"zip::{archive.as_uri()}"], output)
    found = _assert_safe_doc_ids(output)
    # The members that climb are error rows under ids of their own (tests/pipeline/test_zip_member_names.py).
    # A member named with a leading slash is absolute where the archive is unpacked: it climbs out too.
    outside = {doc_id for doc_id in found if doc_id.startswith("_outside_input/")}
    assert len(outside) == 4
    assert found - outside == {"ok/a.md", "inner.md", "dotted.md"}
    docs = documents(output)
    assert {doc_id: row["status"] for doc_id, row in docs.items()} == {
        **dict.fromkeys(found - outside, "ok"),
        **dict.fromkeys(outside, "error"),
    }
    errors = {row["doc_id"]: row for row in rows(output, "errors")}
    assert set(errors) == outside
    assert {doc_id: errors[doc_id]["stage"] for doc_id in outside} == dict.fromkeys(outside, "match")
    assert not any(path.name in ("evil.md", "deeper.md", "sneaky.md") for path in tmp_path.rglob("*"))

    # The same archive with a subfolder as the input root: "ok/../../sneaky.md" climbs out of it too.
    run([f"zip://ok::{archive.as_uri()}"], tmp_path / "subfolder")
    in_subfolder = _assert_safe_doc_ids(tmp_path / "subfolder")
    assert {doc_id for doc_id in in_subfolder if not doc_id.startswith("_outside_input/")} == {"a.md"}
    assert len(in_subfolder) == 2
