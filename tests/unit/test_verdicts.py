from nodetune.verdicts import NodeState, NodeVerdict, worst_first


def test_worst_first_orders_bad_then_unreachable_then_unresolved_then_good() -> None:
    verdicts = {
        "a": NodeVerdict("a", NodeState.GOOD),
        "b": NodeVerdict("b", NodeState.UNRESOLVED, "no good partner left"),
        "c": NodeVerdict("c", NodeState.BAD, "busbw 0.02 < 0.05 GB/s with a (good)"),
        "d": NodeVerdict("d", NodeState.UNREACHABLE, "ssh: connection refused"),
        "e": NodeVerdict("e", NodeState.BAD, "check mtu: eth1 1500, expected 9000"),
    }
    assert [v.node for v in worst_first(verdicts)] == ["c", "e", "d", "b", "a"]


def test_to_dict_is_the_report_shape() -> None:
    v = NodeVerdict("n1", NodeState.BAD, "slow", partners=("n2", "n3"), busbw_gbps=0.02)
    assert v.to_dict() == {"verdict": "bad", "reason": "slow", "partners": ["n2", "n3"],
                           "busbw_gbps": 0.02}
