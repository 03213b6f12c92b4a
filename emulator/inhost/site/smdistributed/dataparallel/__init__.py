"""Stand-in for the SageMaker distributed data parallel library (SMDDP) on the CPU.

Emulated (facts cite /work/shared/reference/sagemaker-job-lifecycle-and-smddp.md, Part B):

- ``smdistributed.dataparallel.torch.torch_smddp``: importing it registers the ``smddp``
  process-group backend (B2), a gloo group with SMDDP's documented limits enforced (B4, B5).
- The pre-1.4 API ``smdistributed.dataparallel.torch.distributed`` and
  ``smdistributed.dataparallel.torch.parallel.distributed.DistributedDataParallel`` (B3).

Not emulated: SMDDP's own AllReduce/AllGather algorithms and their speed, EFA, the SMDDP server on
``SMDATAPARALLEL_SERVER_ADDR:SMDATAPARALLEL_SERVER_PORT``, TensorFlow, instance-type checks.
"""

__version__ = "2.5.0"
