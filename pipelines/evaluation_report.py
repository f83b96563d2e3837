"""``chunkline evaluate ... --report FILE``: a one-file HTML page of an evaluation's figures.

The same style as the dataset report (:mod:`chunkline.pipelines.report`): the charts are PNGs drawn by
matplotlib's Agg renderer and embedded as ``data:`` URIs, the styles are inline, nothing is fetched when the
page is opened, and the numbers are embedded as JSON in ``<script type="application/json" id="report-data">``.
Two charts, recall and IoU, with one group of bars per config and one bar per retriever; then every figure
in a table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from chunkline.pipelines.report import _STYLE, _e, _image, _new_axes, _number, _short, html_page, require_matplotlib

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["render_evaluation_report", "metric_figure"]

#: One colour per retriever, in the order they are drawn.
_RETRIEVER_COLORS = {"embedding": "#3b6ea5", "bm25": "#d08c2f", "hybrid": "#4f9a6b"}
_OTHER_COLOR = "#6b7b8c"

_COLUMNS = (
    ("config", "config", None),
    ("retriever", "retriever", None),
    ("recall_percent", "recall %", "{:.1f}"),
    ("precision_percent", "precision %", "{:.2f}"),
    ("iou_percent", "IoU %", "{:.2f}"),
    ("hit_rate_percent", "hit rate %", "{:.1f}"),
    ("chunks", "chunks", "{:,}"),
    ("mean_chunk_tokens", "mean chunk tokens", "{:.1f}"),
    ("median_chunk_tokens", "median chunk tokens", "{:.1f}"),
    ("retrieved_tokens_per_question", "retrieved tokens / question", "{:.1f}"),
    ("retrieved_chunks_per_question", "retrieved chunks / question", "{:.2f}"),
)


def metric_figure(results: Sequence[dict[str, Any]], key: str, title: str) -> Figure:
    """Grouped bars of ``key`` (a ``*_percent`` figure): one group per config, one bar per retriever."""
    configs = list(dict.fromkeys(row["config"] for row in results))
    retrievers = list(dict.fromkeys(row["retriever"] for row in results))
    values = {(row["config"], row["retriever"]): row[key] for row in results}
    width = max(5.6, 1.2 + 0.9 * len(configs) * max(len(retrievers), 1) * 0.6)
    figure, axes = _new_axes(title, (width, 3.2))
    bar_width = 0.8 / max(len(retrievers), 1)
    for number, retriever in enumerate(retrievers):
        positions = [index + (number - (len(retrievers) - 1) / 2) * bar_width for index in range(len(configs))]
        heights = [values.get((config, retriever), 0.0) for config in configs]
        bars = axes.bar(
            positions,
            heights,
            width=bar_width * 0.92,
            label=retriever,
            color=_RETRIEVER_COLORS.get(retriever, _OTHER_COLOR),
        )
        axes.bar_label(
            bars,
            labels=[f"{height:.1f}" if height >= 10 else f"{height:.2f}" for height in heights],
            fontsize=8,
            padding=2,
        )
    axes.set_xticks(list(range(len(configs))), [_short(config, 24) for config in configs])
    axes.set_ylabel("% (mean over questions)")
    top = max([0.0, *values.values()])
    axes.set_ylim(0, max(5.0, top * 1.28))
    if len(retrievers) > 1:
        axes.legend(frameon=False, fontsize=9, loc="upper right", ncols=len(retrievers))
    return figure


def _table_html(results: Sequence[dict[str, Any]]) -> str:
    head = "".join(f"<th>{_e(label)}</th>" for _, label, _ in _COLUMNS)
    rows = []
    for row in results:
        cells = []
        for key, _, pattern in _COLUMNS:
            value = row[key]
            if pattern is None:
                cells.append(f'<td class="mono">{_e(value)}</td>')
            else:
                cells.append(f'<td class="num">{_e(pattern.format(value))}</td>')
        rows.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table id="results-table"><tr>{head}</tr>{"".join(rows)}</table>'


def _configs_html(configs: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, config in configs.items():
        params = config.get(config.get("strategy"), {}) or {}
        detail = ", ".join(f"{key}={value}" for key, value in params.items())
        rows.append(
            f'<tr><td class="mono">{_e(name)}</td><td>{_e(config.get("strategy"))}</td>'
            f'<td class="num">{_number(config.get("max_tokens"))}</td>'
            f'<td class="num">{_number(config.get("overlap_tokens"))}</td><td>{_e(config.get("tokenizer"))}</td>'
            f'<td class="mono">{_e(detail)}</td></tr>'
        )
    return (
        '<table id="configs-table"><tr><th>config</th><th>strategy</th><th>max_tokens</th><th>overlap_tokens</th>'
        f"<th>tokenizer</th><th>strategy parameters</th></tr>{''.join(rows)}</table>"
    )


def render_evaluation_report(data: dict[str, Any], title: str = "chunkline evaluation") -> str:
    """The HTML page for an evaluation's figures (``EvaluationResult.to_dict()``)."""
    results = data["results"]
    matplotlib = require_matplotlib()
    with matplotlib.style.context("default"), matplotlib.rc_context(_STYLE):
        recall_image = _image(metric_figure(results, "recall_percent", "Recall"), "Recall by config and retriever")
        iou_image = _image(metric_figure(results, "iou_percent", "IoU"), "IoU by config and retriever")
    cards = [
        (_number(data["questions"]), "questions"),
        (_number(data["documents"]), "documents"),
        (_number(len(data["configs"])), "configs"),
        (_number(data["budget_tokens"]), f"retrieved tokens per question ({data['budget_tokenizer']})"),
    ]
    card_html = "".join(f'<div class="card"><b>{value}</b><span>{_e(label)}</span></div>' for value, label in cards)
    embedder = data.get("embedder") or "not used"
    body = f"""<h1>{_e(title)}</h1>
<p class="url">embedder: {_e(embedder)}; lexical baseline: BM25 (bm25s)</p>
<section id="summary">
<h2>Summary</h2>
<div class="cards">{card_html}</div>
</section>
<section id="charts">
<h2>Retrieval</h2>
<div class="grid">
<figure id="recall">
{recall_image}
<figcaption>Recall: the share of each question's reference characters inside the chunks retrieved for it,
within the same token budget for every config.</figcaption>
</figure>
<figure id="iou">
{iou_image}
<figcaption>IoU: reference characters retrieved over the characters retrieved plus the reference characters
missed; it rewards chunks that hold the answer and little else.</figcaption>
</figure>
</div>
</section>
<section id="results">
<h2>Figures</h2>
{_table_html(results)}
</section>
<section id="configs">
<h2>Configs</h2>
{_configs_html(data["configs"])}
</section>
"""
    return html_page(title, body, data)
