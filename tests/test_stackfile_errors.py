"""A stack file that cannot be read is one line naming file, line and column in every command that
reads it; a misspelt gcp:* key and a GPU zone without L4 are refused offline, before any call."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops import estimate
from stacks.loader import ConfigError
from stacks.plan import main as plan_main
from stacks.stackfile import load_config

UNCLOSED = "config:\n  gcp:region: us-central1\n  gke-ml-labs:lab: g6\n  gke-ml-labs:vllm: {model: [qwen\n"


def stack_file(tmp_path: Path, text: str, stack: str = "g6") -> Path:
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text)
    return tmp_path


@pytest.mark.parametrize("command", ["estimate", "plan"])
def test_an_unclosed_bracket_is_one_line_with_file_line_column(tmp_path, capsys, command):
    folder = stack_file(tmp_path, UNCLOSED)
    code = estimate.main(["g6"], directory=folder) if command == "estimate" else plan_main(["g6", "--dir", str(folder)])
    assert code == 2
    captured = capsys.readouterr()
    (line,) = (captured.out + captured.err).strip().splitlines()
    assert "Pulumi.g6.yaml:5:1: not valid YAML: expected ',' or ']', but got '<stream end>' (while parsing a flow " \
           "sequence from line 4, column 29)" in line
    assert "Traceback" not in captured.err


def test_a_misspelt_gcp_key_is_an_error_not_a_default(tmp_path):
    folder = stack_file(tmp_path, "config:\n  gcp:regoin: europe-west4\n  gke-ml-labs:lab: g6\n")
    with pytest.raises(ConfigError, match=r"^Pulumi.g6.yaml: gcp:regoin: not a key of the Pulumi GCP provider, "
                                          r"which would ignore it; did you mean gcp:region\?"):
        load_config("g6", project="p", directory=folder)


def test_the_provider_keys_a_user_sets_are_accepted(tmp_path):
    text = "config:\n  gcp:project: p\n  gcp:region: us-central1\n  gcp:zone: us-central1-a\n  gke-ml-labs:lab: g6\n"
    assert load_config("g6", directory=stack_file(tmp_path, text)).region == "us-central1"


def test_a_gpu_zone_without_l4_is_refused_offline(tmp_path):
    # us-central1-f exists, but the catalogue lists L4 (g2) machines only in us-central1-a, -b and -c.
    text = "config:\n  gcp:region: us-central1\n  gke-ml-labs:lab: g6\n  gke-ml-labs:zone: us-central1-f\n"
    with pytest.raises(ConfigError, match=r"GPU zone 'us-central1-f' does not offer L4 GPUs \(the catalogue in "
                                          r"facts/prices.py lists those of us-central1: us-central1-a, us-central1-b, "
                                          r"us-central1-c\): set zone or gpu_zones"):
        load_config("g6", project="p", directory=stack_file(tmp_path, text))
