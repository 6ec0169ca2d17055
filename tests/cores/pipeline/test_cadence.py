"""The save cadence: acknowledgements held per VC until its state is saved."""

from __future__ import annotations

from gpuhint.cores.pipeline.cadence import SaveCadence


def test_save_cadence_holds_acks_until_saved() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    assert not c.due()  # nothing held
    c.hold(["a"], "c/v")
    now[0] = 0.5
    c.hold(["b"], "c/v")
    assert not c.due() and acked == []  # oldest held 0.5 s < 1 s
    now[0] = 1.0
    assert c.due() and c.due_keys() == ["c/v"]
    assert c.saved() == 2
    assert acked == ["a", "b"] and c.held == 0 and not c.due()
    c.hold([], "c/v")  # an empty batch starts no clock
    now[0] = 5.0
    assert not c.due()


def test_save_cadence_is_per_vc_oldest_first() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    c.hold(["a1"], "c/a")
    now[0] = 0.6
    c.hold(["b1"], "c/b")
    c.hold(["a2"], "c/a")  # joins c/a's clock (started at 0)
    now[0] = 1.2
    assert c.due_keys() == ["c/a"] and c.keys() == ["c/a", "c/b"]
    assert c.saved(["c/a"]) == 2 and acked == ["a1", "a2"] and c.held == 1
    c.hold(["a3"], "c/a")  # a new clock for c/a, after c/b's
    now[0] = 1.6
    assert c.due_keys() == ["c/b"] and c.keys() == ["c/b", "c/a"]
    assert c.saved() == 2 and acked == ["a1", "a2", "b1", "a3"]


def test_save_cadence_drop_never_acks() -> None:
    acked: list[str] = []
    c: SaveCadence[str] = SaveCadence(acked.append, 0.0)
    c.hold(["a", "b"], "c/a")
    c.hold(["x"], "c/b")
    assert c.due()  # interval 0: every batch
    assert c.drop() == 3
    assert c.saved() == 0 and acked == []


def test_save_cadence_take_then_ack_leaves_later_items_held() -> None:
    acked: list[str] = []
    now = [0.0]
    c: SaveCadence[str] = SaveCadence(acked.append, 1.0, clock=lambda: now[0])
    c.hold(["a1", "a2"], "c/a")
    taken = c.take("c/a")  # the snapshot of c/a is being taken
    now[0] = 0.5
    c.hold(["a3"], "c/a")  # handled while it is compressed: a new clock
    assert c.ack(taken) == 2 and acked == ["a1", "a2"] and c.held == 1
    now[0] = 1.2
    assert not c.due()  # a3's clock started at 0.5
    now[0] = 1.5
    assert c.due_keys() == ["c/a"]


# -- big VCs: records split under the broker's limit ---------------------------------------
