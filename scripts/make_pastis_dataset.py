"""Write synthetic S1/S2 patches as a small PASTIS-R-format dataset.

Usage::

    python scripts/make_pastis_dataset.py /tmp/pastis_synth --preset tiny
    python train.py data=pastis_synthetic data.root=/tmp/pastis_synth

Writes ``DATA_S2/``, ``DATA_S1A/``, ``DATA_S1D/``, ``ANNOTATIONS/`` and
``metadata.geojson``; see :mod:`mtan_s1s2.data.pastis.writer` for what the format keeps.
"""

from __future__ import annotations

from mtan_s1s2.data.pastis.writer import main

if __name__ == "__main__":
    main()
