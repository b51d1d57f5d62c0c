import torch

from mtan_s1s2.models.losses import inverse_frequency_weights, masked_cross_entropy


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


class _Counts:
    """A datamodule stand-in: the labelled pixels per class of its training split."""

    def __init__(self, counts: list[int]) -> None:
        self.counts = torch.tensor(counts)

    def class_counts(self, num_classes: int) -> torch.Tensor:
        return self.counts[:num_classes]


def test_training_class_weights_warn_with_the_names_of_absent_classes():
    import pytest

    from mtan_s1s2.models.losses import training_class_weights

    names = ["unlabelled", "wheat", "maize", "fallow"]
    with pytest.warns(UserWarning, match=r"1 class\(es\) have no labelled pixel .*: maize \(2\)"):
        w = training_class_weights(_Counts([50, 10, 0, 30]), 4, 0, names)
    assert torch.allclose(w, torch.tensor([0.0, 1.5, 0.0, 0.5]))  # 1/frequency, mean 1 over present classes
