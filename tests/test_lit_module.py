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
    loss, logits = module._shared_step(batch, "val")
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


def test_a_compiled_module_saves_the_eager_names_only():
    eager, compiled = make_module(), make_module()
    compiled.enable_compile()  # torch.compile is lazy: nothing is compiled until a forward
    assert compiled.compile_status == "on (model.compile=true)"
    assert list(compiled.state_dict()) == list(eager.state_dict())
    assert not [k for k in compiled.state_dict() if "_orig_mod" in k or k.startswith("_compiled")]


def test_checkpoints_load_eager_and_compiled_either_way_with_equal_outputs():
    """eager -> compiled, compiled -> eager and compiled -> compiled give the same logits.

    The ``eager`` compile backend runs the network through Dynamo's graphs without
    generating code (no inductor compile time in this test).
    """
    trained = make_module()
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.1 * torch.randn_like(p))  # weights no fresh module has
    batch = random_batch(seed=4)
    expected = trained.eval()(batch)

    def compiled_module():
        module = make_module()
        module.enable_compile(backend="eager")
        return module.eval()

    to_compiled = compiled_module()
    to_compiled.load_state_dict(trained.state_dict())  # eager -> compiled
    to_eager = make_module().eval()
    to_eager.load_state_dict(to_compiled.state_dict())  # compiled -> eager
    again = compiled_module()
    again.load_state_dict(to_compiled.state_dict())  # compiled -> compiled
    with torch.no_grad():
        for name, module in (("eager->compiled", to_compiled), ("compiled->eager", to_eager), ("again", again)):
            out = module(batch)
            assert torch.allclose(out, expected, atol=1e-5), f"{name}: {(out - expected).abs().max()}"


def test_checkpoints_of_older_compiled_runs_load_into_an_eager_module():
    """Older versions saved a ``_compiled._orig_mod.`` copy of every weight of a compiled run."""
    trained = make_module()
    state = trained.state_dict()
    older = {**state, **{f"_compiled._orig_mod.{k[4:]}": v for k, v in state.items() if k.startswith("net.")}}
    module = make_module()
    module.load_state_dict(older)  # strict: no unexpected key left
    only_copies = {(f"_compiled._orig_mod.{k[4:]}" if k.startswith("net.") else k): v for k, v in state.items()}
    renamed = make_module()
    renamed.load_state_dict(only_copies)
    for k, v in state.items():
        assert torch.equal(module.state_dict()[k], v) and torch.equal(renamed.state_dict()[k], v), k


def test_class_weights_are_set_by_the_caller_and_checked():
    module = make_module(class_weights="inverse_frequency")
    assert module.class_weight is None
    with pytest.raises(ValueError, match="num_classes=11 values, got shape \\(3,\\)"):
        module.set_class_weights([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="training_class_weights"):
        module.on_fit_start()  # inverse_frequency without its weights
    module.set_class_weights([0.0] + [1.0] * 10)
    module.on_fit_start()
    assert module.class_weight.tolist() == [0.0] + [1.0] * 10
