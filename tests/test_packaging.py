"""chunkline as a package: ``python -m chunkline``, dependencies declared where they are imported, the report
extra's message when matplotlib is missing, and what a distributed runner's workers are given (the sdist Beam
builds from ``--setup_file ./pyproject.toml``, the worker requirements the Dataflow example names)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shlex
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SOURCE_FOLDERS = ("chunkline", "pipelines", "transforms", "schemas")

pytestmark = pytest.mark.timeout(300)


def requirement_names(requirements: list[str]) -> set[str]:
    return {_normalized(Requirement(line).name) for line in requirements}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def module_level_imports(path: Path) -> set[str]:
    """The top-level names a module imports when it is loaded: statements at module level, outside
    ``if TYPE_CHECKING:`` (imports inside functions are lazy and belong to extras)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in tree.body:
        statements = [node]
        if isinstance(node, ast.Try):  # try: import tomllib / except: import tomli
            statements = [*node.body, *(line for handler in node.handlers for line in handler.body)]
        for statement in statements:
            if isinstance(statement, ast.Import):
                names.update(alias.name.split(".")[0] for alias in statement.names)
            elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
                names.add(statement.module.split(".")[0])
    return names


@pytest.mark.slow
def test_every_module_level_import_is_a_declared_core_dependency():
    """What chunkline imports when a module loads is in ``[project].dependencies`` (``regex`` included, a
    direct dependency of the engine's patterns and strategies, not only tiktoken's); matplotlib is not
    imported at module level: it belongs to the ``report`` extra."""
    core = requirement_names(PYPROJECT["project"]["dependencies"])
    distributions = importlib.metadata.packages_distributions()
    undeclared: dict[str, set[str]] = {}
    imported: set[str] = set()
    for folder in SOURCE_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in module_level_imports(path):
                if name in sys.stdlib_module_names or name in ("chunkline", "__future__"):
                    continue
                imported.add(name)
                owners = {_normalized(owner) for owner in distributions.get(name, [name])}
                if not owners & core:
                    undeclared.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    assert undeclared == {}
    assert {"regex", "apache_beam", "pyarrow", "fsspec"} <= imported
    assert "matplotlib" not in imported
    assert "regex" in core and "matplotlib" not in core


def test_the_report_extra_holds_matplotlib_and_the_test_extra_installs_it():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert requirement_names(extras["report"]) == {"matplotlib"}
    assert requirement_names(extras["report"]) <= requirement_names(extras["test"])


