import functools

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.lit_module import SITSClassifierModule
from mtan_s1s2.models.mtan import MTANClassifier


def make_module(**kw):
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, **small_net_kwargs())
    return SITSClassifierModule(net, functools.partial(torch.optim.AdamW, lr=1e-3), num_classes=11, **kw)


def test_training_step_with_fully_masked_pixels_and_no_labels():
    module = make_module()
    batch = random_batch()
    for m in ("s2", "s1_asc", "s1_desc"):
        batch[m]["mask"][:, :, :2, :2] = False
    batch["label"][:] = 0
    loss = module._shared_step(batch, "val")
    assert torch.isfinite(loss) and loss.item() == 0.0


def test_metrics_ignore_index_pixels():
    module = make_module()
    preds = torch.randint(1, 11, (2, 4, 4), generator=torch.Generator().manual_seed(0))
    target = preds.clone()
    target[:, :2] = 0  # unlabelled: must not count even though predictions differ
    preds_wrong = preds.clone()
    preds_wrong[:, :2] = (preds[:, :2] + 1) % 11
    module.val_metrics.update(preds_wrong, target)
    values = module.val_metrics.compute()
    assert values["val/OA"].item() == pytest.approx(1.0)
    assert values["val/kappa"].item() == pytest.approx(1.0)


def test_bad_class_weights_raise():
    with pytest.raises(ValueError, match="inverse_frequency"):
        make_module(class_weights="balanced")
    with pytest.raises(ValueError, match="num_classes=11"):
        make_module(class_weights=[1.0, 2.0])
