"""Topologies in code and in TOML files; bad input names the line or the broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from multihop import ges

EXAMPLES = Path(ges.__file__).parent / "examples"


def test_build_in_code() -> None:
    t = ges.Topology(levels=3)
    t.add_broker("1.1.1.1", core=0)
    t.add_broker("1.1.1.2")
    t.add_broker("1.2.1.1")
    g = t.add_gateway("1.1.1.2", "1.1.1.1")
    assert (str(g.a), str(g.b), g.level, g.cost) == ("1.1.1.1", "1.1.1.2", 0, 0)
    g2 = t.add_gateway("1.1.1.1", "1.2.1.1", cost=3)
    assert g2.level == 2 and g2.cost == 3
    assert t.gatekeepers() == {1: set(), 2: {"1.1.1.1", "1.2.1.1"}, 3: set()}
    assert sorted(map(str, t.neighbours("1.1.1.1"))) == ["1.1.1.2", "1.2.1.1"]
    back = ges.Topology.loads(t.to_toml())
    assert back.brokers == t.brokers and back.gateways == t.gateways


def test_bad_topologies_in_code() -> None:
    t = ges.Topology()
    t.add_broker("1.1.1.1")
    with pytest.raises(ges.TopologyError, match="duplicate address"):
        t.add_broker("1.1.1.1")
    with pytest.raises(ges.TopologyError, match="unknown broker 1.1.1.9"):
        t.add_gateway("1.1.1.1", "1.1.1.9")
    with pytest.raises(ges.TopologyError, match="block limit"):
        t.add_broker("1.1.1.99")
    with pytest.raises(ges.TopologyError, match="needs 4"):
        t.add_broker("1.1.1")
    t.add_broker("1.1.1.2")
    t.add_gateway("1.1.1.1", "1.1.1.2")
    with pytest.raises(ges.TopologyError, match="duplicate"):
        t.add_gateway("1.1.1.2", "1.1.1.1")
    with pytest.raises(ges.TopologyError, match="two different brokers"):
        t.add_gateway("1.1.1.2", "1.1.1.2")
    t.add_broker("1.1.1.3")
    with pytest.raises(ges.TopologyError, match="cost must be"):
        t.add_gateway("1.1.1.1", "1.1.1.3", cost=-2)
    with pytest.raises(ges.TopologyError, match="levels must be"):
        ges.Topology(levels=0)


@pytest.mark.parametrize(
    "text, line, words",
    [
        ('levels = 3\n[[broker]]\naddress = "1.1.1.1"\n[[broker]]\naddress = "1.1.1.1"\n', 4, ["duplicate address"]),
        ('[[broker]]\naddress = "1.1.1.1"\n\n[[gateway]]\na = "1.1.1.1"\nb = "1.1.1.7"\n', 4, ["unknown broker 1.1.1.7"]),
        ('[[broker]]\naddress = "1.1.1.70"\n', 1, ["block limit", "part 4"]),
        ('[[broker]]\naddress = "1.1.1"\n', 1, ["needs 4"]),
        ("[[broker]]\ncore = 1\n", 1, ["without an address"]),
        ('[[broker]]\naddress = "1.1.1.1"\ncolour = "red"\n', 1, ["unknown key 'colour'"]),
        ("levels = 3\nbrokers = []\n", 2, ["unknown key 'brokers'"]),
        ("levels = 0\n", 1, ["levels must be"]),
        ('[[broker]]\naddress = "1.1.1.1"\n[[broker]]\naddress = "1.1.1.2"\n[[gateway]]\na = "1.1.1.1"\n', 5, ["both ends"]),
        (
            '[[broker]]\naddress = "1.1.1.1"\n[[broker]]\naddress = "1.1.1.2"\n[[gateway]]\na = "1.1.1.1"\nb = "1.1.1.2"\ncost = -1\n',
            5,
            ["cost must be"],
        ),
    ],
)
def test_malformed_topology_files_name_the_line(tmp_path: Path, text: str, line: int, words: list[str]) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    with pytest.raises(ges.TopologyError) as e:
        ges.Topology.load(f)
    msg = str(e.value)
    assert msg.startswith(f"{f}:{line}:"), msg
    for w in words:
        assert w in msg


def test_not_toml_and_missing_file(tmp_path: Path) -> None:
    f = tmp_path / "x.toml"
    f.write_text("[[broker]\naddress = 1\n")
    with pytest.raises(ges.TopologyError, match="not valid TOML.*line 1"):
        ges.Topology.load(f)
    with pytest.raises(ges.TopologyError, match="no such topology file"):
        ges.Topology.load(tmp_path / "missing.toml")


def test_example_files_load() -> None:
    for f in EXAMPLES.glob("*.toml"):
        t = ges.Topology.load(f)
        assert t.brokers and t.gateways, f


def test_shipped_topologies_load_by_name_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Topology.example(name)`` finds the package's files whatever the current directory; an unknown name
    is an error that lists the shipped ones."""
    monkeypatch.chdir(tmp_path)
    assert len(ges.Topology.example("paper_fig3").brokers) == 78
    for name in ("paper_fig5", "paper_fig14", "paper_fig20"):
        assert ges.Topology.example(name).brokers
    with pytest.raises(ges.TopologyError, match="paper_fig14, paper_fig20, paper_fig3, paper_fig5"):
        ges.Topology.example("fig5")


PLACED = """
levels = 2
system = "lab"

[[broker]]
address = "1.1.1"
runtime = "hosta"

[[broker]]
address = "1.1.2"
core = 1
runtime = "hostb"

[[gateway]]
a = "1.1.1"
b = "1.1.2"
"""


def test_a_topology_placed_on_runtimes_reads_and_writes_back() -> None:
    """``system`` and a ``runtime`` per broker (a system spread over a fabric's runtimes) survive a round trip."""
    t = ges.Topology.loads(PLACED, "placed.toml")
    assert t.placed and t.system == "lab" and t.runtimes() == ["hosta", "hostb"]
    assert t.runtime_of("1.1.2") == "hostb" and t.brokers[ges.Address("1.1.2", 2)].core == 1
    back = ges.Topology.loads(t.to_toml())
    assert back.system == "lab" and {str(a): b.runtime for a, b in back.brokers.items()} == {"1.1.1": "hosta", "1.1.2": "hostb"}
    assert back.copy().system == "lab"
    assert not ges.Topology.example("quickstart").placed


@pytest.mark.parametrize(
    "text,words",
    [
        (PLACED.replace('system = "lab"\n', ""), ["must name its system", 'system = "..."']),
        (PLACED.replace('runtime = "hosta"\n', ""), ["1.1.1 name no runtime", "place every broker"]),
        (PLACED.replace('runtime = "hosta"', 'runtime = "host/a"'), ["placed.toml:5", "broker 1.1.1", "runtime must be", "'host/a'"]),
        (PLACED.replace('system = "lab"', 'system = "a@b"'), ["placed.toml:3", "system must be", "'a@b'"]),
        (PLACED.replace('system = "lab"', "system = 7"), ["placed.toml:3", "system must be", "7"]),
    ],
    ids=["no-system", "half-placed", "bad-runtime", "bad-system", "system-not-text"],
)
def test_bad_placements_are_named(text: str, words: list[str]) -> None:
    with pytest.raises(ges.TopologyError) as e:
        ges.Topology.loads(text, "placed.toml")
    for w in words:
        assert w in str(e.value), str(e.value)
