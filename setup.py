"""Build step: ship the top-level ``configs/`` folder inside the package as ``mtan_s1s2/configs``.

The metadata lives in ``pyproject.toml``. ``configs/`` stays at the top of the repository
(it is what users read and edit); an installed wheel carries a copy, which
:mod:`mtan_s1s2.cli.config` finds when there is no checkout around it.
"""

from setuptools import find_namespace_packages, find_packages, setup

CONFIG_PACKAGES = ["mtan_s1s2.configs", *(f"mtan_s1s2.configs.{p}" for p in find_namespace_packages("configs"))]

setup(
    packages=[*find_packages("src"), *CONFIG_PACKAGES],
    package_dir={"": "src", "mtan_s1s2.configs": "configs"},
    package_data={"mtan_s1s2": ["py.typed"], **{p: ["*.yaml"] for p in CONFIG_PACKAGES}},
)
