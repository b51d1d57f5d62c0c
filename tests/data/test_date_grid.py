"""Masked, irregular series onto a regular date grid: linear interpolation and window means."""

from __future__ import annotations

import math

import pytest
import torch

from mtan_s1s2.data.date_grid import (
    interpolate_images_to_grid,
    interpolate_to_grid,
    regular_dates,
    window_mean_images_to_grid,
)


def test_regular_dates_cover_the_range_within_half_a_step() -> None:
    assert regular_dates(0.0, 30.0, 10.0).tolist() == [0.0, 10.0, 20.0, 30.0]
    assert regular_dates(19.5, 60.0, 10.0).tolist() == [19.5, 29.5, 39.5, 49.5, 59.5]
    assert regular_dates(5.0, 5.0, 10.0).tolist() == [5.0]
    with pytest.raises(ValueError, match=r"step_days must be > 0 \(days between grid dates\), got 0"):
        regular_dates(0.0, 30.0, 0.0)
    with pytest.raises(ValueError, match=r"last doy \(10.0\) is before its first \(20.0\)"):
        regular_dates(20.0, 10.0, 5.0)


def test_values_between_around_and_without_valid_observations() -> None:
    # one sample, dates 0, 10, 30 (given out of order), 2 channels, 3 pixels
    doy = torch.tensor([[30.0, 0.0, 10.0]])
    x = torch.full((1, 3, 2, 3), float("nan"))
    mask = torch.zeros(1, 3, 3, dtype=torch.bool)
    # pixel 0: valid on days 0 (value 1, -1) and 30 (value 4, -4); its day-10 value is cloudy (NaN)
    x[0, 1, :, 0], x[0, 0, :, 0] = torch.tensor([1.0, -1.0]), torch.tensor([4.0, -4.0])
    mask[0, 1, 0] = mask[0, 0, 0] = True
    # pixel 1: one valid observation, on day 10 (value 7)
    x[0, 2, :, 1] = 7.0
    mask[0, 2, 1] = True
    # pixel 2: no valid observation
    grid = torch.tensor([-10.0, 0.0, 20.0, 30.0, 45.0])
    values, has_data, gap = interpolate_to_grid(x, doy, mask, grid)
    assert values.shape == (1, 5, 2, 3) and torch.isfinite(values).all()
    torch.testing.assert_close(values[0, :, 0, 0], torch.tensor([1.0, 1.0, 3.0, 4.0, 4.0]))  # held, line, held
    torch.testing.assert_close(values[0, :, 1, 0], torch.tensor([-1.0, -1.0, -3.0, -4.0, -4.0]))
    torch.testing.assert_close(values[0, :, 0, 1], torch.full((5,), 7.0))
    assert values[0, :, :, 2].eq(0).all() and has_data[0, :, 2].logical_not().all()
    assert has_data[0, :, :2].all()
    torch.testing.assert_close(gap[0, :, 0], torch.tensor([10.0, 0.0, 10.0, 0.0, 15.0]))
    torch.testing.assert_close(gap[0, :, 1], torch.tensor([20.0, 10.0, 10.0, 20.0, 35.0]))
    assert gap[0, :, 2].eq(math.inf).all()


def test_padded_dates_and_samples_with_their_own_dates() -> None:
    # sample 0 has dates 0, 20 and a padded (repeated, masked) date; sample 1 has 5, 15, 25
    doy = torch.tensor([[0.0, 20.0, 20.0], [5.0, 15.0, 25.0]])
    x = torch.tensor([[0.0, 2.0, 99.0], [10.0, 20.0, 30.0]]).view(2, 3, 1, 1)
    mask = torch.tensor([[True, True, False], [True, True, True]]).view(2, 3, 1)
    values, has_data, _ = interpolate_to_grid(x, doy, mask, torch.tensor([10.0, 20.0]))
    torch.testing.assert_close(values[:, :, 0, 0], torch.tensor([[1.0, 2.0], [15.0, 25.0]]))
    assert has_data.all()


def test_shape_errors_name_every_shape() -> None:
    with pytest.raises(ValueError, match=r"x \(B, T, C, P\), doy \(B, T\).*got \(1, 3, 2, 4\), \(1, 2\)"):
        interpolate_to_grid(torch.zeros(1, 3, 2, 4), torch.zeros(1, 2), torch.ones(1, 3, 4, dtype=torch.bool),
                            torch.zeros(2))  # fmt: skip


