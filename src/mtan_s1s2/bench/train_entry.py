"""``python -m mtan_s1s2.bench.train_entry [overrides]``: ``train.py`` as a module.

The epoch-throughput benchmark starts every timed training run in a fresh interpreter
through this entry, so it works from an installed package as well as from a checkout.
"""

from mtan_s1s2.cli.train import main

if __name__ == "__main__":
    main()
