"""chunkline's library leaves the process it runs in as it found it.

A user's program runs ``ReadMarkdown`` -> ``ChunkMarkdown`` -> ``WriteChunkDataset`` on the in-process
FnApiRunner and calls ``chunk_markdown`` on a document of more than 64 KB (the size from which the engine
used to pause the garbage collector and hand the encoding to a thread): afterwards the collector, its
thresholds and frozen objects, pyarrow's default pool, the live threads and tiktoken's modules are as
before, and nothing switched the collector or the pool even for a while. Loading an encoding while another
thread reads tiktoken's loader shows that thread tiktoken's own. A static check over the library's source
(everything but ``pipelines/``) finds no call of ``mallopt``, ``malloc_trim``, ``set_memory_pool``,
``gc.disable`` or ``gc.freeze``, and no assignment into another package's modules: an allocator setting
cannot be read back, so the source is what shows that none is made.
"""

from __future__ import annotations

import ast
import gc
import threading
import time
from pathlib import Path

import apache_beam as beam
import pyarrow as pa
import pytest
import tiktoken
import tiktoken.load
import tiktoken.registry
import tiktoken_ext.openai_public
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

import chunkline
from chunkline.dataset.publish import read_manifest
from chunkline.dataset.settings import load_run_config
from chunkline.tokenizers import load_encoding
from chunkline.transforms import ChunkMarkdown, ReadMarkdown, WriteChunkDataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPOSITORY = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPOSITORY / "sample_corpus"
LIBRARY_FOLDERS = ("chunkline", "transforms", "schemas")
"""Everything installed as ``chunkline`` but ``pipelines/`` (the command line, which owns its process)."""


def large_document() -> str:
    """The sample corpus's files joined until they pass 64 KB (with list items and headings, which the
    parse allocates most for)."""
    texts = [path.read_text(encoding="utf-8") for path in sorted(SAMPLE_CORPUS.rglob("*.md"))]
    document = ""
    while len(document) < 96 * 1024:
        document += "\n\n".join(texts) + "\n\n- an item\n- another item\n\n## A heading\n\n"
    return document


def _module_attributes(*modules) -> dict[str, dict[str, int]]:
    """The identity of every attribute of each module."""
    return {module.__name__: {name: id(value) for name, value in vars(module).items()} for module in modules}


def _tiktoken_modules() -> dict[str, dict[str, int]]:
    return _module_attributes(tiktoken, tiktoken.load, tiktoken.registry, tiktoken_ext.openai_public)


class _Recorder:
    """Records each call of the process-wide switches the library must never pull."""

    def __init__(self, monkeypatch):
        self.calls: list[str] = []
        for module, name in (
            (gc, "disable"),
            (gc, "enable"),
            (gc, "freeze"),
            (gc, "unfreeze"),
            (gc, "set_threshold"),
            (pa, "set_memory_pool"),
        ):
            monkeypatch.setattr(module, name, self._recording(f"{module.__name__}.{name}", getattr(module, name)))

    def _recording(self, label, function):
        def recorded(*args, **kwargs):
            self.calls.append(label)
            return function(*args, **kwargs)

        return recorded


def _live_threads_besides(before: set[threading.Thread], wait_seconds: float = 5.0) -> list[str]:
    """The threads alive now that were not in ``before``, after up to ``wait_seconds`` for them to end."""
    deadline = time.monotonic() + wait_seconds
    while True:
        extra = [thread for thread in threading.enumerate() if thread not in before and thread.is_alive()]
        if not extra or time.monotonic() > deadline:
            return [thread.name for thread in extra]
        time.sleep(0.05)


def _user_pipeline(corpus: Path, output: Path) -> None:
    config = load_run_config(
        None, ["chunking.max_tokens=128", "output.shards=2"], environ={}, inputs=[str(corpus)], output=str(output)
    )
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        _ = pipeline | ReadMarkdown(config) | ChunkMarkdown(config) | WriteChunkDataset(config)


