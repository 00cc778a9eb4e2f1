"""The RCCL network plugin (aws-ofi-nccl or aws-ofi-rccl) and the libfabric it is built
against, checked to load with the oldest libfabric the recipe's sites bind."""
