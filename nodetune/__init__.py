"""nodetune: provision and tune GPU cluster nodes, then prove the fabric."""

__version__ = "0.1.0"
