"""Kernels shared by platform plugins, one subpackage per toolchain.

Core never imports these itself: a platform that has the toolchain (e.g. Triton on CUDA,
ROCm or XPU) registers their functions as providers of the core ops.
"""
