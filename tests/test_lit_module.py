import functools

import pytest
import torch

from conftest import CHANNELS, random_batch, small_net_kwargs
from mtan_s1s2.lit_module import SITSClassifierModule, inverse_frequency_weights, masked_cross_entropy
from mtan_s1s2.models.mtan import MTANClassifier


def make_module(**kw):
    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, **small_net_kwargs())
    return SITSClassifierModule(net, functools.partial(torch.optim.AdamW, lr=1e-3), num_classes=11, **kw)


def test_masked_ce_matches_torch_mean_when_labelled():
    logits = torch.randn(2, 5, 3, 4)
    target = torch.randint(0, 5, (2, 3, 4))
    target[0, 0, 0] = 1  # at least one labelled pixel
    w = torch.tensor([0.0, 1.0, 2.0, 0.5, 1.5])
    ref = torch.nn.functional.cross_entropy(logits, target, weight=w, ignore_index=0)
    assert torch.allclose(masked_cross_entropy(logits, target, 0, w), ref, atol=1e-6)
    ref = torch.nn.functional.cross_entropy(logits, target, ignore_index=0)
    assert torch.allclose(masked_cross_entropy(logits, target, 0), ref, atol=1e-6)


def test_no_labelled_pixel_gives_zero_loss_and_finite_grad():
    logits = torch.randn(2, 5, 3, 4, requires_grad=True)
    target = torch.zeros(2, 3, 4, dtype=torch.long)
    loss = masked_cross_entropy(logits, target, 0, torch.ones(5))
    loss.backward()
    assert loss.item() == 0.0 and torch.isfinite(logits.grad).all()


def test_inverse_frequency_weights_finite_with_absent_class():
    w = inverse_frequency_weights(torch.tensor([100, 10, 0, 30]), ignore_index=0)
    assert torch.isfinite(w).all()
    assert w[0] == 0 and w[2] == 0
    assert w[1] > w[3] > 0
    assert torch.isclose(w[[1, 3]].mean(), torch.tensor(1.0))


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
