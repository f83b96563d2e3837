"""A run's pipeline reads its listing in batches: lists of documents, ending at a count or at their bytes,
each read into one list of its files."""

from __future__ import annotations

from chunkline.dataset.inputs import match_input
from chunkline.dataset.listing import write_listing
from chunkline.dataset.settings import InputConfig
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.read import ListedLines, _ListedDocumentsFn, _ListedLinesFn, _ReadFileFn


def test_the_listing_is_read_in_batches_of_documents_and_bytes(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    sizes = {"big.md": 1_500_000, **{f"page{n}.md": 100 + n for n in range(7)}}
    for name, size in sizes.items():
        (corpus / name).write_bytes(b"# Page\n" + b"x" * (size - 7))
    config = InputConfig(paths=(str(corpus),))
    matched = [(source.doc_id, [source]) for source in match_input(str(corpus), 0, config)]
    listing_url = write_listing(str(tmp_path / "staging"), matched)

    batches = list(apply_in_process(_ListedDocumentsFn(None, (), batch_documents=3), [listing_url]))
    # Largest first: the 1.5 MB file is a batch of its own (over the batch's bytes), then threes.
    assert [[doc_id for doc_id, _ in batch] for batch in batches] == [
        ["big.md"],
        ["page6.md", "page5.md", "page4.md"],
        ["page3.md", "page2.md", "page1.md"],
        ["page0.md"],
    ]
    one_by_one = list(apply_in_process(_ListedDocumentsFn(None, ()), [listing_url]))
    assert [document for batch in batches for document in batch] == one_by_one

    read = list(apply_in_process(_ReadFileFn(config, ()), batches))
    assert [[source.doc_id for source in sources] for sources in read] == [
        [doc_id for doc_id, _ in batch] for batch in batches
    ]
    for sources in read:
        for source in sources:
            assert source.problem is None and len(source.data) == sizes[source.doc_id]


def test_a_batch_crosses_the_reshuffle_as_the_span_of_its_lines(tmp_path):
    corpus = tmp_path / "docs"
    corpus.mkdir()
    for number in range(10):
        (corpus / f"page{number}.md").write_bytes(b"# Page\n" + b"x" * (100 + number))
    config = InputConfig(paths=(str(corpus),))
    matched = [(source.doc_id, [source]) for source in match_input(str(corpus), 0, config)]
    listing_url = write_listing(str(tmp_path / "staging"), matched)
    listing_bytes = (tmp_path / "staging" / listing_url.rsplit("/staging/", 1)[1]).read_bytes()

    batches = list(apply_in_process(_ListedDocumentsFn(None, (), batch_documents=4), [listing_url]))
    spans = list(apply_in_process(_ListedDocumentsFn(None, (), batch_documents=4, batch_lines=True), [listing_url]))
    # A few numbers per batch: where its lines start in the staged file, and the last one's start plus one.
    assert all(isinstance(span, ListedLines) and span.listing_url == listing_url for span in spans)
    line_starts = [0] + [index + 1 for index, byte in enumerate(listing_bytes) if byte == 0x0A][:-1]
    assert [(span.start_byte, span.stop_byte) for span in spans] == [
        (line_starts[0], line_starts[3] + 1),
        (line_starts[4], line_starts[7] + 1),
        (line_starts[8], line_starts[9] + 1),
    ]
    assert list(apply_in_process(_ListedLinesFn(None, ()), spans)) == batches
    assert [[doc_id for doc_id, _ in batch] for batch in batches] == [
        ["page9.md", "page8.md", "page7.md", "page6.md"],
        ["page5.md", "page4.md", "page3.md", "page2.md"],
        ["page1.md", "page0.md"],
    ]
