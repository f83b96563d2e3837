"""The engine imports no Apache Beam: notebooks and workers can chunk without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_chunking_does_not_import_apache_beam():
    script = textwrap.dedent(
        """
        import sys
        import chunkline
        chunks = chunkline.chunk_markdown('# a')
        assert [c.text for c in chunks] == ['# a'], chunks
        chunkline.reconstruct(chunks)
        chunkline.parse_markdown('# a').blocks
        beam = sorted(name for name in sys.modules if name == 'apache_beam' or name.startswith('apache_beam.'))
        print('beam modules:', beam)
        assert not beam
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "beam modules: []" in result.stdout
