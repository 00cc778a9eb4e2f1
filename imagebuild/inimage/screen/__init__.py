"""screen: is this node healthy enough to run anything? One node's Tier-1 screen, in
seconds, with no rendezvous: a stuck node cannot stall its peers (AMD Primus's node_smoke
does the same: https://rocm.docs.amd.com/projects/primus/en/latest/02-user-guide/node-smoke-test-instruction.html).

Standard library only, but for the per-GPU probe (torch, in a subprocess of its own):

- node_facts.py: the node's name and fingerprint (kernel, driver, firmware, NICs)
- limits.py: RLIMIT_MEMLOCK and /dev/shm
- kernel_log.py: GPU errors in the kernel log (amdgpu, XGMI, RAS, NVIDIA Xid)
- gpu_processes.py: processes that already hold a GPU
- smi_latency.py: how long the SMI tool takes to answer (a wedged driver hangs it)
- links.py: Slingshot (hsn*) and InfiniBand links up
- gpu_probe.py: per GPU, in a subprocess killed at a hard timeout: bind, allocate, GEMM
- node_screen.py: every item, the doctor's too where the image's manifest is found, and
  the node's verdict; cli.py: ``python -m imagebuild_checks screen``

The host side (imagebuild screen: every node at once through SLURM, the fleet report and
the exclude list) is imagebuild.validate.fleet_screen.
"""
