"""Stand-in for the SageMaker distributed data parallel library (SMDDP) on the CPU.

It stands for SMDDP 2.5.0 (the latest release in AWS's release notes, Oct 2024, shipped in the
PyTorch GPU DLCs) and enforces what AWS documents for that version (see
``torch/_emulated_backend.py`` for every check and its source; AWS's SMDDP documentation:
https://docs.aws.amazon.com/sagemaker/latest/dg/data-parallel.html and
https://docs.aws.amazon.com/sagemaker/latest/dg/data-parallel-modify-sdp-pt.html):

- ``smdistributed.dataparallel.torch.torch_smddp``: importing it registers the ``smddp``
  process-group backend (B2), a gloo group with SMDDP's documented and observed limits.
- The pre-1.4 API ``smdistributed.dataparallel.torch.distributed`` and
  ``smdistributed.dataparallel.torch.parallel.distributed.DistributedDataParallel`` (B3), still
  importable with the deprecation notice 1.4.0+ prints.

It is on ``PYTHONPATH`` only in hosts whose instance type has SMDDP in its image (GPU types; the
CPU DLCs do not ship it, so ``import smdistributed`` fails there as it would on SageMaker).

Not emulated: SMDDP's own AllReduce/AllGather algorithms and their speed, EFA, the SMDDP server on
``SMDATAPARALLEL_SERVER_ADDR:SMDATAPARALLEL_SERVER_PORT``, TensorFlow.
"""

__version__ = "2.5.0"
