"""Where the lab's run-time faults plant stand-ins for hardware a container cannot have.

The lab inventory points ``check`` at the first two (``nodetune_kernel_log``,
``nodetune_rdma_sysfs``); the stand-in tools come first on the node's PATH.
"""

STANDIN_DIR = "/var/lib/nodetune-lab"
KMSG = f"{STANDIN_DIR}/kmsg"              # stands in for /dev/kmsg (the same record format)
RDMA_SYSFS = f"{STANDIN_DIR}/infiniband"  # stands in for /sys/class/infiniband
DATA_DIR = "/usr/local/share/nodetune-lab"  # what the stand-in tools print
DCGMI = "/usr/local/bin/dcgmi"
LSPCI = "/usr/local/bin/lspci"
IB_WRITE_BW = "/usr/local/bin/ib_write_bw"
# The bandwidth the stand-in ib_write_bw reports, in Gb/s (the stand-in NIC's).
IB_WRITE_BW_GBPS = f"{DATA_DIR}/ib_write_bw-gbps"
