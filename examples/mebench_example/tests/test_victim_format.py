"""``example_npz`` keeps mebench's victim-format contract: a config naming it validates, and the
victim answers like the mebench checkpoint it was written from; a file of another kind is one line."""

import pytest
import torch

import mebench_example.victim_format  # noqa: F401  (registers example_npz; installed, the entry point does)
from mebench.errors import ConfigError
from mebench.testing import synthetic_config, synthetic_victim
from mebench.config.validation import validate
from mebench.victims.registry import build_victim
from mebench.victims.registry import FORMATS
from mebench.victims.wrapper import FrozenVictim


def test_answers_like_the_checkpoint(tmp_path):
    checkpoint = synthetic_victim(tmp_path / "victim.pt")
    section = FORMATS.get("example_npz").smoke_victim(checkpoint, tmp_path)
    cfg = synthetic_config(tmp_path, victim=dict(section))
    validate(cfg)
    x = torch.rand(64, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    ours, meta = build_victim(cfg.victim, 4)
    ref, _ = build_victim(synthetic_config(tmp_path).victim, 4)
    assert meta["format"] == "example_npz" and len(meta["checkpoint_sha256"]) == 64
    assert torch.allclose(FrozenVictim(ours, "cpu").probs(x), FrozenVictim(ref, "cpu").probs(x), atol=1e-6)


def test_another_file_is_one_line(tmp_path):
    checkpoint = synthetic_victim(tmp_path / "victim.pt")  # a mebench checkpoint, not an .npz
    with pytest.raises(ConfigError) as err:
        validate(synthetic_config(tmp_path, victim={"format": "example_npz", "checkpoint_ref": str(checkpoint)}))
    assert "is not an example_npz file" in str(err.value) and "\n" not in str(err.value)