@pytest.fixture
def corpus_with_a_large_document(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in sorted(SAMPLE_CORPUS.rglob("*.md")):
        (corpus / path.name).write_bytes(path.read_bytes())
    (corpus / "large.md").write_text(large_document(), encoding="utf-8")
    return corpus


def test_a_user_pipeline_and_chunk_markdown_leave_the_process_as_they_found_it(
    corpus_with_a_large_document, tmp_path, monkeypatch
):
    # Beam's runner keeps threads of its own between pipelines: one small run first, so that those are
    # among the threads found before.
    warm_up = tmp_path / "warm-up"
    warm_up.mkdir()
    (warm_up / "one.md").write_text("# One\n\nA paragraph.\n", encoding="utf-8")
    _user_pipeline(warm_up, tmp_path / "warm-up-output")

    threads_before = set(threading.enumerate())
    collector = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    pool = pa.default_memory_pool().backend_name
    tiktoken_before = _tiktoken_modules()
    switches = _Recorder(monkeypatch)

    output = tmp_path / "dataset"
    _user_pipeline(corpus_with_a_large_document, output)
    chunks = chunkline.chunk_markdown(large_document(), chunkline.ChunkConfig(max_tokens=256), encode_ahead=None)
    load_encoding.__wrapped__("cl100k_base")  # a fresh load, past the process's cache

    assert read_manifest(str(output))["counts"]["documents_ok"] == len(list(SAMPLE_CORPUS.rglob("*.md"))) + 1
    assert len(chunks) > 20 and chunkline.reconstruct(chunks) == large_document()
    assert switches.calls == []
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == collector
    assert pa.default_memory_pool().backend_name == pool
    assert _live_threads_besides(threads_before) == []
    assert _tiktoken_modules() == tiktoken_before


def test_loading_an_encoding_shows_other_threads_tiktokens_own_loader():
    """Another thread of the program reads tiktoken's loader while chunkline loads an encoding: it always
    finds tiktoken's own function, never one of chunkline's in its place."""
    own = {
        "tiktoken_ext.openai_public": vars(tiktoken_ext.openai_public)["load_tiktoken_bpe"],
        "tiktoken.load": tiktoken.load.load_tiktoken_bpe,
    }
    seen: set[int] = set()
    loading = threading.Event()
    done = threading.Event()

    def watch() -> None:
        loading.set()
        while not done.is_set():
            seen.add(id(vars(tiktoken_ext.openai_public).get("load_tiktoken_bpe")))
            seen.add(id(tiktoken.load.load_tiktoken_bpe))

    watcher = threading.Thread(target=watch)
    watcher.start()
    loading.wait(5)
    try:
        for _ in range(3):
            load_encoding.__wrapped__("cl100k_base")
    finally:
        done.set()
        watcher.join(10)
    assert seen == {id(function) for function in own.values()}


# ------------------------------------------------------------------------ what the source shows

_FORBIDDEN_CALLS = {"mallopt", "malloc_trim", "set_memory_pool"}
_FORBIDDEN_GC = {"disable", "freeze", "set_threshold", "unfreeze", "enable"}


def library_files() -> list[Path]:
    return sorted(path for folder in LIBRARY_FOLDERS for path in (REPOSITORY / folder).rglob("*.py"))


def process_state_changes(source: str) -> list[str]:
    """What the module ``source`` does to process-wide state: calls of the C allocator's settings, pyarrow's
    pool switch or the garbage collector's switches; looking up ``mallopt`` or ``malloc_trim`` by name;
    assignments to attributes of a module it imported from another package; and any use of a function's
    ``__globals__`` (the way to patch a module's names)."""
    tree = ast.parse(source)
    foreign_modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if not alias.name.startswith("chunkline"):
                    foreign_modules.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("chunkline"):
            for alias in node.names:
                foreign_modules.add(alias.asname or alias.name)
    found = []
    for node in ast.walk(tree):
        where = f"line {getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute):
            if node.attr in _FORBIDDEN_CALLS:
                found.append(f"{where}: .{node.attr}")
            if node.attr in _FORBIDDEN_GC and isinstance(node.value, ast.Name) and node.value.id == "gc":
                found.append(f"{where}: gc.{node.attr}")
            if node.attr == "__globals__":
                found.append(f"{where}: __globals__")
        elif isinstance(node, ast.Constant) and node.value in ("mallopt", "malloc_trim"):
            found.append(f"{where}: {node.value!r} looked up")
        elif isinstance(node, ast.ImportFrom) and node.module == "gc":
            found.append(f"{where}: from gc import ...")
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                base = target
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if target is not base and isinstance(base, ast.Name) and base.id in foreign_modules:
                    found.append(f"{where}: assigns into {base.id}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            if node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in foreign_modules:
                found.append(f"{where}: {node.func.id}({node.args[0].id}, ...)")
    return found


def test_no_library_module_changes_process_wide_state():
    files = library_files()
    assert len(files) > 50 and any(path.name == "merge.py" for path in files)
    changes = {
        str(path.relative_to(REPOSITORY)): found
        for path in files
        if (found := process_state_changes(path.read_text(encoding="utf-8")))
    }
    assert changes == {}


@pytest.mark.parametrize(
    "source",
    [
        "import ctypes\nctypes.CDLL(None).mallopt(-3, 1 << 22)\n",
        "import ctypes\ntrim = getattr(ctypes.CDLL(None), 'malloc_trim')\n",
        "import pyarrow as pa\npa.set_memory_pool(pa.system_memory_pool())\n",
        "import gc\ngc.disable()\n",
        "import gc\ngc.freeze()\n",
        "import tiktoken.load\ntiktoken.load.load_tiktoken_bpe = print\n",
        "from tiktoken_ext import openai_public\nopenai_public.load_tiktoken_bpe = print\n",
        "def load(constructor, loader):\n    constructor.__globals__['load_tiktoken_bpe'] = loader\n",
        "import tiktoken\nsetattr(tiktoken, 'get_encoding', print)\n",
    ],
)
def test_the_static_check_finds_each_kind_of_change(source):
    assert process_state_changes(source)


def test_the_static_check_lets_ordinary_code_pass():
    source = "import pyarrow as pa\nimport gc\npool = pa.default_memory_pool()\nenabled = gc.isenabled()\n"
    assert process_state_changes(source) == []
