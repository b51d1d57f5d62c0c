"""Missing optional Hydra plugins get a message naming the package and the extra."""

from mtan_s1s2.cli.plugins import missing_plugin_message


def test_missing_plugin_message_names_the_extra():
    msg = missing_plugin_message(["-m", "hparams_search=optuna", "mlp=conv"], is_installed=lambda module: False)
    assert "hydra-optuna-sweeper" in msg and 'pip install "mtan-s1s2[optuna]"' in msg
    msg = missing_plugin_message(["hydra/launcher=slurm", "+hydra/launcher=joblib"], is_installed=lambda m: False)
    assert "mtan-s1s2[slurm]" in msg and "mtan-s1s2[joblib]" in msg
    assert missing_plugin_message(["hparams_search=optuna"], is_installed=lambda m: True) is None
    assert missing_plugin_message(["mlp=conv", "-m"], is_installed=lambda m: False) is None
