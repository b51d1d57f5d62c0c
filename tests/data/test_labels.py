"""Source label codes to classes: grouping, ignored codes, missing labels, unknown codes."""

from __future__ import annotations

import numpy as np
import pytest

from mtan_s1s2.data.labels import LabelMapping


def _mapping(**kw) -> LabelMapping:
    return LabelMapping.from_config({"cereals": [1110, 1510], "maize": 1200}, ignore_codes=[0, 99], **kw)


def test_codes_map_to_classes_and_missing_or_ignored_to_zero() -> None:
    m = _mapping()
    raw = np.array([[1110.0, 1200.0, np.nan], [1510.0, 0.0, 99.0]])
    assert m.class_names == ("unlabelled", "cereals", "maize") and m.num_classes == 3
    assert m.map(raw).tolist() == [[1, 2, 0], [1, 0, 0]]
    m.check(raw, "labels.nc")  # nothing unknown
    assert m.as_dict()["classes"] == {"cereals": [1110, 1510], "maize": [1200]}
    names = LabelMapping.from_config({"sorghum": ["unspecified_sorghum"], "maize": ["maize"]})
    assert names.map(np.array(["maize", "beans", "unspecified_sorghum"], object)).tolist() == [2, 0, 1]


def test_unknown_codes_are_counted_and_named() -> None:
    raw = np.array([1110, 1910, 1910, 2130, 0])
    with pytest.raises(ValueError, match=r"2 label code\(s\).*1910: 2 px, 2130: 1 px.*ignore_codes"):
        _mapping().check(raw, "CT of patch A")
    lenient = _mapping(unknown="ignore")
    lenient.check(raw, "CT of patch A")
    assert lenient.map(raw).tolist() == [1, 0, 0, 0, 0]


@pytest.mark.parametrize(
    ("classes", "ignore", "match"),
    [
        ({"a": [1], "b": [1]}, [], "both 'a' and 'b'"),
        ({"a": [1], "b": [2]}, [2], "both a class and in ignore_codes"),
        ({"a": [1]}, [], "at least two classes"),
        ({"a": []}, [], "no source code"),
        ({}, [], "must map class names"),
    ],
)
def test_bad_mappings_raise(classes: dict, ignore: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LabelMapping.from_config(classes, ignore_codes=ignore)
