"""Offline GEMM and RCCL tuning: find the problems a training step runs, tune them in the
image, bundle the results with what they are valid for, apply and verify them.

Conventions: a GEMM problem is written the way ``hipblaslt-bench -m -n -k --transA --transB``
takes it (column-major BLAS terms). PyTorch computes a row-major ``out = mat1 @ mat2`` as the
column-major ``out^T = mat2^T @ mat1^T``, so hipBLASLt's m is out's columns, n is out's rows.
"""
