"""hipBLASLt built from source for the recipe's GPU targets, the one libhipblaslt torch and
hipblaslt-bench load, with the offline GEMM tuning kit."""