def test_image_series_are_interpolated_pixel_by_pixel_with_an_observed_flag() -> None:
    # one sample, dates 0 and 30, 1 channel, 1 x 2 pixels: pixel (0, 0) valid on both dates
    # (values 0 and 30), pixel (0, 1) on day 30 only (value 6); grid every 10 days from day 5
    doy = torch.tensor([[0.0, 30.0]])
    x = torch.tensor([[[[[0.0, float("nan")]]], [[[30.0, 6.0]]]]])  # (B, T, C, H, W)
    mask = torch.tensor([[[[True, False]], [[True, True]]]])  # (B, T, H, W)
    values, observed = interpolate_images_to_grid(x, doy, mask, torch.tensor([5.0, 15.0, 25.0]), step_days=10.0)
    assert values.shape == (1, 3, 1, 1, 2) and observed.shape == (1, 3, 1, 2)
    torch.testing.assert_close(values[0, :, 0, 0], torch.tensor([[5.0, 6.0], [15.0, 6.0], [25.0, 6.0]]))
    # a valid observation within 5 days: day 5 (day 0) and day 25 (day 30); day 15 is 15 days from both
    assert observed[0, :, 0].tolist() == [[True, False], [False, False], [True, True]]
    wrong = r"x \(B, T, C, H, W\) and mask \(B, T, H, W\); got \(1, 2, 1, 1, 2\) and \(1, 2, 2\)"
    with pytest.raises(ValueError, match=wrong):
        interpolate_images_to_grid(x, doy, mask.view(1, 2, 2), torch.tensor([5.0]), step_days=10.0)


def test_window_means_average_the_valid_observations_and_interpolate_empty_windows() -> None:
    # one sample, 5 dates, 1 channel, 1 x 2 pixels; grid days 10, 40, 70 with 30-day windows
    # [-5, 25), [25, 55), [55, 85)
    doy = torch.tensor([[0.0, 10.0, 20.0, 40.0, 45.0]])
    x = torch.tensor([1.0, 3.0, 100.0, 5.0, float("nan")]).view(1, 5, 1, 1, 1).repeat(1, 1, 1, 1, 2)
    x[0, :, 0, 0, 1] = torch.tensor([float("nan"), 8.0, float("nan"), float("nan"), 2.0])
    mask = torch.tensor([True, True, False, True, False]).view(1, 5, 1, 1).repeat(1, 1, 1, 2)
    mask[0, :, 0, 1] = torch.tensor([False, True, False, False, True])
    values, observed = window_mean_images_to_grid(x, doy, mask, torch.tensor([10.0, 40.0, 70.0]), step_days=30.0)
    assert values.shape == (1, 3, 1, 1, 2) and observed.shape == (1, 3, 1, 2) and torch.isfinite(values).all()
    # pixel 0: mean(1, 3) (100 is masked), 5 (the masked NaN never read), none after day 45: held at 5
    torch.testing.assert_close(values[0, :, 0, 0, 0], torch.tensor([2.0, 5.0, 5.0]))
    # pixel 1: 8, then 2 (day 45), held
    torch.testing.assert_close(values[0, :, 0, 0, 1], torch.tensor([8.0, 2.0, 2.0]))
    assert observed[0, :, 0].tolist() == [[True, True], [True, True], [False, False]]
    # where every window holds one observation, the window mean is that observation, not the line
    line, _ = interpolate_images_to_grid(x, doy, mask, torch.tensor([10.0, 40.0]), step_days=30.0)
    assert line[0, 0, 0, 0, 1] == 8.0 and line[0, 1, 0, 0, 0] == 5.0


def test_window_means_leave_a_pixel_without_observations_at_zero_and_reject_a_bad_step() -> None:
    x = torch.full((2, 3, 2, 1, 1), float("nan"))
    mask = torch.zeros(2, 3, 1, 1, dtype=torch.bool)
    doy = torch.tensor([[0.0, 5.0, 9.0], [1.0, 2.0, float("nan")]])
    values, observed = window_mean_images_to_grid(x, doy, mask, torch.tensor([5.0]), step_days=10.0)
    assert values.eq(0).all() and not observed.any()
    with pytest.raises(ValueError, match=r"step_days must be > 0 \(days between grid dates\), got -1.0"):
        window_mean_images_to_grid(x, doy, mask, torch.tensor([5.0]), step_days=-1.0)
