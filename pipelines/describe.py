"""``chunkline inspect``: a text summary of a published dataset, read through its manifest.

The snapshot shown (the latest, or a kept one with ``snapshot``) is verified whole first: a part missing,
truncated or changed, or a row count that does not match, is one :class:`DamagedDatasetError` line.
"""

from __future__ import annotations

from typing import Any

import pyarrow.compute as pc

from chunkline.dataset.publish import DamagedDatasetError, list_snapshots, read_dataset, read_manifest, verify_snapshot
from chunkline.schemas import TABLE_SCHEMAS

__all__ = ["describe_dataset", "read_to_compare_text", "token_histogram"]

_HISTOGRAM_BINS = 10
_BAR_WIDTH = 40


def token_histogram(token_counts: list[int], bins: int = _HISTOGRAM_BINS) -> list[tuple[int, int, int]]:
    """(low, high, count) bins of equal width covering ``token_counts``; high is inclusive."""
    if not token_counts:
        return []
    low, high = min(token_counts), max(token_counts)
    width = max(1, -(-(high - low + 1) // bins))
    counts = [0] * bins
    for value in token_counts:
        counts[min((value - low) // width, bins - 1)] += 1
    return [(low + number * width, low + (number + 1) * width - 1, count) for number, count in enumerate(counts)]


def _table_order(table: str) -> tuple[int, str]:
    names = list(TABLE_SCHEMAS)
    return (names.index(table) if table in names else len(names), table)


def _describe_rebuild(manifest: dict[str, Any]) -> list[str]:
    """How the snapshot was built and what changed since the previous one."""
    rebuild = manifest.get("rebuild") or {}
    changes = manifest.get("changes")
    lines = []
    if rebuild.get("mode") == "incremental":
        lines.append(
            f"rebuild: incremental from snapshot {rebuild.get('previous_snapshot')}: "
            f"{rebuild.get('documents_chunked')} documents chunked, {rebuild.get('documents_carried_over')} carried over"
            + read_to_compare_text(rebuild)
        )
    elif rebuild:
        lines.append(f"rebuild: full ({rebuild.get('reason', 'no reason recorded')})")
    if changes:
        lines.append(
            "changes: "
            + ", ".join(f"{changes.get(kind, 0)} {kind}" for kind in ("added", "changed", "deleted", "unchanged"))
            + f"; {changes.get('chunks_upserted', 0):,} chunk upserts, {changes.get('chunks_deleted', 0):,} chunk deletes"
            + " (in changes/)"
        )
    return lines


def _describe_snapshots(url: str, manifest: dict[str, Any], storage_options: dict[str, Any] | None) -> list[str]:
    try:
        snapshots = list_snapshots(url, storage_options)
    except DamagedDatasetError:
        return ["snapshots kept: unknown (the root manifest is damaged)"]
    if not snapshots:
        return []
    marks = {snapshots[-1]: "latest"}
    if manifest.get("snapshot") != snapshots[-1]:
        marks[manifest.get("snapshot")] = "shown"
    marked = [f"{name} ({marks[name]})" if name in marks else name for name in snapshots]
    return [f"snapshots kept: {', '.join(marked)}"]


def _describe_sections(sections: Any) -> list[str]:
    """How many sections there are, at which heading levels, and how many fit ``max_tokens`` to embed."""
    if not sections.num_rows:
        return []
    documents = len(pc.unique(sections.column("doc_id")))
    levels = pc.value_counts(sections.column("level")).to_pylist()
    by_level = ", ".join(
        f"{'root' if item['values'] == 0 else 'h' + str(item['values'])} {item['counts']:,}"
        for item in sorted(levels, key=lambda item: item["values"])
    )
    embeddable = sections.num_rows - sections.column("embed_token_count").null_count
    return [
        "",
        f"sections: {sections.num_rows:,} ({by_level}), {sections.num_rows / documents:.1f} per document; "
        f"{embeddable:,} fit max_tokens with their context (embed_text)",
    ]


def describe_dataset(
    url: str, *, error_rows: int = 10, storage_options: dict[str, Any] | None = None, snapshot: str | None = None
) -> str:
    """A readable summary of the latest snapshot (or the kept ``snapshot``): run, config, tables, documents
    by status, token histogram and errors. Raises :class:`DamagedDatasetError` if that snapshot does not
    verify."""
    manifest = read_manifest(url, storage_options, snapshot=snapshot)
    verify_snapshot(url, manifest, storage_options)
    requested, snapshot = snapshot, manifest["snapshot"]

    def read(table: str, columns: list[str] | None = None):
        return read_dataset(url, table, columns=columns, storage_options=storage_options, snapshot=snapshot)

    chunks = read("chunks", ["doc_id", "token_count"])
    documents = read("documents", ["doc_id", "status", "size_bytes"])
    errors = read("errors")
    chunking = manifest.get("config", {}).get("chunking", {})
    lines = [
        f"dataset {url}" + (f", snapshot {snapshot}" if requested else ""),
        f"  run {manifest['run_id']}, published {manifest.get('published_at', '?')}, schema version {manifest['schema_version']}",
        f"  strategy {chunking.get('strategy', '?')}, max_tokens {chunking.get('max_tokens', '?')}, "
        f"overlap_tokens {chunking.get('overlap_tokens', '?')}, tokenizer {chunking.get('tokenizer', '?')}",
        "",
        "tables:",
    ]
    for table, entry in sorted(manifest["tables"].items(), key=lambda item: _table_order(item[0])):
        lines.append(f"  {table:<23} {entry['rows']:>10,} rows in {len(entry['files'])} file(s)")
    lines += ["", *_describe_rebuild(manifest), *_describe_snapshots(url, manifest, storage_options)]
    statuses = documents.column("status").to_pylist()
    lines += [
        "",
        "documents: " + ", ".join(f"{statuses.count(status)} {status}" for status in ("ok", "error", "skipped")),
    ]
    token_counts = chunks.column("token_count").to_pylist()
    if token_counts:
        per_document = pc.value_counts(chunks.column("doc_id")).field("counts").to_pylist()
        lines += [
            f"chunks: {len(token_counts):,}, tokens {sum(token_counts):,} "
            f"(min {min(token_counts)}, median {sorted(token_counts)[len(token_counts) // 2]}, max {max(token_counts)}), "
            f"{len(token_counts) / max(len(per_document), 1):.1f} per document on average",
            "",
            "tokens per chunk:",
        ]
        histogram = token_histogram(token_counts)
        largest = max(count for _, _, count in histogram)
        for low, high, count in histogram:
            bar = "#" * round(_BAR_WIDTH * count / largest) if largest else ""
            lines.append(f"  {low:>6}-{high:<6} {count:>8,} {bar}")
    if "sections" in manifest["tables"]:
        lines += _describe_sections(read("sections", ["doc_id", "level", "embed_token_count"]))
    if errors.num_rows:
        lines += ["", f"errors: {errors.num_rows}"]
        for row in errors.slice(0, error_rows).to_pylist():
            lines.append(f"  {row['doc_id']} [{row['stage']}/{row['error_type']}] {row['message']}")
        if errors.num_rows > error_rows:
            lines.append(f"  ... {errors.num_rows - error_rows} more (chunkline inspect --errors N)")
    else:
        lines += ["", "errors: none"]
    return "\n".join(lines)


def read_to_compare_text(rebuild: dict) -> str:
    """How many files the plan read to decide what changed (a manifest from before it was counted: nothing)."""
    read = rebuild.get("documentsread_to_compare_text")
    return "" if read is None else f", {read} files read to compare"
