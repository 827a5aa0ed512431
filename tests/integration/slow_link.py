"""A lab node's fabric held at a low rate (`lab fault slow-link`) while a test needs a
measurement to stay open without burning the cores, and released at once when it no
longer does: only the rate limit is removed, any other fault on the node stays."""

from __future__ import annotations

from types import TracebackType

from nodetune.lab import faults as lab_faults


class SlowLink:
    """``with SlowLink(node, "1mbit") as link: ... link.release() ...`` (leaving the block
    releases it too, whatever happened in it), or :meth:`hold` and :meth:`release`."""

    def __init__(self, node: str, rate: str) -> None:
        self.node, self.rate, self.held = node, rate, False

    def hold(self) -> SlowLink:
        """The node's fabric limited to the rate from now on."""
        print(lab_faults.apply(self.node, "slow-link", rate=self.rate))
        self.held = True
        return self

    def __enter__(self) -> SlowLink:
        return self.hold()

    def release(self) -> None:
        """The fabric at full rate again (once; a second call does nothing)."""
        if self.held:
            self.held = False
            print("; ".join(lab_faults.clear_slow_link(self.node)) or "no rate limit left")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()
