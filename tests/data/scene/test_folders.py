"""Scene folders: discovery, and the checks both raster readers share (one code path, one message)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fixtures.scene_files import LABEL, SOURCES, make_scene, write_default_scenes, write_tif
from mtan_s1s2.data.datacube import DatacubeDataModule
from mtan_s1s2.data.datacube.scenes import DatacubeFolder
from mtan_s1s2.data.geotiff import GeoTiffDataModule
from mtan_s1s2.data.geotiff.scenes import GeoTiffFolder
from mtan_s1s2.data.scene.folders import SceneSources, one_file, open_scene_folder, scene_folders

GEOTIFF_S2 = {"s2": {"stack": "S2_stack.tif", "dates": "S2_dates.txt", "bands": [f"b{i}" for i in range(10)]}}


def test_scene_folders_lists_subfolders_named_scenes_or_the_root_itself(tmp_path: Path) -> None:
    for name in ("b", "a", ".hidden"):
        (tmp_path / name).mkdir()
    assert scene_folders(str(tmp_path), None) == [tmp_path / "a", tmp_path / "b"]
    assert scene_folders(str(tmp_path), "b") == [tmp_path / "b"]
    assert scene_folders(None, [str(tmp_path / "a")]) == [tmp_path / "a"]
    assert scene_folders(str(tmp_path / "a"), None) == [tmp_path / "a"]  # no subfolder: the folder is the scene
    with pytest.raises(ValueError, match=r"data.root is not set"):
        scene_folders("???", None)
    with pytest.raises(ValueError, match=r"Scene folder not found: .*/c \(data.scenes entry 'c', under data.root="):
        scene_folders(str(tmp_path), ["a", "c"])
    (tmp_path / "patches" / "d").mkdir(parents=True)  # data.root one level above the scenes
    with pytest.raises(ValueError, match=rf"It is in {tmp_path / 'patches'}: set data.root={tmp_path / 'patches'} "):
        scene_folders(str(tmp_path), ["d"])


def test_one_file_refuses_a_glob_matching_several(tmp_path: Path) -> None:
    for name in ("x1.tif", "x2.tif"):
        write_tif(tmp_path / name, np.zeros((2, 2), np.uint8))
    assert one_file(tmp_path, "x1.tif", "data.label.file") == tmp_path / "x1.tif"
    with pytest.raises(ValueError, match=r"data.label.file='x\*.tif' matches 2 files in .*; match one"):
        one_file(tmp_path, "x*.tif", "data.label.file")
    with pytest.raises(ValueError, match=r"data.label.file: no file matches 'y.tif' in .* \(it holds \['x1.tif'"):
        one_file(tmp_path, "y.tif", "data.label.file")


@pytest.mark.parametrize("kind", ["datacube", "geotiff"])
def test_both_readers_share_the_folder_and_entry_checks(tmp_path: Path, kind: str) -> None:
    folder = write_default_scenes(tmp_path, kind) / "scene1"
    reader = DatacubeFolder(folder) if kind == "datacube" else GeoTiffFolder(folder)
    sources = SOURCES if kind == "datacube" else GEOTIFF_S2
    label = LABEL if kind == "datacube" else {"file": "label.tif", "band": 1}
    if kind == "datacube":
        make_scene(folder)  # the files SOURCES and LABEL name
    scene = open_scene_folder(reader, SceneSources(("s2",), sources, "2020-01-01", label=label))
    assert scene.modalities == ["s2"] and scene.label is not None and scene.name == "scene1"
    assert scene.reference_date == np.datetime64("2020-01-01")
    with pytest.raises(ValueError, match=r"data.modalities has 's1_desc' but data.sources has no entry for it"):
        open_scene_folder(reader, SceneSources(("s2", "s1_desc"), sources, "2020-01-01"))
    bad = {"s2": {**sources["s2"], "bandz": ["B02"]}}
    with pytest.raises(ValueError, match=r"data.sources.s2 has unknown key\(s\) \['bandz'\]; valid keys are "):
        open_scene_folder(reader, SceneSources(("s2",), bad, "2020-01-01"))
    layer_keys = "\\['file', 'variable'\\]" if kind == "datacube" else "\\['file', 'band'\\]"
    with pytest.raises(ValueError, match=rf"data.split.parcels has unknown key\(s\) \['var'\]; .* {layer_keys}"):
        open_scene_folder(reader, SceneSources(("s2",), sources, "2020-01-01", parcels={"file": "x", "var": "y"}))
    with pytest.raises(ValueError, match=r"data.radiometry.s2: "):
        open_scene_folder(reader, SceneSources(("s2",), sources, "2020-01-01", radiometry={"s2": {"scael": 1}}))
    missing = DatacubeFolder(tmp_path / "nowhere") if kind == "datacube" else GeoTiffFolder(tmp_path / "nowhere")
    with pytest.raises(ValueError, match=r"Scene folder not found: .*nowhere; set data.root / data.scenes"):
        open_scene_folder(missing, SceneSources(("s2",), sources, "2020-01-01"))


@pytest.mark.parametrize("cls", [DatacubeDataModule, GeoTiffDataModule])
def test_datamodules_refuse_empty_sources_before_looking_for_scenes(cls: type, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"data.sources is empty: give the files \(or layout\) and bands .*\['s2'\]"):
        cls(root=None, modalities=["s2"], sources={}, reference_date="2020-01-01")