def test_python_dash_m_chunkline_is_the_command_line(tmp_path):
    document = tmp_path / "notes.md"
    document.write_text("# Notes\n\nIt\u2019s the caf\u00e9 by the quay.\n", encoding="utf-8")
    version = subprocess.run(
        [sys.executable, "-m", "chunkline", "--version"], capture_output=True, text=True, timeout=120
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"chunkline {importlib.metadata.version('chunkline')}"
    chunked = subprocess.run(
        [sys.executable, "-m", "chunkline", "chunk", str(document), "--format", "jsonl"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
    )
    assert chunked.returncode == 0, chunked.stderr
    records = [json.loads(line) for line in chunked.stdout.splitlines()]
    assert [record["text"] for record in records] == [document.read_text(encoding="utf-8")]
    mistake = subprocess.run(
        [sys.executable, "-m", "chunkline", "chunk", str(document), "--max-tokens", "9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert mistake.returncode == 2
    assert "did you mean `--set max_tokens=9`?" in mistake.stderr


# Runs chunkline's command line in a fresh interpreter where ``import matplotlib`` fails, as it does when
# the report extra is not installed.
_WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None
from chunkline.pipelines.cli import main
import chunkline.pipelines.evaluation_report, chunkline.pipelines.report  # they load; drawing needs matplotlib
status = main(sys.argv[1:])
print("matplotlib" in sys.modules and sys.modules["matplotlib"] is not None, file=sys.stderr)
sys.exit(status)
"""


def run_without_matplotlib(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _WITHOUT_MATPLOTLIB, *arguments], capture_output=True, text=True, timeout=120
    )


@pytest.mark.slow
def test_inspect_html_without_matplotlib_names_the_report_extra(tmp_path):
    report = tmp_path / "report.html"
    result = run_without_matplotlib("inspect", str(tmp_path / "dataset"), "--html", str(report))
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("chunkline: error: the HTML report needs matplotlib")
    assert lines[0].endswith(": pip install 'chunkline[report]'")
    assert lines[1:] == ["False"]
    assert not report.exists()


@pytest.mark.slow
def test_evaluate_report_without_matplotlib_stops_before_the_evaluation(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "tides.md").write_text("# Tides\n\nThe tide gauge reads every minute.\n", encoding="utf-8")
    questions = tmp_path / "questions.jsonl"
    questions.write_text(
        json.dumps({"question": "How often?", "references": [{"doc_id": "tides.md", "start_char": 9, "end_char": 42}]})
        + "\n",
        encoding="utf-8",
    )
    report = tmp_path / "evaluation.html"
    arguments = ["evaluate", str(corpus), "--questions", str(questions), "--retriever", "bm25"]
    result = run_without_matplotlib(*arguments, "--report", str(report))
    assert result.returncode == 2
    error = result.stderr.splitlines()[0]
    assert error.startswith("chunkline: error: the HTML report needs matplotlib")
    assert error.endswith("pip install 'chunkline[report]'")
    assert "evaluated" not in result.stderr  # nothing was evaluated before the refusal
    assert not report.exists()


# --------------------------------------------------------------------------------------------------
# What a distributed runner's workers get
# --------------------------------------------------------------------------------------------------


def dataflow_example_options() -> list[str]:
    """The arguments of the ``chunkline run`` command in configs/large-corpus-dataflow.yaml's header comment
    (its lines joined where they end in a backslash, a trailing ``# ...`` comment left out)."""
    lines = (ROOT / "configs" / "large-corpus-dataflow.yaml").read_text(encoding="utf-8").splitlines()
    comment = [line.lstrip("#").strip() for line in lines if line.startswith("#")]
    first = next(number for number, line in enumerate(comment) if line.startswith("chunkline run"))
    command = []
    for line in comment[first:]:
        command.append(line.split(" # ", 1)[0].removesuffix("\\"))
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(command))[2:]


def test_what_the_dataflow_example_references_is_in_the_repository():
    options = dataflow_example_options()
    values = {options[index]: options[index + 1] for index in range(len(options) - 1) if options[index][:2] == "--"}
    assert (ROOT / values["--config"]).is_file()
    assert Path(values["--setup_file"]).name == "pyproject.toml" and (ROOT / values["--setup_file"]).is_file()
    requirements = ROOT / values["--requirements_file"]
    lines = [
        line for line in requirements.read_text(encoding="utf-8").splitlines() if line and not line.startswith("#")
    ]
    # The workers' filesystem in the range chunkline's gcs extra declares.
    assert lines == PYPROJECT["project"]["optional-dependencies"]["gcs"]


def test_the_dataflow_example_options_are_beam_options():
    """``chunkline run`` checks every option it does not know against Beam's option classes (those of the
    runner included); every option of the example passes, and Beam reads the setup and requirements files."""
    from apache_beam.options.pipeline_options import PipelineOptions, SetupOptions

    from chunkline.pipelines.beam_options import BeamOptions

    options = dataflow_example_options()
    beam_args = options[options.index("--runner") :]
    assert BeamOptions(beam_args).unrecognised(beam_args) == []
    setup = PipelineOptions(beam_args).view_as(SetupOptions)
    assert (setup.setup_file, setup.requirements_file) == ("./pyproject.toml", "requirements-workers.txt")


@pytest.mark.slow
def test_the_sdist_beam_builds_from_pyproject_installs_every_module(tmp_path):
    """``--setup_file ./pyproject.toml`` makes Beam run ``python -m build --no-isolation --sdist`` in the
    repository; the workers then build a wheel from that sdist. Both hold every module and config file."""
    sdist_folder, wheel_folder = tmp_path / "sdist", tmp_path / "wheel"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--sdist", "--outdir", str(sdist_folder), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (sdist,) = sdist_folder.glob("chunkline-*.tar.gz")
    with tarfile.open(sdist) as archive:
        # The "data" filter where this Python has it (3.10.12 and later): no member outside the folder.
        archive.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    wheel_built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir", str(wheel_folder), str(unpacked)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert wheel_built.returncode == 0, wheel_built.stdout[-2000:] + wheel_built.stderr[-2000:]
    (wheel,) = wheel_folder.glob("chunkline-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    expected = {"chunkline/__main__.py", "chunkline/configs/default.yaml"}
    for folder, package in (("chunkline", "chunkline"), ("pipelines", "chunkline/pipelines")):
        expected |= {
            f"{package}/{path.relative_to(ROOT / folder).as_posix()}" for path in (ROOT / folder).rglob("*.py")
        }
    for folder in ("transforms", "schemas"):
        expected |= {f"chunkline/{folder}/{path.name}" for path in (ROOT / folder).glob("*.py")}
    assert expected <= names, sorted(expected - names)
    assert not any(name.startswith(("tests/", "pipelines/", "transforms/", "schemas/")) for name in names)
