"""``python -m mtan_s1s2.data.geotiff OUT_DIR [--layout stack|files] [--no-georef] -- <data overrides>``.

Writes every scene of a data config (e.g. ``data=worldcereal data.scenes=[ID]``) as GeoTIFFs
(:func:`~mtan_s1s2.data.geotiff.writer.write_scene_geotiffs`) into ``OUT_DIR/<scene>/``, with
``geotiff_config.json`` (the ``data=geotiff`` entries that read them back) and
``predict_overrides.txt`` (the same as Hydra overrides, one per line)::

    python predict.py ckpt_path=... data=geotiff data.root=OUT_DIR $(cat OUT_DIR/<scene>/predict_overrides.txt)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import open_dict

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers
from mtan_s1s2.data.geotiff.writer import write_scene_geotiffs
from mtan_s1s2.data.scene.datamodule import SceneDataModule


def _value(v: Any) -> str:
    """A Hydra override value (no spaces: the overrides file is word-split by the shell)."""
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if v is None:
        return "null"
    return str(v)


def overrides(spec: dict[str, Any], scene: Any) -> list[str]:
    """``predict.py data=geotiff`` overrides reading back what :func:`write_scene_geotiffs` wrote.

    The files hold physical values, so their radiometry (scale 1, no fill value) replaces
    the one the checkpoint recorded for the source files: ``radiometry_override=true``.
    """
    return [
        f"data.modalities={_value(list(spec['sources']))}",
        "~data.sources",  # replaced, not merged into configs/data/geotiff.yaml's example entries
        f"+data.sources={_value(spec['sources'])}",
        "~data.radiometry",
        f"+data.radiometry={_value(spec['radiometry'])}",
        "radiometry_override=true",  # physical values, not the source's encoding the checkpoint records
        f"data.reference_date={str(scene.reference_date)[:10]}",
        "data.labels.file=null",
        f"data.scenes=['{scene.name}']",
    ]


def main(argv: list[str] | None = None) -> list[Path]:
    """Command line (see the module docstring); returns the scene folders written.

    Raises:
        ValueError: If the data config is not a raster source.
    """
    parser = argparse.ArgumentParser(description="Write the scenes of a data config as GeoTIFFs (data=geotiff).")
    parser.add_argument("out_dir", help="output folder (one subfolder per scene)")
    parser.add_argument("--layout", default="stack", choices=["stack", "files"], help="date-major stack or per-date")
    parser.add_argument("--no-georef", action="store_true", help="write no CRS and no transform")
    parser.add_argument("overrides", nargs="*", help="after --: Hydra overrides of train.yaml, e.g. data=worldcereal")
    argv = list(sys.argv[1:] if argv is None else argv)
    head, tail = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(head)
    args.overrides = [*args.overrides, *tail]
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=args.overrides)
    with open_dict(cfg):
        cfg.data.norm_stats = None
    dm = instantiate(cfg.data)
    if not isinstance(dm, SceneDataModule):
        raise ValueError(f"{cfg.data._target_} has no scenes; use a raster data config (data=datacube, ...).")
    written = []
    for scene in dm.scenes:
        folder = Path(args.out_dir) / scene.name
        spec = write_scene_geotiffs(scene, folder, args.layout, georeferenced=not args.no_georef)
        (folder / "geotiff_config.json").write_text(json.dumps(spec, indent=2))
        (folder / "predict_overrides.txt").write_text("\n".join(overrides(spec, scene)) + "\n")
        root = Path(args.out_dir).resolve()
        print(f"{folder}: predict with data=geotiff data.root={root} $(cat {folder}/predict_overrides.txt)")
        written.append(folder)
    return written


if __name__ == "__main__":
    main()
