"""Where the lab's run-time faults plant stand-ins for hardware a container cannot have.

The lab inventory points ``check`` at the first three (``nodetune_kernel_log``,
``nodetune_rdma_sysfs``, ``nodetune_pci_sysfs``); the stand-in tools come first on the
node's PATH.
"""

STANDIN_DIR = "/var/lib/nodetune-lab"
KMSG = f"{STANDIN_DIR}/kmsg"              # stands in for /dev/kmsg (the same record format)
RDMA_SYSFS = f"{STANDIN_DIR}/infiniband"  # stands in for /sys/class/infiniband
PCI_SYSFS = f"{STANDIN_DIR}/pci-devices"  # stands in for /sys/bus/pci/devices (links)
PCI_TREE = f"{STANDIN_DIR}/pci-tree"      # stands in for /sys/devices (the functions)
ENV_SAVED = f"{STANDIN_DIR}/environment.saved"  # /etc/environment as it was before global-env
DATA_DIR = "/usr/local/share/nodetune-lab"  # what the stand-in tools print
DCGMI = "/usr/local/bin/dcgmi"
LSPCI = "/usr/local/bin/lspci"
IB_WRITE_BW = "/usr/local/bin/ib_write_bw"
CHRONYC = "/usr/local/bin/chronyc"
NVIDIA_SMI = "/usr/local/bin/nvidia-smi"
OFED_INFO = "/usr/local/bin/ofed_info"
ENVIRONMENT = "/etc/environment"
# The bandwidth the stand-in ib_write_bw reports, in Gb/s (the stand-in NIC's).
IB_WRITE_BW_GBPS = f"{DATA_DIR}/ib_write_bw-gbps"
# The version the stand-in ofed_info prints (ofed-version's --ofed-version).
OFED_VERSION_FILE = f"{DATA_DIR}/ofed_info-version"
