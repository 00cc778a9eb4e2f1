"""doctor: does this node fit this image? A preflight in seconds, no GPU kernels.

Standard library only, like the rest of the in-image package: the same probes run on the
host (``imagebuild doctor``) and inside the image (``python -m imagebuild_checks doctor``).
Every probe reads files under a root directory (default "/"), so tests point it at trees
shaped like /sys and /proc of an MI250X, MI300A or MI300X node.

- finding.py: one item's verdict (pass, warn, fail, skip), its reason and its fix
- needs.py: what the image needs, from its manifest
- node.py: what the node has, from /sys and /proc under the root
- elf.py, libraries.py: ELF dynamic sections and symbol versions, and library lookup
- one module per item: driver, gfx, xnack, libfabric, rocm_binds, smi, rccl_p2p, plugin_release,
  tuners, miopen; runtime.py: the container runtime and the job's nodes they depend on
- run.py: all items in order; cli.py: the in-image command
- before_checks.py: the in-image runner's first step (validate stops on a failed item)
"""
