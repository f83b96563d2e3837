"""The dataset floor: everything about chunkline's output dataset and its inputs, with no Apache Beam.

Storage calls and their retries (:mod:`~chunkline.dataset.storage`), run settings
(:mod:`~chunkline.dataset.settings`), the input listing, matching and document ids
(:mod:`~chunkline.dataset.inputs`), decoding (:mod:`~chunkline.dataset.decoding`), the shard merge and
row diff (:mod:`~chunkline.dataset.merge`), the layout, manifest, verification and publishing
(:mod:`~chunkline.dataset.publish`), the output lock (:mod:`~chunkline.dataset.lock`) and rebuild
planning (:mod:`~chunkline.dataset.rebuild`). The Beam transforms call these; nothing here imports Beam.

The steps of a run are here too, as classes with a runner's lifecycle (:mod:`~chunkline.dataset.bundle`):
reading a matched file (:mod:`~chunkline.dataset.file_reader`), chunking a document into its rows
(:mod:`~chunkline.dataset.document_rows`), spilling rows and merging a shard (:mod:`~chunkline.dataset.sink`).
The Beam DoFns subclass them; a run in this process without Beam arguments (and a small incremental run)
calls them directly, without Beam (:mod:`~chunkline.dataset.in_process`).
"""

from chunkline.dataset.publish import dataset_files, list_snapshots, read_dataset, read_manifest, snapshots_after

__all__ = ["dataset_files", "list_snapshots", "read_dataset", "read_manifest", "snapshots_after"]
