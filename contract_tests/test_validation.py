"""Contract §15.2, §17.2: every invalid config fails fast with one ConfigError naming key, value and rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mebench import cli
from mebench.run import engine
from mebench.config import parse_config
from mebench.config.validation import load_config, validate
from mebench.errors import ConfigError
from mebench.testing import deep_update

# (overrides, key named in the error, words of the rule) -- one case per §15.2 rule and schema rule
RULE_CASES = {
    "checkpoints_not_increasing": ({"budget": {"checkpoints": [500, 200], "max_budget": 500}}, "budget.checkpoints", "increasing"),
    "checkpoint_above_max": ({"budget": {"checkpoints": [200, 600], "max_budget": 500}}, "budget.checkpoints", "<= budget.max_budget"),
    "output_mode_mismatch": ({"attack": {"output_mode": "hard_top1"}}, "attack.output_mode", "must equal victim.output_mode"),
    "temperature_not_one": ({"victim": {"temperature": 2.0}}, "victim.temperature", "temperature 1.0"),
    "attack_data_mode": ({"dataset": {"data_mode": "data_free", "surrogate_name": None}}, "dataset.data_mode", "allows only data modes"),
    "track_a_batch_size": ({"substitute": {"trackA": {"batch_size": 64}}}, "substitute.trackA.batch_size", "fixed at 128"),
    "track_a_steps_coeff": ({"substitute": {"trackA": {"steps_coeff_c": 0.5}}}, "substitute.trackA.steps_coeff_c", "ceil(0.2 * B)"),
    "track_a_reset": ({"substitute": {"trackA": {"reset_each_checkpoint": False}}}, "substitute.trackA.reset_each_checkpoint", "re-instantiate"),
    "victim_eval": ({"victim": {"inference": {"eval": False}}}, "victim.inference.eval", "eval() mode"),
    "victim_no_grad": ({"victim": {"inference": {"no_grad": False}}}, "victim.inference.no_grad", "no_grad"),
    "cache_kept": ({"cache": {"delete_on_finish": False}}, "cache.delete_on_finish", "deleted"),
    "pool_too_small": ({"budget": {"max_budget": 9000, "checkpoints": [9000]}}, "budget.max_budget", "pool holds 5000"),
    "unknown_key": ({"budget": {"checkpionts": [1]}}, "budget.checkpionts", "did you mean 'checkpoints'"),
    "unknown_attack": ({"attack": {"name": "randon"}}, "attack.name", "did you mean 'random'"),
    "label_spelling": ({"attack": {"label": "random-fast"}}, "attack.label", "letters, digits and '_'"),
    "wrong_type": ({"budget": {"max_budget": "lots"}}, "budget.max_budget", "must be an integer"),
    "bad_surrogate": ({"dataset": {"surrogate_name": "SVHN"}}, "dataset.surrogate_name", "must be one of"),
}


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_each_rule_raises_one_config_error_naming_key_value_and_rule(case, synth_cfg_dict):
    # contract 15.2: fail fast, one message with key, value and rule
    overrides, key, words = RULE_CASES[case]
    with pytest.raises(ConfigError) as e:
        validate(parse_config(deep_update(synth_cfg_dict, overrides)))
    assert e.value.key == key
    msg = str(e.value)
    assert f"'{key}'" in msg and words in msg and "\n" not in msg


_MUTATIONS = st.one_of(
    st.lists(st.integers(1, 500), min_size=2, max_size=5).filter(lambda c: any(a >= b for a, b in zip(c, c[1:])))
    .map(lambda c: {"budget": {"checkpoints": c, "max_budget": 500}}),
    st.integers(501, 10**6).map(lambda c: {"budget": {"checkpoints": [100, c], "max_budget": 500}}),
    st.floats(0.01, 100).filter(lambda t: t != 1.0).map(lambda t: {"victim": {"temperature": t}}),
    st.integers(1, 4096).filter(lambda b: b != 128).map(lambda b: {"substitute": {"trackA": {"batch_size": b}}}),
    st.floats(0.001, 10).filter(lambda c: c != 0.2).map(lambda c: {"substitute": {"trackA": {"steps_coeff_c": c}}}),
    st.just({"attack": {"output_mode": "hard_top1"}}),
    st.just({"dataset": {"data_mode": "data_free", "surrogate_name": None}}),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutation=_MUTATIONS)
def test_any_rule_breaking_config_raises_before_work_starts(mutation, synth_cfg_dict, monkeypatch):
    # contract 15.2, 17.2: validation happens before any data or model is loaded
    def no_work(*a, **k):
        raise AssertionError("work started before validation failed")

    monkeypatch.setattr(engine, "prepare", no_work)
    with pytest.raises(ConfigError):
        engine.run(parse_config(deep_update(synth_cfg_dict, mutation)), progress=False)


def test_dfme_requires_data_free(synth_cfg_dict):
    # contract 6.1, 15.2: DFME with surrogate data is rejected
    from mebench.attacks import ATTACKS

    if "dfme" not in ATTACKS:
        pytest.skip("dfme attack not installed")
    cfg = parse_config(deep_update(synth_cfg_dict, {"attack": {"name": "dfme", "params": {}}}))
    with pytest.raises(ConfigError, match="allows only data modes"):
        validate(cfg)


def test_run_config_yaml_reads_back_to_an_equal_config(make_cfg):
    # contract 11.1: run_config.yaml is the exact config used
    cfg = make_cfg()
    assert parse_config(yaml.safe_load(cfg.to_yaml())) == cfg
    res = engine.run(cfg, progress=False)
    written = (res.directory / "seed_0" / "run_config.yaml").read_text()
    assert parse_config(yaml.safe_load(written)) == cfg


def _write(tmp_path: Path, d: dict) -> Path:
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


@pytest.mark.parametrize("case", sorted(RULE_CASES))
def test_cli_exits_nonzero_with_one_line_and_leaves_no_run_folder(case, synth_cfg_dict, tmp_path, capsys):
    # contract 15.2: `mebench run` on a broken config: non-zero exit, one line, nothing created
    overrides, key, _ = RULE_CASES[case]
    path = _write(tmp_path, deep_update(synth_cfg_dict, overrides))
    out_dir = tmp_path / "runs_cli"
    code = cli.main(["run", str(path), "--out", str(out_dir), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and key in err[0]
    assert not out_dir.exists()


def test_missing_checkpoint_is_a_config_error(synth_cfg_dict, tmp_path):
    # contract 4: the victim checkpoint must exist before work starts
    path = _write(tmp_path, deep_update(synth_cfg_dict, {"victim": {"checkpoint_ref": str(tmp_path / "none.pt")}}))
    with pytest.raises(ConfigError, match="victim.checkpoint_ref"):
        load_config(path)


# contract 1.2: temperature has one spelling, the victim's explicit oracle profile; the old
# `temperature` defense is read as it, with one deprecation warning naming both, and the oracle
# answers the same through the same transform
def test_the_temperature_defense_is_read_as_the_tempered_profile(synth_cfg_dict):
    import torch

    from mebench.defenses import DEFENSES, build_answers
    from mebench.errors import ConfigDeprecationWarning
    from mebench.victims.wrapper import FrozenVictim

    old = deep_update(synth_cfg_dict, {"defense": {"name": "temperature", "params": {"temperature": 2.5}}})
    with pytest.warns(ConfigDeprecationWarning, match=r"defense 'temperature' is deprecated: write "
                                                      r"victim.oracle_profile: tempered and victim.temperature: 2.5"):
        cfg = parse_config(old)
    new = parse_config(deep_update(synth_cfg_dict, {"victim": {"oracle_profile": "tempered", "temperature": 2.5}}))
    assert cfg == new and cfg.defense.name == "none"
    validate(cfg)
    victim = FrozenVictim(torch.nn.Linear(64, 4), "cpu")
    x = torch.rand(5, 64, generator=torch.Generator().manual_seed(0))
    defense = DEFENSES.get("temperature")(DEFENSES.get("temperature").Params(2.5), torch.Generator())
    before, after = build_answers(victim, 1.0, defense), build_answers(victim, cfg.victim.temperature)
    assert torch.equal(before.probs(x), after.probs(x))
    assert torch.equal(before.probs(x, reference_only=True), after.probs(x, reference_only=True))
