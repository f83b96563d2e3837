"""``chunkline inspect URL --html FILE``: a one-file HTML report of a published dataset.

The report holds the summary ``chunkline inspect`` prints, four charts (tokens per chunk, chunks per
document, heading depth, the largest documents), the largest documents as a table and the error rows. It is
self-contained: the charts are PNG images drawn by matplotlib's Agg renderer and embedded as base64
``data:`` URIs, the styles are inline, and nothing is fetched when it is opened. The numbers behind every
chart are embedded too, as JSON in ``<script type="application/json" id="report-data">``.

The numbers come from plain functions (:func:`token_histogram_bins`, :func:`chunks_per_document`,
:func:`heading_depth_counts`, :func:`largest_documents`, :func:`collect_report_data`) that a notebook or a
test can call on their own. The same dataset gives the same HTML, byte for byte: figure size, resolution and
style are fixed and the PNGs carry no software or time stamp.

matplotlib comes with the ``report`` extra; without it, drawing a report raises
:class:`ReportExtraMissingError`, whose message is the pip command.
"""

from __future__ import annotations

import base64
import html
import io
import json
import warnings
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow.compute as pc

from chunkline.dataset.publish import read_dataset, read_manifest
from chunkline.pipelines.describe import token_histogram

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "REPORT_EXTRA_COMMAND",
    "ReportExtraMissingError",
    "require_matplotlib",
    "build_html_report",
    "write_html_report",
    "save_html",
    "collect_report_data",
    "render_html_report",
    "html_page",
    "token_histogram_bins",
    "chunks_per_document",
    "heading_depth_counts",
    "largest_documents",
    "figure_png",
]

REPORT_EXTRA_COMMAND = "pip install 'chunkline[report]'"


class ReportExtraMissingError(ImportError):
    """matplotlib, the package of the ``report`` extra, is not installed."""


def require_matplotlib() -> ModuleType:
    """The ``matplotlib`` module with what the reports draw with (the Agg canvas, ``Figure``, styles) loaded,
    or :class:`ReportExtraMissingError` naming the extra to install."""
    try:
        import matplotlib
        import matplotlib.backends.backend_agg
        import matplotlib.figure
        import matplotlib.style
    except ImportError as error:
        raise ReportExtraMissingError(f"the HTML report needs matplotlib ({error}): {REPORT_EXTRA_COMMAND}") from None
    return matplotlib


#: Every chart's size in inches and resolution: fixed, so the same numbers always give the same pixels.
FIGURE_SIZE = (5.6, 3.0)
FIGURE_DPI = 100
LARGEST_DOCUMENTS = 10
MAX_ERROR_ROWS = 1000
HISTOGRAM_BINS = 10

_BAR_COLOR = "#3b6ea5"
_ERROR_COLOR = "#b03a2e"
_STYLE = {
    # A doc_id such as "notes/$\LaTeX$ tips.md" must be drawn as written, not parsed as TeX (which can fail).
    "text.parse_math": False,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "font.size": 10,
}


# --------------------------------------------------------------------------------------------------
# The numbers
# --------------------------------------------------------------------------------------------------


def token_histogram_bins(token_counts: Sequence[int], bins: int = HISTOGRAM_BINS) -> dict[str, list[int]]:
    """Equal-width integer bins of ``token_counts``, the same bins ``chunkline inspect`` prints.

    Returns ``{"edges": [...], "counts": [...]}``: bin ``i`` holds the values ``v`` with
    ``edges[i] <= v < edges[i + 1]``, so ``len(edges) == len(counts) + 1`` and the counts sum to
    ``len(token_counts)``. Both lists are empty when there are no values."""
    histogram = token_histogram(list(token_counts), bins)
    if not histogram:
        return {"edges": [], "counts": []}
    return {
        "edges": [low for low, _, _ in histogram] + [histogram[-1][1] + 1],
        "counts": [count for _, _, count in histogram],
    }


def chunks_per_document(doc_ids: Iterable[str]) -> dict[str, list[int]]:
    """How many documents have how many chunks, from the ``doc_id`` of every chunk.

    Returns ``{"chunks": [k, ...], "documents": [n, ...]}`` with ``k`` ascending: ``n`` documents have
    exactly ``k`` chunks each, so ``sum(k * n)`` is the number of chunks."""
    distribution = Counter(Counter(doc_ids).values())
    chunks = sorted(distribution)
    return {"chunks": chunks, "documents": [distribution[k] for k in chunks]}


