"""Node images per Debian suite: names, and `lab image` option checks (no podman needed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from nodetune.cli import main
from nodetune.errors import InputError
from nodetune.lab import config as lab
from nodetune.lab import image


def test_every_suite_has_its_image_and_the_lab_runs_bookworm() -> None:
    assert [image.image_for(s) for s in lab.SUITES] == [
        "localhost/nodetune-node:bookworm", "localhost/nodetune-node:trixie"]
    assert lab.IMAGE == image.image_for(lab.SUITE) == "localhost/nodetune-node:bookworm"


def test_unknown_suite_is_bad_input() -> None:
    with pytest.raises(InputError, match="sid"):
        image.image_for("sid")


def test_base_image_needs_exactly_one_suite() -> None:
    res = CliRunner().invoke(main, ["lab", "image", "--base-image", "debian:13"])
    assert res.exit_code == 2
    assert "--suite" in res.output


def test_unknown_suite_option_is_a_usage_error() -> None:
    res = CliRunner().invoke(main, ["lab", "image", "--suite", "buster"])
    assert res.exit_code == 2
    assert "buster" in res.output
