"""The shipped ops, one folder each: ``fused_add/`` and ``philox/``.

Each folder's ``__init__`` registers the op(s); ``reference.py`` is the PyTorch
implementation (the fallback) and ``triton_kernels.py`` the Triton kernels and launchers,
imported only on the first Triton launch (the ops name their launchers as strings).
Re-exported by ``opreg_kernels``; this package does not re-export them, so that
``opreg_kernels.ops.fused_add`` stays the folder's module.
"""
