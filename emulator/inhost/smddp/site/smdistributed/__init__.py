"""Stand-in for AWS's closed-source ``smdistributed`` package (sagemaker-cluster-emulator).

Only ``smdistributed.dataparallel`` (SMDDP) is emulated, on gloo over the CPU; see
``smdistributed.dataparallel``. ``smdistributed.modelparallel`` is not emulated.
"""
