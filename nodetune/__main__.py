"""`python -m nodetune`: the same as the `nodetune` command."""

from nodetune.cli import main

main()
