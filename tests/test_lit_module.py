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


def _two_batches():
    """One batch of 100 labelled pixels, one of a single labelled pixel."""
    big, small = random_batch(B=1, H=10, W=10, seed=1), random_batch(B=1, H=10, W=10, seed=2)
    big["label"] = torch.randint(1, 11, (1, 10, 10), generator=torch.Generator().manual_seed(3))
    small["label"][:] = 0
    small["label"][0, 4, 4] = 7
    return [big, small]


@pytest.mark.parametrize("stage", ["train", "val"])
def test_epoch_loss_is_weighted_by_labelled_pixels(stage):
    import lightning as L
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    net = MTANClassifier(CHANNELS, 11, **{**small_net_kwargs(), "dropout": 0.0})
    module = SITSClassifierModule(net, functools.partial(torch.optim.SGD, lr=0.0), num_classes=11)
    batches = _two_batches()
    with torch.no_grad():
        losses = [F.cross_entropy(net(b), b["label"], ignore_index=0, reduction="none") for b in batches]
    labelled = [(b["label"] != 0).sum().item() for b in batches]
    assert labelled == [100, 1]
    expected = sum(loss.sum().item() for loss in losses) / 101
    mean_of_means = sum(loss.sum().item() / n for loss, n in zip(losses, labelled, strict=True)) / 2
    assert abs(mean_of_means - expected) > 0.05  # the two averages differ on these batches
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0 if stage == "train" else None,
    )  # fmt: skip
    loader = DataLoader(batches, batch_size=None)
    if stage == "train":  # lr 0: the weights, hence the losses, stay those computed above
        trainer.fit(module, train_dataloaders=loader)
    else:
        trainer.validate(module, dataloaders=loader)
    assert trainer.callback_metrics[f"{stage}/loss"].item() == pytest.approx(expected, rel=1e-5)
