"""Train and test an mtan-style S1/S2 classifier: ``python train.py [mlp=conv] [...]``.

A thin shim over :func:`mtan_s1s2.cli.train.main` (configs in ``configs/``).
"""

from mtan_s1s2.cli.train import main

if __name__ == "__main__":
    main()
