"""The /dev/shm mark (``nodetune_min_shm``): one reader for `check`'s software.shm and both
launchers' container checklists (nodetune.measure.shm.min_shm)."""

from __future__ import annotations

import pytest

from nodetune.ansible.inventory import Host
from nodetune.errors import InputError
from nodetune.measure.shm import DEFAULT_MIN_SHM, SHM_SOURCE, VAR_MIN_SHM, human, min_shm


@pytest.mark.parametrize(("raw", "want"), [
    ("1G", 1 << 30), ("512M", 512 << 20), ("512MiB", 512 << 20), ("1.5g", 3 << 29),
    ("1073741824", 1 << 30), (2048, 2048), (" 64M ", 64 << 20)])
def test_the_inventory_sets_the_mark(raw: object, want: int) -> None:
    assert min_shm(Host("n1", (), {VAR_MIN_SHM: raw})) == (want, VAR_MIN_SHM)


@pytest.mark.parametrize("unset", [{}, {VAR_MIN_SHM: None}, {VAR_MIN_SHM: ""}])
def test_unset_is_nccls_advice(unset: dict[str, object]) -> None:
    assert min_shm(Host("n1", (), unset)) == (DEFAULT_MIN_SHM, SHM_SOURCE)
    assert human(DEFAULT_MIN_SHM) == "1.0 GiB"


@pytest.mark.parametrize("bad", ["lots", "1X", "-1G", "1 G B"])
def test_a_bad_mark_is_bad_input_naming_host_and_variable(bad: str) -> None:
    with pytest.raises(InputError, match=VAR_MIN_SHM) as exc:
        min_shm(Host("gpu-a07", (), {VAR_MIN_SHM: bad}))
    assert exc.value.host == "gpu-a07"
