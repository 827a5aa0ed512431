"""`nodetune check --help`'s epilog: examples, every check and what it reads, exit codes,
and the options the verbs share (Slurm, vault, reports)."""

from __future__ import annotations

from nodetune.cli import input_opts, report_opts, slurm_opts

EPILOG = f"""\b
Examples:
  nodetune check inventory/prod
  nodetune check inventory/prod --limit 'gpu-a0*' --json > check.json
  nodetune check inventory/gpu-local          # ansible_connection: local

\b
Checks (each: pass, warn, fail, skip or unknown: its tool hung or crashed; with
measured and expected values, the source of the expectation and, when it fails, the
action: none < re-run < reset-gpu < restart-fabric-manager < reboot < service):
  gpu.count        GPUs the driver sees = nodetune_expected_gpus; none missing from the PCI bus
  gpu.driver       running driver = nvidia_driver_version (warns if only the role default pins it)
  gpu.persistence  persistence mode on (nvidia_driver_persistenced)
  gpu.ecc          Azure NHC limits: no pending/failed row remap, <= 512 remapped rows,
                   no SRAM uncorrectable, SRAM correctable <= 10000, DRAM <= 20000000
  gpu.pcie         link gen and width at their maximum
  gpu.clocks       no HW slowdown / HW thermal / power brake (SW thermal warns)
  gpu.nvlink       every NVLink up, same count on every GPU
  gpu.retired_pages SBE+DBE retired pages < 63, none pending, DBE <= 15 (DCGM's limits);
                   GPUs that remap rows instead (A100, H100, H200): skip
  software.torch   nodetune_python imports torch (skipped when nodetune_python is unset)
  software.cuda    torch's CUDA <= the CUDA version the driver supports
  software.nccl    torch.distributed.is_nccl_available(), with NCCL's version
  software.shm     free space in /dev/shm >= nodetune_min_shm (default 1G: NCCL asks --shm-size=1g)
  fabric.rdma[D/P] RDMA port ACTIVE/LinkUp at nodetune_expected_rdma_rate_gbps
                   (default: the node's fastest port)
  fabric.mtu[IF]   MTU = what net_mtu_interfaces sets (drift since the last apply); a request
                   that selects no interface here fails (warns: net_mtu_allow_absent_nics)
  fabric.nccl[K]   NCCL_SOCKET_IFNAME / NCCL_IB_HCA in the node's /etc/nccl.conf and in the
                   inventory name interfaces / RDMA ports the node has, by NCCL's rules (^ = and
                   prefixes, NAME:PORT) (warns: nccl_config_allow_absent_nics)
  fabric.sysctl[K] sysctl = net_sysctl_settings + _overrides + congestion control
  fabric.roce[IF]  trust/PFC/RDMA-CM ToS = what roce_qos sets
  fabric.roce_cc[IF] DCQCN reaction and notification points on (ecn/roce_rp, roce_np) for
                   roce_qos_ecn_priorities; --read-ppcc: the PPCC register too (mlxreg --get)
  gpu.xid          no Xid in the kernel log since boot or the node's last clean gpu.xid that
                   NVIDIA's Xid catalogue says needs a GPU reset, reboot or RMA (app Xids warn)
  gpu.sxid         no fatal NVSwitch SXid in the kernel log over gpu.xid's window (non-fatal
                   warns; DCGM's NVSwitch health watch); no NVSwitch: skip
  gpu.imex         nvidia-imex-ctl -N -j: IMEX domain UP, every node READY (DOWN fails);
                   no nvidia-imex-ctl: skip ("no IMEX on this node")
  gpu.fabric       NVLink fabric Completed/Success; NVSwitch boards: nvidia-fabricmanager
                   active at the driver's version (Fabric Manager User Guide)
  gpu.kernel_module module flavour = nvidia_driver_kernel_modules; nvidia_peermem loaded
                   where the node has RDMA ports (nvidia_driver_peermem_enabled)
  fabric.rdma_errors[D/P] sysfs port error counters < 10 (infiniband-diags ibcheckerrs);
                   no link_downed / link_error_recovery since the node's previous check
  gpu.nvlink_errors[N] per link since the node's previous check: no new replay/recovery
                   error, CRC < nodetune_nvlink_crc_errors_per_s (default 100/s; fewer warn)
                   (DCGM's NVLink health limits); no NVLink: skip
  dcgm.diag        dcgmi diag -r --dcgm-level -j: every test passes (skips without DCGM)
  gpu.pcie_acs     no ACS SrcValid+ on a PCIe bridge between a GPU and a NIC (NCCL guide)
  node.time_sync   clock offset from chrony (chronyc -n -c tracking) or systemd-timesyncd
                   (timedatectl timesync-status) <= nodetune_max_clock_offset_ms (default
                   100 ms); not synchronised warns; neither tool: skip
  node.global_env  NCCL_*/CUDA_* set host-wide (/etc/environment, /etc/profile.d/*.sh, the
                   systemd manager environment): an NCCL value that differs from
                   /etc/nccl.conf or the inventory's nccl_config fails (the environment wins
                   over nccl.conf); any other warns
  fleet.versions   with 2+ nodes: kernel, driver, CUDA, GPU VBIOS, torch, NCCL, HCA
                   firmware and OFED/DOCA agree with the other nodes (a node off the
                   majority warns, naming its value and theirs); HCA firmware other than
                   nodetune_expected_firmware fails (one node too); a node's GPUs on
                   different VBIOS warn
  container.*      with --image: the image is on the node (or pulled: container.image), and
                   its container, started as validate --image starts it, has /dev/shm >=
                   nodetune_min_shm, the node's RDMA devices and libibverbs (where it has
                   RDMA), torch, and the node's NCCL (container.shm/rdma/libibverbs/torch/nccl)
  fabric.rdma_bw[D] with --rdma-peer: ib_write_bw per ACTIVE port (and --use_cuda) >= 0.9 x
                   the port rate (Azure NHC check_ib_bw_gdr: 180 Gb/s on HDR 200)
  gpu.allreduce    nodes with >= 2 GPUs: an all_reduce across them (validate's worker, one
                   rank per GPU, 64M up to the profile's size); no wrong value, busbw at the
                   largest size >= nodetune_check_min_busbw_gbps or the profile's pass mark
                   (Azure NHC 8x H200 431, 8x H100 460 at 16G; 8x A100 228 at 8G; 4x H200
                   NV18 326.6 at 4G, 0.9 x nccl-tests measured)
  nccl.effective   the same run's NCCL INIT,ENV log: every NCCL_* value nccl_config and
                   nodetune_env set was used by NCCL (fails naming the value NCCL used and
                   its source; warns where NCCL logged no ENV line)
  with --sample DURATION, each node read once a second for the window (read-only):
  gpu.slowdown[N]  HW slowdown/thermal/power brake in < 60% of the samples (GPUd's rule; any
                   warns), with power draw min/median/max
  pcie.flap[DEV]   no PCIe link speed/width change while the GPU is busy (sysfs links of HCAs
                   have no busy signal: a change warns)
  fabric.rdma_window[D/P] no port state change, no link_downed/link_error_recovery rise
  node.pcie_aer_window, gpu.nvlink_window[N]  node.pcie_aer's and gpu.nvlink_errors' limits
                   over the window
Without --sample the counters count from the node's previous check; the report gives that
check's time ("window") and the sampled window's start, length and samples.
Expectations are the roles' defaults under the inventory's group_vars/host_vars,
as `nodetune apply` would use them. Hosts: those of gpu_nodes (or
-e nodetune_hosts=GROUP) under --limit, as for every verb; a missing or
empty group is refused (exit 2).

\b
Inventory variables read (besides the roles'):
  nodetune_expected_gpus            GPUs each node must have
  nodetune_min_shm                  smallest /dev/shm, e.g. 1G (default 1G)
  nodetune_expected_rdma_rate_gbps  rate every RDMA port must reach, e.g. 400
  nodetune_python                   the node's python with torch
  nodetune_check_min_busbw_gbps     one-node all_reduce pass mark (GB/s at the largest size)
  nodetune_check_profile            one-node profile by name (default: by GPU model and count)
  nodetune_check_sizes              one-node all_reduce sizes, e.g. 64M:16G
  nodetune_max_clock_offset_ms      node.time_sync's limit in ms (default 100)
  nodetune_env                      environment for the all_reduce (NCCL_*)
  nodetune_kernel_log               kernel log source, /dev/kmsg format (default /dev/kmsg)
  nodetune_rdma_sysfs               RDMA sysfs class dir (default /sys/class/infiniband)
  nodetune_pci_sysfs                PCI devices dir for GPUs' AER (default /sys/bus/pci/devices)
  nodetune_hca_pcie_speed_fails     HCA PCIe link below max speed fails (default false: warns)
  nodetune_pcie_aer_correctable_per_hour  correctable AER errors/h per function to warn (60)
  nodetune_expected_firmware        HCA firmware (fw_ver) every HCA runs, e.g. 28.43.2026, or a
                                    mapping of HCA names (globs) to versions
  nodetune_nvlink_crc_errors_per_s  NVLink CRC errors/s on a link that fail (100, DCGM's)
  ansible_python_interpreter        python that runs the probe (default python3)

\b
--launcher slurm: every node checks itself (nodetune-healthcheck --report, from
the slurm_healthcheck role) in one srun step of one exclusive salloc of the
nodes, run from nodetune_slurm_controller; no SSH to the nodes; the same report.
With --image, the container.* checks follow in the same allocation, in the
image through pyxis or Slurm's OCI support (nodetune_container_runtime).
--drain drains no node for the image's faults (container.*): such a node is
skipped, saying so; a node's own faults in the same run still drain it.

\b
Exit: 0 no check failed (warnings allowed), 1 a check failed, 2 bad input
(nothing is contacted), 3 a node could not be reached or probed, 4 a node timed out,
5 nothing failed but a check could not be assessed (not drained without --drain-unknown).

{slurm_opts.HELP}
{slurm_opts.BUSY_HELP}
{input_opts.HELP}
{report_opts.HELP}"""
