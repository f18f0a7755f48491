"""`make lab-local LAB=g4` as a test: g4's benchmark, unchanged (`python -m benchmarks g4 --outputs FILE`),
after the lab's real `pulumi up`, on a local cluster whose GPU node is the real one: the real Trainer v2.3.0
and JobSet 0.12.0 controllers make the pods, the real kubelet runs them in the PyTorch stand-in (Debian's
CPU torch), and the two ranks rendezvous over gloo through JobSet's headless Service and CoreDNS.

Every figure is read from what ran: the ranks' own log lines, the Job's completion, the pods' deletion."""

from __future__ import annotations

import json

from benchmarks.harness import load_result
from benchmarks.labs.g4 import G4Result, parse_log
from localcluster import bench, nodes


def test_g4s_two_ranks_rendezvous_for_real_and_the_report_says_what_stood_in(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("g4")  # short: the kubelet's Unix sockets live under it
    out = tmp_path / "out"
    code = bench.run("g4", out, 1.0, ["--settle", "5"], folder=tmp_path / "bench", real_node=True)
    (folder,) = out.iterdir()
    result = load_result(G4Result, folder)
    assert code == 0, f"g4 did not pass on the real node: {[(c.name, c.evidence) for c in result.checks if not c.passed]}"

    # The ranks' own lines, as the pods wrote them: world size 2 over gloo, the master by its DNS name.
    logs = json.loads((folder / "recording.json").read_text())["logs"]
    ranks = sorted((r for r in (parse_log(pod, text) for pod, text in logs.items()) if r), key=lambda r: r.rank)
    assert [(r.rank, r.world_size, r.backend, r.cuda) for r in ranks] == [(0, 2, "gloo", False), (1, 2, "gloo", False)]
    assert {r.master for r in ranks} == {f"{result.job}-node-0-0.{result.job}:29500"}
    assert [r.all_reduce_sum for r in ranks] == [3.0, 3.0]  # 1 + 2
    assert result.nodes_used == [nodes.REAL_NODE_NAME]

    simulation = result.meta.simulation
    assert simulation is not None
    real = " ".join(simulation.real)
    assert "trainer v2.3.0 controller manager" in real and "jobset v0.12.0 controller manager" in real
    assert f"{nodes.REAL_NODE_NAME}: kubelet and kube-proxy" in real
    simulated = " ".join(simulation.simulated)
    assert "Debian 12's CPU build of PyTorch 1.13.1 with gloo" in simulated
    assert "no nvidia-smi" in simulated
