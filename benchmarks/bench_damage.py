"""Damage benchmark: every single damage of ``tests/damage_matrix.py`` done to an output of a real corpus,
then the next run, checked against a clean run.

The corpus is copied to a temporary folder (with ``--hostile``, the generated hostile corpus of
``tests/hostile_corpus.py`` is added under ``hostile/``, so the errors table has rows too) and built into
an output twice: a full run (the older snapshot), then, after 1% of the documents got a paragraph appended,
one was added and one deleted, an incremental run (the latest). A full run of the same corpus into a fresh
output is the reference. Then, for each damage, a copy of the output is damaged and the pipeline runs on it
again (in this process, on the in-process runner); the table printed says what came of it:

- ``ok: ...``: the published dataset equals the reference row for row in every row table, ``changes/`` is
  consistent with the snapshot it names as its base (or marks a full reload), ``_SUCCESS`` names the
  published snapshot; the rebuild mode and the base are shown;
- ``refused: ...``: the run failed with a message (one line) and left the last published snapshot as it was;
- ``WRONG: ...``: the run published something else, or failed and changed what was published.

Seconds are the rerun's; the clean incremental rerun and the full reference run are timed the same way
for scale. The exit status is 1 if any outcome is ``WRONG``.

Usage::

    python benchmarks/bench_damage.py CORPUS_DIR [--hostile] [--only TEXT] [--reindex]
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
sys.path.insert(0, str(TESTS))

import hostile_corpus  # noqa: E402  (lives in tests/, put on the path above)
from damage_matrix import DAMAGES, Snapshots, check_rerun, reference_rows  # noqa: E402

from chunkline.dataset.settings import load_run_config  # noqa: E402
from chunkline.pipelines.run import run_pipeline  # noqa: E402


def _run(corpus: Path, output: Path, *overrides: str):
    config = load_run_config(None, list(overrides), environ={}, inputs=[str(corpus)], output=str(output))
    started = time.perf_counter()
    summary = run_pipeline(config)
    return summary, time.perf_counter() - started


def _edit(corpus: Path) -> None:
    """1% of the documents (at least one) get a paragraph appended; one is added and one deleted."""
    documents = sorted(path for path in corpus.rglob("*") if path.suffix in (".md", ".markdown") and path.is_file())
    edited = max(1, len(documents) // 100)
    for path in documents[:: max(1, len(documents) // edited)][:edited]:
        path.write_bytes(path.read_bytes() + b"\n\nA paragraph appended between the two snapshots.\n")
    (corpus / "added-between-snapshots.md").write_bytes(b"# Added\n\nA document the older snapshot does not have.\n")
    documents[-1].unlink()


def _one_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text.splitlines()[0][:140] if text.strip() else type(error).__name__


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="a folder of markdown files")
    parser.add_argument("--hostile", action="store_true", help="add the generated hostile corpus under hostile/")
    parser.add_argument("--only", default="", help="only the damages whose name holds this text")
    parser.add_argument("--reindex", action="store_true", help="rerun with --reindex")
    arguments = parser.parse_args(argv)
    logging.basicConfig(format="%(message)s", level=logging.ERROR)
    logging.getLogger("chunkline").setLevel(logging.ERROR)  # the table says what each run did
    overrides = ["run.reindex=true"] if arguments.reindex else []
    with tempfile.TemporaryDirectory(prefix="chunkline-damage-") as scratch:
        root = Path(scratch)
        corpus = root / "corpus"
        shutil.copytree(arguments.corpus, corpus)
        if arguments.hostile:
            hostile_corpus.write_hostile_corpus(corpus / "hostile")
        history = root / "history"
        older, _ = _run(corpus, history)
        _edit(corpus)
        latest, _ = _run(corpus, history)
        snapshots = Snapshots(older.run_id, latest.run_id)
        _, full_seconds = _run(corpus, root / "clean")
        reference = reference_rows(str(root / "clean"))
        shutil.copytree(history, root / "undamaged")
        _, rerun_seconds = _run(corpus, root / "undamaged", *overrides)
        print(
            f"corpus {arguments.corpus}{' + hostile' if arguments.hostile else ''}: "
            f"{len(reference['documents'])} documents, {len(reference['chunks'])} chunks, {len(reference['errors'])} error rows"
        )
        print(f"undamaged rerun {rerun_seconds:.2f} s, full run into a fresh output {full_seconds:.2f} s\n")
        width = max(len(name) for name in DAMAGES)
        print(f"{'damage':<{width}}  {'seconds':>7}  outcome")
        wrong = 0
        for name, damage in DAMAGES.items():
            if arguments.only not in name:
                continue
            output = root / "case" / "output"
            shutil.rmtree(output.parent, ignore_errors=True)
            output.parent.mkdir(parents=True)
            shutil.copytree(history, output)
            damage.apply(output, snapshots)
            root_before = (output / "_manifest.json").read_bytes() if (output / "_manifest.json").exists() else None
            started = time.perf_counter()
            try:
                run_pipeline(load_run_config(None, overrides, environ={}, inputs=[str(corpus)], output=str(output)))
            except Exception as error:
                seconds = time.perf_counter() - started
                after = (output / "_manifest.json").read_bytes() if (output / "_manifest.json").exists() else None
                if after == root_before:
                    outcome = f"refused: {_one_line(error)}"
                else:
                    outcome = f"WRONG: failed and changed the root manifest ({_one_line(error)})"
            else:
                seconds = time.perf_counter() - started
                try:
                    outcome = "ok: " + check_rerun(str(output), reference, snapshots, damage)
                except Exception as error:  # an AssertionError, or a published dataset that cannot be read
                    outcome = f"WRONG: {_one_line(error)}"
            wrong += outcome.startswith("WRONG")
            print(f"{name:<{width}}  {seconds:>7.2f}  {outcome}", flush=True)
        print(f"\n{wrong} wrong outcome(s)")
    return 1 if wrong else 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    os._exit(status)  # as `chunkline run` does: pyarrow's threads can abort a normal interpreter exit
