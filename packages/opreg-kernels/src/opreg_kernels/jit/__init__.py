"""Triton kernels and their launchers.

Every module in this package imports Triton at the top, so nothing outside it
imports them eagerly: an op names its launcher as ``"module:function"`` and the
module is loaded on the op's first Triton launch.
"""
