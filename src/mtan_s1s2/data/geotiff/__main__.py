"""``python -m mtan_s1s2.data.geotiff OUT_DIR [--layout stack|files] [--no-georef] -- <data overrides>``.

Writes every scene of a data config (e.g. ``data=worldcereal data.scenes=[ID]``) as GeoTIFFs
(:func:`~mtan_s1s2.data.geotiff.writer.write_scene_geotiffs`) into ``OUT_DIR/<scene>/`` and
prints the ``data=geotiff`` overrides that read them back.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import open_dict

from mtan_s1s2.cli.config import CONFIG_DIR, register_resolvers
from mtan_s1s2.data.geotiff.writer import write_scene_geotiffs
from mtan_s1s2.data.scene_datamodule import SceneDataModule


def main(argv: list[str] | None = None) -> list[Path]:
    """Command line (see the module docstring); returns the scene folders written.

    Raises:
        ValueError: If the data config is not a raster source.
    """
    parser = argparse.ArgumentParser(description="Write the scenes of a data config as GeoTIFFs (data=geotiff).")
    parser.add_argument("out_dir", help="output folder (one subfolder per scene)")
    parser.add_argument("--layout", default="stack", choices=["stack", "files"], help="date-major stack or per-date")
    parser.add_argument("--no-georef", action="store_true", help="write no CRS and no transform")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides of train.yaml, e.g. data=worldcereal")
    args = parser.parse_args(argv)
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
        root = Path(args.out_dir).resolve()
        print(f"{folder}: read back with data=geotiff data.root={root} and the entries of {folder}/geotiff_config.json")
        written.append(folder)
    return written


if __name__ == "__main__":
    main()
