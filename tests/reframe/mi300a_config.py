# A ReFrame configuration of one MI300A partition, for dry runs of reframe-checks/ against
# CSCS's checks: Beverin's mi300 partition as CSCS's config/systems/beverin.py declares it
# (slurm + srun, features ce/gpu/amdgpu, 4 gfx942 devices, -pmi300), plus the processor
# that file leaves to auto-detection: 4 MI300A of 24 Zen 4 cores each (AMD's figures), 2
# hardware threads per core; the check divides by it to size --cpus-per-task.
site_configuration = {
    "systems": [{
        "name": "beverin",
        "descr": "a test configuration of Beverin's MI300A partition",
        "hostnames": [".*"],
        "modules_system": "nomod",
        "partitions": [{
            "name": "mi300",
            "descr": "MI300A nodes",
            "scheduler": "slurm",
            "launcher": "srun",
            "environs": ["builtin"],
            "features": ["ce", "gpu", "amdgpu"],
            "access": ["-pmi300"],
            "devices": [{"type": "gpu", "arch": "gfx942", "num_devices": 4}],
            "processor": {"num_cpus": 192, "num_cpus_per_core": 2},
        }],
    }],
    "environments": [{"name": "builtin", "cc": "cc", "cxx": "", "ftn": ""}],
}
