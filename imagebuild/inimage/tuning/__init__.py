"""Offline GEMM tuning where the training runs: the problems of a step (shapes), tuning them
(gemm), the bundle that records what they are valid for, and whether it takes effect (verify).

Conventions: a GEMM problem is written the way ``hipblaslt-bench -m -n -k --transA --transB``
takes it (column-major BLAS terms). PyTorch computes a row-major ``out = mat1 @ mat2`` as the
column-major ``out^T = mat2^T @ mat1^T``, so hipBLASLt's m is out's columns, n is out's rows.
"""