def heading_depth_counts(depths: Iterable[int]) -> dict[str, list[int]]:
    """Chunks by the depth of their heading path (``len(heading_path)``; 0: text before any heading).

    Returns ``{"depths": [0, 1, ..., deepest], "counts": [...]}``, with a zero for a depth no chunk has."""
    counts = Counter(depths)
    deepest = max(counts, default=-1)
    return {"depths": list(range(deepest + 1)), "counts": [counts[depth] for depth in range(deepest + 1)]}


def largest_documents(documents: Sequence[dict[str, Any]], limit: int = LARGEST_DOCUMENTS) -> list[dict[str, Any]]:
    """The ``limit`` documents with the most tokens (then the most bytes, then by ``doc_id``).

    ``documents`` are rows of the ``documents`` table; the rows returned keep ``doc_id``, ``title``,
    ``status``, ``token_count``, ``chunk_count`` and ``size_bytes``."""
    keys = ("doc_id", "title", "status", "token_count", "chunk_count", "size_bytes")
    ranked = sorted(documents, key=lambda row: (-(row["token_count"] or 0), -(row["size_bytes"] or 0), row["doc_id"]))
    return [{key: row.get(key) for key in keys} for row in ranked[:limit]]


def collect_report_data(
    url: str,
    *,
    storage_options: dict[str, Any] | None = None,
    largest: int = LARGEST_DOCUMENTS,
    max_error_rows: int = MAX_ERROR_ROWS,
) -> dict[str, Any]:
    """Every number of the report of the dataset at ``url``, as plain JSON-ready data.

    Keys: ``url``, ``summary`` (what ``chunkline inspect`` prints), ``token_histogram``,
    ``chunks_per_document``, ``heading_depth``, ``largest_documents``, ``errors`` (up to
    ``max_error_rows`` rows) and ``error_count``."""
    manifest = read_manifest(url, storage_options)
    chunks = read_dataset(
        url, "chunks", columns=["doc_id", "token_count", "heading_path"], storage_options=storage_options
    )
    documents = read_dataset(
        url,
        "documents",
        columns=["doc_id", "title", "status", "token_count", "chunk_count", "size_bytes"],
        storage_options=storage_options,
    )
    errors = read_dataset(url, "errors", storage_options=storage_options)

    token_counts = chunks.column("token_count").to_pylist()
    doc_ids = chunks.column("doc_id").to_pylist()
    depths = pc.fill_null(pc.list_value_length(chunks.column("heading_path")), 0).to_pylist()
    document_rows = documents.to_pylist()
    statuses = Counter(row["status"] for row in document_rows)
    chunking = manifest.get("config", {}).get("chunking", {})
    chunk_documents = len(set(doc_ids))
    summary = {
        "run_id": manifest.get("run_id"),
        "published_at": manifest.get("published_at"),
        "schema_version": manifest.get("schema_version"),
        "strategy": chunking.get("strategy"),
        "max_tokens": chunking.get("max_tokens"),
        "overlap_tokens": chunking.get("overlap_tokens"),
        "tokenizer": chunking.get("tokenizer"),
        "tables": {
            table: {"rows": entry["rows"], "files": len(entry["files"])}
            for table, entry in manifest.get("tables", {}).items()
        },
        "documents": {status: statuses.get(status, 0) for status in ("ok", "error", "skipped")},
        "chunks": len(token_counts),
        "tokens": sum(token_counts),
        "min_tokens": min(token_counts, default=None),
        # The same median as ``chunkline inspect``: the middle value, the upper one of an even count.
        "median_tokens": sorted(token_counts)[len(token_counts) // 2] if token_counts else None,
        "max_tokens_found": max(token_counts, default=None),
        "chunks_per_document_mean": round(len(token_counts) / chunk_documents, 2) if chunk_documents else None,
    }
    error_rows = [
        {key: row.get(key) for key in ("doc_id", "stage", "error_type", "message", "source_uri")}
        for row in errors.slice(0, max_error_rows).to_pylist()
    ]
    return {
        "url": url,
        "summary": summary,
        "token_histogram": token_histogram_bins(token_counts),
        "chunks_per_document": chunks_per_document(doc_ids),
        "heading_depth": heading_depth_counts(depths),
        "largest_documents": largest_documents(document_rows, largest),
        "errors": error_rows,
        "error_count": errors.num_rows,
    }


# --------------------------------------------------------------------------------------------------
# The charts
# --------------------------------------------------------------------------------------------------


def figure_png(figure: Figure) -> bytes:
    """``figure`` as PNG bytes, drawn by Agg, with no metadata that changes from one run to the next."""
    require_matplotlib().backends.backend_agg.FigureCanvasAgg(figure)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        # A doc_id in a script the bundled font lacks is drawn with boxes: not worth a warning per glyph.
        warnings.filterwarnings("ignore", message="Glyph .* missing from font", category=UserWarning)
        figure.savefig(buffer, format="png", dpi=FIGURE_DPI, metadata={"Software": None})
    return buffer.getvalue()


def _new_axes(title: str, size: tuple[float, float] = FIGURE_SIZE):
    figure = require_matplotlib().figure.Figure(figsize=size, dpi=FIGURE_DPI, layout="constrained")
    axes = figure.subplots()
    # A figure title, not an axes title: long tick labels push the axes right, the title stays at the left.
    figure.suptitle(title, x=0.01, ha="left", fontsize=12, fontweight="bold")
    return figure, axes


def _nothing_to_show(axes, message: str) -> None:
    axes.text(0.5, 0.5, message, ha="center", va="center", transform=axes.transAxes, color="#666666")
    axes.set_xticks([])
    axes.set_yticks([])


def token_histogram_figure(histogram: dict[str, list[int]], max_tokens: int | None = None) -> Figure:
    figure, axes = _new_axes("Tokens per chunk")
    if not histogram["counts"]:
        _nothing_to_show(axes, "no chunks")
        return figure
    axes.stairs(histogram["counts"], histogram["edges"], fill=True, color=_BAR_COLOR, edgecolor="white")
    if max_tokens:
        axes.axvline(max_tokens + 0.5, color=_ERROR_COLOR, linestyle="--", linewidth=1)
        axes.annotate(
            f"max_tokens {max_tokens}",
            (max_tokens + 0.5, 1),
            xycoords=("data", "axes fraction"),
            ha="right",
            va="top",
            color=_ERROR_COLOR,
            fontsize=9,
            xytext=(-4, -2),
            textcoords="offset points",
        )
    axes.set_xlabel("tokens in a chunk")
    axes.set_ylabel("chunks")
    return figure


def chunks_per_document_figure(distribution: dict[str, list[int]]) -> Figure:
    figure, axes = _new_axes("Chunks per document")
    if not distribution["chunks"]:
        _nothing_to_show(axes, "no chunks")
        return figure
    values = [k for k, n in zip(distribution["chunks"], distribution["documents"]) for _ in range(n)]
    histogram = token_histogram_bins(values, min(HISTOGRAM_BINS, max(values) - min(values) + 1))
    axes.stairs(histogram["counts"], histogram["edges"], fill=True, color=_BAR_COLOR, edgecolor="white")
    axes.set_xlabel("chunks in a document")
    axes.set_ylabel("documents")
    axes.yaxis.get_major_locator().set_params(integer=True)
    return figure


def heading_depth_figure(depths: dict[str, list[int]]) -> Figure:
    figure, axes = _new_axes("Heading depth of chunks")
    if not depths["depths"]:
        _nothing_to_show(axes, "no chunks")
        return figure
    axes.bar(depths["depths"], depths["counts"], color=_BAR_COLOR, width=0.7)
    axes.set_xticks(depths["depths"], [str(depth) if depth else "0\n(no heading)" for depth in depths["depths"]])
    axes.set_xlabel("len(heading_path)")
    axes.set_ylabel("chunks")
    return figure


def _short(label: str, width: int = 36) -> str:
    # The end of a path names the document; keep it when the label is too long.
    return label if len(label) <= width else "…" + label[-(width - 1) :]


def largest_documents_figure(rows: Sequence[dict[str, Any]]) -> Figure:
    height = max(FIGURE_SIZE[1], 0.8 + 0.24 * len(rows))
    figure, axes = _new_axes(f"Largest documents by tokens (top {len(rows)})", (FIGURE_SIZE[0], height))
    if not rows:
        _nothing_to_show(axes, "no documents")
        return figure
    labels = [_short(row["doc_id"]) for row in rows]
    positions = list(range(len(rows)))
    axes.barh(positions, [row["token_count"] or 0 for row in rows], color=_BAR_COLOR, height=0.7)
    axes.set_yticks(positions, labels)
    axes.invert_yaxis()
    axes.set_xlabel("tokens")
    return figure


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 2rem auto;
       max-width: 74rem; padding: 0 1rem; color: #1d2733; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #d5dbe3; padding-bottom: 0.2rem; }
.url { font-family: ui-monospace, "DejaVu Sans Mono", monospace; color: #4a5868; margin-top: 0; word-break: break-all; }
table { border-collapse: collapse; margin: 0.6rem 0; font-size: 0.92rem; }
th, td { border: 1px solid #d5dbe3; padding: 0.25rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #eef2f7; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 0.8rem; margin: 1rem 0; }
.card { border: 1px solid #d5dbe3; border-radius: 6px; padding: 0.5rem 0.9rem; flex: 1 1 6rem; }
.card b { display: block; font-size: 1.35rem; }
.card span { color: #4a5868; font-size: 0.85rem; }
.card.bad b { color: #b03a2e; }
img { max-width: 100%; height: auto; display: block; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(30rem, 1fr)); gap: 1.2rem 1.6rem; }
figure { margin: 0; }
figcaption { color: #4a5868; font-size: 0.88rem; margin-top: 0.3rem; }
.side-by-side { display: flex; flex-wrap: wrap; gap: 0 1.6rem; align-items: flex-start; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.88rem; }
.none { color: #4a5868; }
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _number(value: Any) -> str:
    return "–" if value is None else f"{value:,}"


def _image(figure: Figure, alt: str) -> str:
    data = base64.b64encode(figure_png(figure)).decode("ascii")
    width, height = (round(side * FIGURE_DPI) for side in figure.get_size_inches())
    return f'<img src="data:image/png;base64,{data}" width="{width}" height="{height}" alt="{_e(alt)}">'


def _summary_html(summary: dict[str, Any], error_count: int) -> str:
    documents = summary["documents"]
    cards = [
        (_number(sum(documents.values())), "documents"),
        (_number(documents["ok"]), "ok"),
        (_number(documents["error"]), "error"),
        (_number(documents["skipped"]), "skipped"),
        (_number(summary["chunks"]), "chunks"),
        (_number(summary["tokens"]), "tokens"),
        (_number(error_count), "error rows"),
    ]
    card_html = "".join(
        f'<div class="card{" bad" if label in ("error", "error rows") and value != "0" else ""}">'
        f"<b>{value}</b><span>{label}</span></div>"
        for value, label in cards
    )
    run = [
        ("run", summary["run_id"]),
        ("published", summary["published_at"]),
        ("schema version", summary["schema_version"]),
        ("strategy", summary["strategy"]),
        ("max_tokens", summary["max_tokens"]),
        ("overlap_tokens", summary["overlap_tokens"]),
        ("tokenizer", summary["tokenizer"]),
        (
            "tokens per chunk",
            f"min {_number(summary['min_tokens'])}, median {_number(summary['median_tokens'])}, "
            f"max {_number(summary['max_tokens_found'])}",
        ),
        ("chunks per document (mean)", summary["chunks_per_document_mean"]),
    ]
    run_rows = "".join(f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>" for label, value in run)
    table_rows = "".join(
        f'<tr><td class="mono">{_e(table)}</td><td class="num">{_number(entry["rows"])}</td>'
        f'<td class="num">{_number(entry["files"])}</td></tr>'
        for table, entry in summary["tables"].items()
    )
    return (
        f'<div class="cards">{card_html}</div>'
        f'<div class="side-by-side"><table>{run_rows}</table>'
        f"<table><tr><th>table</th><th>rows</th><th>files</th></tr>{table_rows}</table></div>"
    )


def _largest_html(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return '<p class="none">No documents.</p>'
    body = "".join(
        f'<tr><td class="num">{number}</td><td class="mono">{_e(row["doc_id"])}</td><td>{_e(row["title"])}</td>'
        f'<td>{_e(row["status"])}</td><td class="num">{_number(row["token_count"])}</td>'
        f'<td class="num">{_number(row["chunk_count"])}</td><td class="num">{_number(row["size_bytes"])}</td></tr>'
        for number, row in enumerate(rows, 1)
    )
    return (
        '<table id="largest-documents-table"><tr><th>#</th><th>doc_id</th><th>title</th><th>status</th>'
        f"<th>tokens</th><th>chunks</th><th>bytes</th></tr>{body}</table>"
    )


def _errors_html(rows: Sequence[dict[str, Any]], total: int) -> str:
    if not total:
        return '<p class="none">No error rows: every document was read and chunked.</p>'
    body = "".join(
        f'<tr><td class="mono">{_e(row["doc_id"])}</td><td>{_e(row["stage"])}</td>'
        f"<td>{_e(row['error_type'])}</td><td>{_e(row['message'])}</td></tr>"
        for row in rows
    )
    more = (
        f'<p class="none">… and {_number(total - len(rows))} more rows in the <code>errors</code> table.</p>'
        if total > len(rows)
        else ""
    )
    return (
        '<table id="errors-table"><tr><th>doc_id</th><th>stage</th><th>error_type</th><th>message</th></tr>'
        f"{body}</table>{more}"
    )


def html_page(title: str, body: str, data: Any) -> str:
    """A self-contained HTML page: ``title``, the inline styles, ``body``, and ``data`` as JSON in
    ``<script type="application/json" id="report-data">`` for whoever reads the page with a script."""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{_CSS}</style>
</head>
<body>
{body}<script type="application/json" id="report-data">{_json_for_script(data)}</script>
</body>
</html>
"""


def _json_for_script(data: Any) -> str:
    # Inside <script> a "</script>" in a doc_id would end the element: "<", ">" and "&" are written as
    # JSON escapes, which any JSON parser reads back as the same characters.
    text = json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html_report(data: dict[str, Any]) -> str:
    """The HTML page for the numbers of :func:`collect_report_data`."""
    summary = data["summary"]
    # Matplotlib's default style first, whatever the user's matplotlibrc says, so the images are reproducible.
    matplotlib = require_matplotlib()
    with matplotlib.style.context("default"), matplotlib.rc_context(_STYLE):
        tokens_image = _image(
            token_histogram_figure(data["token_histogram"], summary["max_tokens"]),
            "Histogram of the number of tokens per chunk",
        )
        per_document_image = _image(
            chunks_per_document_figure(data["chunks_per_document"]), "Histogram of the number of chunks per document"
        )
        depth_image = _image(heading_depth_figure(data["heading_depth"]), "Chunks by heading depth")
        largest_image = _image(largest_documents_figure(data["largest_documents"]), "The largest documents by tokens")
    title = f"chunkline dataset report: {data['url']}"
    body = f"""<h1>chunkline dataset</h1>
<p class="url">{_e(data["url"])}</p>
<section id="summary">
<h2>Summary</h2>
{_summary_html(summary, data["error_count"])}
</section>
<section id="charts">
<h2>Chunks</h2>
<div class="grid">
<figure id="tokens-per-chunk">
{tokens_image}
<figcaption>Tokens per chunk: mostly short chunks mean short sections; a pile-up at <code>max_tokens</code>
means long sections were sub-split.</figcaption>
</figure>
<figure id="chunks-per-document">
{per_document_image}
<figcaption>Chunks per document: how many documents were cut into how many chunks.</figcaption>
</figure>
<figure id="heading-depth">
{depth_image}
<figcaption>Heading depth: the number of headings in each chunk's <code>heading_path</code>; 0 is text
before the first heading, or a document without headings.</figcaption>
</figure>
<figure id="largest-documents-chart">
{largest_image}
<figcaption>The documents with the most tokens, listed below.</figcaption>
</figure>
</div>
</section>
<section id="largest-documents">
<h2>Largest documents</h2>
{_largest_html(data["largest_documents"])}
</section>
<section id="errors">
<h2>Errors ({_number(data["error_count"])})</h2>
{_errors_html(data["errors"], data["error_count"])}
</section>
"""
    return html_page(title, body, data)


def build_html_report(url: str, storage_options: dict[str, Any] | None = None) -> str:
    """The self-contained HTML report of the dataset published at ``url``."""
    return render_html_report(collect_report_data(url, storage_options=storage_options))


def write_html_report(url: str, path: str | Path, storage_options: dict[str, Any] | None = None) -> str:
    """Write the report of the dataset at ``url`` to ``path`` (a local path or an fsspec URL); returns the
    HTML written."""
    page = build_html_report(url, storage_options)
    save_html(page, path)
    return page


def save_html(page: str, path: str | Path) -> None:
    """Write ``page`` as UTF-8 to ``path`` (a local path or an fsspec URL)."""
    with fsspec.open(str(path), "wb") as handle:
        handle.write(page.encode("utf-8"))
