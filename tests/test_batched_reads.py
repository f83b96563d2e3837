"""A run's pipeline reads its listing in batches: lists of documents, ending at a count or at their bytes,
each read into one list of its files."""

from __future__ import annotations

from chunkline.dataset.inputs import match_input
from chunkline.dataset.listing import write_listing
from chunkline.dataset.settings import InputConfig
from chunkline.transforms.in_process import apply_in_process
from chunkline.transforms.read import _ListedDocumentsFn, _ReadFileFn


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
