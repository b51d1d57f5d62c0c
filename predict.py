"""Per-pixel class maps of a split: ``python predict.py ckpt_path=... [data=...] [split=test]``.

A thin shim over :func:`mtan_s1s2.cli.predict.main` (configs in ``configs/``).
"""

from mtan_s1s2.cli.predict import main

if __name__ == "__main__":
    main()
