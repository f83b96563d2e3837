"""Rerun planning at scale: the driver's time and peak memory to plan a rerun over N listed documents.

For each N (``--sizes``, default 100,000 and 1,000,000), a fresh Python process builds a synthetic listing of
N documents (what :func:`chunkline.dataset.rebuild.list_inputs` hands the plan: a row per
document's :class:`~chunkline.dataset.inputs.SourceFile`, with its size, modification time and
``mtime_ns``, made from such values) and a synthetic previous ``documents`` table of the same N documents, all ``ok``, with the
same sizes and times (an unchanged corpus; ``--changed`` of them get a new ``mtime_ns`` and are hashed),
then plans the rerun with :func:`~chunkline.dataset.rebuild.plan_rebuild` and writes its shard plans.

Reported per N: the plan's wall time, the process's resident memory before planning (the interpreter,
the imports, the listing and the previous table: what the driver holds anyway), and its peak during the
plan (``VmHWM`` from ``/proc/self/status``, reset just before the plan through ``/proc/self/clear_refs``),
and that peak's growth over the memory before it, per million documents. The output the plan is made
against is a real one-document dataset (its manifest and errors table are read); no document is read.

Usage::

    python benchmarks/bench_rerun_plan.py [--sizes 100000 1000000] [--changed 0] [--runs 1] [--python-path DIR]

``--python-path DIR`` plans with another tree of the package (laid out as installed: ``DIR/chunkline`` with
its ``pipelines``, ``schemas`` and ``transforms`` inside), to compare with an earlier version side by side;
an earlier tree hashes every carried candidate (here: none can be read, so all are chunked).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

_PROBE = r"""
import json, sys, time
from datetime import datetime, timedelta, timezone
from pathlib import Path

def status(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)

size, changed, output, corpus = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
import dataclasses
import pyarrow as pa
from chunkline.dataset.inputs import SourceFile
try:
    from chunkline.dataset.arrow_columns import int64_array, string_array
except ImportError:  # a tree from before the metadata columns (--python-path)
    int64_array = string_array = pa.array
metadata = "mtime_ns" in {field.name for field in dataclasses.fields(SourceFile)}
from chunkline.dataset.layout import staging_url
from chunkline.dataset.publish import read_manifest
from chunkline.dataset.rebuild import InputListing, plan_rebuild, write_shard_plans
from chunkline.dataset.settings import load_run_config

config = load_run_config(None, [], environ={}, inputs=[corpus], output=output)
manifest = read_manifest(output)
epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
base_ns = 1_780_000_000_000_000_000
sources = []
doc_ids, uris, sizes, micros, nanos = [], [], [], [], []
for index in range(size):
    doc_id = f"section-{index % 1000:03d}/page-{index:07d}.md"
    uri = f"{corpus}/{doc_id}"
    size_bytes = 2_000 + index % 5_000
    mtime_ns = base_ns + index * 1_000_003
    listed_ns = mtime_ns + 1 if index < changed else mtime_ns
    sources.append(
        SourceFile(doc_id, uri, 0, uri, size_bytes, epoch + timedelta(microseconds=listed_ns // 1000),
                   **({"mtime_ns": listed_ns} if metadata else {}))
    )
    doc_ids.append(doc_id); uris.append(uri); sizes.append(size_bytes)
    micros.append(mtime_ns // 1000); nanos.append(mtime_ns)
previous = pa.table({
    "doc_id": string_array(doc_ids),
    "source_uri": string_array(uris),
    "status": string_array(["ok"] * size),
    "size_bytes": int64_array(sizes),
    "content_sha256": string_array(["0" * 64] * size),
    "modified_time": int64_array(micros).cast(pa.timestamp("us", tz="UTC")),
    "source_mtime_ns": int64_array(nanos),
    "source_etag": pa.nulls(size, pa.string()),
    "source_version": pa.nulls(size, pa.string()),
})
if hasattr(InputListing, "of"):  # the listing as Arrow rows
    listing = InputListing.of(sources)
else:  # a checkout whose listing is a dict of SourceFile lists
    listing = InputListing()
    for source in sources:
        listing.documents[source.doc_id] = [source]
del doc_ids, uris, sizes, micros, nanos, sources
before = status("VmRSS")
Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current resident size
started = time.perf_counter()
plan = plan_rebuild(config, manifest, previous, listing)
write_shard_plans(plan, config, staging_url(output, "bench-run"))
seconds = time.perf_counter() - started
peak = status("VmHWM")
print(json.dumps({
    "documents": size, "mode": plan.mode, "carried": len(plan.carried), "to_chunk": len(plan.to_chunk),
    "read_to_compare": getattr(plan, "documents_read_to_compare", "all"), "plan_seconds": seconds,
    "rss_before_bytes": before, "peak_bytes": peak,
}))
"""


def _one_document_output(folder: Path) -> tuple[str, str]:
    """(output URL, corpus folder) of a published one-document dataset."""
    from chunkline.dataset.settings import load_run_config
    from chunkline.pipelines.run import run_pipeline

    corpus = folder / "corpus"
    corpus.mkdir()
    (corpus / "index.md").write_text("# Index\n\nOne page.\n")
    output = folder / "dataset"
    run_pipeline(load_run_config(None, [], environ={}, inputs=[str(corpus)], output=str(output)))
    return str(output), str(corpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument(
        "--changed", type=int, default=0, help="documents whose mtime_ns moved (hashed; they fail to read)"
    )
    parser.add_argument("--runs", type=int, default=1, help="processes per size (medians reported)")
    parser.add_argument(
        "--python-path",
        help="plan with the chunkline package found in this folder instead (an older tree laid out as installed)",
    )
    arguments = parser.parse_args()
    environment = dict(os.environ)
    if arguments.python_path:
        environment["PYTHONPATH"] = arguments.python_path
    with tempfile.TemporaryDirectory() as folder:
        output, corpus = _one_document_output(Path(folder))
        print(
            f"{'documents':>10} {'plan s':>8} {'RSS before MB':>14} {'peak MB':>8} {'growth MB':>10} {'growth MB/M':>12}"
        )
        for size in arguments.sizes:
            results = []
            for _ in range(arguments.runs):
                completed = subprocess.run(
                    [sys.executable, "-c", _PROBE, str(size), str(arguments.changed), output, corpus],
                    capture_output=True,
                    text=True,
                    check=True,
                    env=environment,
                    cwd=folder,
                )
                results.append(json.loads(completed.stdout.strip().splitlines()[-1]))
            seconds = statistics.median(result["plan_seconds"] for result in results)
            before = statistics.median(result["rss_before_bytes"] for result in results) / 1e6
            peak = statistics.median(result["peak_bytes"] for result in results) / 1e6
            growth = peak - before
            print(
                f"{size:>10,} {seconds:>8.2f} {before:>14.0f} {peak:>8.0f} {growth:>10.0f} "
                f"{growth * 1_000_000 / size:>12.0f}   (mode {results[0]['mode']}, carried {results[0]['carried']:,}, "
                f"read to compare {results[0]['read_to_compare']})"
            )


if __name__ == "__main__":
    main()
