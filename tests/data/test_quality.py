"""Quality bands: SCL classes, mask conventions, unexpected values counted."""

from __future__ import annotations

import numpy as np
import pytest

from mtan_s1s2.data.quality import MASK_RULE, SCL_RULE, QualityRule


def test_scl_defaults_mask_clouds_shadows_cirrus_snow_nodata_saturated() -> None:
    codes = np.arange(12)
    invalid = SCL_RULE.invalid_mask(codes, "SCL of x.nc")
    assert np.flatnonzero(invalid).tolist() == [0, 1, 3, 8, 9, 10, 11]
    custom = QualityRule.from_config({"invalid": [0, 1, 2, 3, 8, 9, 10, 11]}, default=SCL_RULE, name="SCL")
    assert custom.invalid_mask(np.array([2]), "x").all()  # dark areas masked too, if configured


def test_unexpected_values_are_counted_with_the_fix() -> None:
    with pytest.raises(ValueError, match=r"m\.tif: the mask holds value\(s\) .*: 255: 3 px.*quality\.valid"):
        MASK_RULE.invalid_mask(np.array([0, 1, 255, 255, 255]), "m.tif")
    with pytest.raises(ValueError, match="both valid and invalid"):
        QualityRule((0, 1), (1,))
