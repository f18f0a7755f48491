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


# --- every bad input of a stack file: one line naming the file and the key, and a non-zero exit, in
# every command that reads it ---------------------------------------------------------------------------

G6 = "config:\n  gcp:project: lab-project\n  gcp:region: us-central1\n  gke-ml-labs:lab: g6\n"
BAD_INPUTS = {
    "namespace typo": (G6 + "  gke-ml-lab:zone: us-central1-b\n",
                       "Pulumi.g6.yaml: gke-ml-lab:zone: no program reads the namespace 'gke-ml-lab', so the key would "
                       "be ignored; did you mean gke-ml-labs:zone? the labs read gke-ml-labs:* and gcp:*"),
    "duplicate key": (G6 + "  gke-ml-labs:zone: us-central1-a\n  gke-ml-labs:zone: us-central1-b\n",
                      "Pulumi.g6.yaml:6:3: not valid YAML: duplicate key 'gke-ml-labs:zone' (first at line 5): Pulumi "
                      "refuses it; keep one"),
    "UTF-16": (G6.encode("utf-16"),
               "Pulumi.g6.yaml: the file is UTF-16 (it starts with a UTF-16 byte-order mark); Pulumi reads UTF-8: "
               "`iconv -f UTF-16 -t UTF-8 Pulumi.g6.yaml > x && mv x Pulumi.g6.yaml`"),
    "configs:": (G6.replace("config:", "configs:"),
                 "Pulumi.g6.yaml: configs: not a key of a stack file, Pulumi would ignore it and all it holds; did you "
                 "mean 'config'? a stack file holds config, secretsprovider, encryptedkey, encryptionsalt, environment"),
    "europe-north1": (G6.replace("us-central1", "europe-north1"),
                      "Pulumi.g6.yaml: gcp:region: 'europe-north1' is not among the regions where the catalogue in "
                      "facts/prices.py lists L4 GPUs (asia-east1, "),
    "plaintext hf_token": (G6 + "  gke-ml-labs:hf_token: hf_abcdef\n",
                           "Pulumi.g6.yaml: gke-ml-labs:hf_token is stored in plain text: set it with `pulumi config "
                           "set --secret hf_token ... -s g6` (and remove the plain value)"),
    "lab: g5 in Pulumi.g6.yaml": (G6.replace("lab: g6", "lab: g5"),
                                  "Pulumi.g6.yaml: gke-ml-labs:lab: 'g5' in the stack named g6: a stack named after a "
                                  "lab runs that lab; set lab: g6, or run g5 in a stack of its own (`pulumi stack init "
                                  "g5`, or g5-mine)"),
    "Pulumi.g6.yml": (None, "no stack file Pulumi.g6.yaml: Pulumi.g6.yml: Pulumi reads only Pulumi.<stack>.yaml (the "
                            "extension of Pulumi.yaml) and ignores it: rename it to Pulumi.g6.yaml"),
    "an empty --dir": (None, "no stack file Pulumi.g6.yaml in {folder} (it holds no Pulumi.<stack>.yaml at all)"),
}  # fmt: skip
# status reads only gcp:project, even from a stack file whose lab config is invalid: what the file itself
# cannot say (its syntax, its keys) leaves the proof incomplete; a valid file with a bad lab config does not.
STATUS_REFUSES = {"namespace typo", "duplicate key", "UTF-16", "configs:", "Pulumi.g6.yml"}


def bad_stack_folder(tmp_path: Path, case: str) -> Path:
    text, _ = BAD_INPUTS[case]
    folder = tmp_path / "stacks"
    folder.mkdir()
    if case == "Pulumi.g6.yml":
        (folder / "Pulumi.g6.yml").write_text(G6)
    elif text is not None:
        (folder / "Pulumi.g6.yaml").write_bytes(text if isinstance(text, bytes) else text.encode())
    return folder


def run_command(command: str, folder: Path, capsys) -> tuple[int, str]:
    from ops import preflight, status
    from ops.gcp import GcpClient

    nobody = GcpClient(token_source=lambda: "x", base_urls={"compute": "http://127.0.0.1:9"})  # never reached
    code = {
        "plan": lambda: plan_main(["g6", "--dir", str(folder)]),
        "estimate": lambda: estimate.main(["g6"], directory=folder),
        "preflight": lambda: preflight.main(["--stack", "g6"], client=nobody, directory=folder),
        "status": lambda: status.main(["--project", "lab-project", "--gpu-only"], client=nobody, directory=folder),
    }[command]()
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.mark.parametrize("command", ["plan", "estimate", "preflight"])
@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_every_bad_input_is_one_line_naming_file_and_key_and_a_non_zero_exit(tmp_path, capsys, case, command):
    folder = bad_stack_folder(tmp_path, case)
    code, out = run_command(command, folder, capsys)
    assert code == 2, out
    (line,) = out.strip().splitlines()
    assert BAD_INPUTS[case][1].format(folder=folder) in line
    assert "Traceback" not in out


@pytest.mark.parametrize("case", sorted(STATUS_REFUSES))
def test_status_names_a_stack_file_it_cannot_read_and_proves_nothing(tmp_path, capsys, monkeypatch, case):
    from ops import status

    monkeypatch.setattr(status.shutil, "which", lambda name: None)
    folder = bad_stack_folder(tmp_path, case)
    code, out = run_command("status", folder, capsys)
    assert code == 2 and "Traceback" not in out
    (line,) = [line for line in out.splitlines() if line.startswith("stack file ")]
    expected = BAD_INPUTS[case][1].removeprefix("no stack file Pulumi.g6.yaml: ")
    assert line == f"stack file {expected}" or line.startswith(f"stack file {expected}")


def test_the_engines_own_keys_are_not_refused_as_a_namespace_typo(tmp_path):
    # pulumi:disable-default-providers is read by the Pulumi engine itself (pulumi/pulumi#8829).
    text = G6 + "  pulumi:disable-default-providers:\n    - kubernetes\n"
    assert load_config("g6", directory=stack_file(tmp_path, text)).lab == "g6"


def test_a_key_without_a_namespace_is_the_projects_as_pulumi_reads_it(tmp_path):
    # Pulumi's workspace.stackConfigNamespacedWithProject: `zone:` is gke-ml-labs:zone.
    text = "config:\n  gcp:region: us-central1\n  lab: g6\n  zone: us-central1-b\n"
    cfg = load_config("g6", project="p", directory=stack_file(tmp_path, text))
    assert (cfg.lab, cfg.zone) == ("g6", "us-central1-b")


def test_a_utf8_byte_order_mark_is_read_as_pulumi_reads_it(tmp_path):
    (tmp_path / "Pulumi.g6.yaml").write_bytes(b"\xef\xbb\xbf" + G6.encode())
    assert load_config("g6", directory=tmp_path).project == "lab-project"


def test_several_problems_are_one_line_each(tmp_path):
    text = G6 + "  gke-ml-labs:gpu_disk_gb: 10\n  gke-ml-labs:release_channel: NIGHTLY\n"
    with pytest.raises(ConfigError) as e:
        load_config("g6", directory=stack_file(tmp_path, text))
    lines = str(e.value).splitlines()
    assert lines[0] == "Pulumi.g6.yaml: 2 problems in the lab config; nothing was created:"
    assert len(lines) == 3 and all(line.startswith("  - gke-ml-labs:") for line in lines[1:])
