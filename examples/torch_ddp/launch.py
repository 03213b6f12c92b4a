"""Launch ``torch_ddp`` as the SageMaker Python SDK would.

On SageMaker: ``python torch_ddp/launch.py [--distribution torch_distributed|pytorchddp]``
(with AWS credentials and a role). On the emulator:
``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch
examples/torch_ddp/launch.py [--distribution torch_distributed|pytorchddp]``.
Plain-torch DDP written for GPUs, under torchrun or under pytorchddp (mpirun + smddprun).
"""

import argparse
import sys
import tempfile
from pathlib import Path

import sagemaker
from sagemaker.pytorch import PyTorch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.data import generate

HERE = Path(__file__).resolve().parent
DISTRIBUTIONS = {"torch_distributed": {"torch_distributed": {"enabled": True}},
                 "pytorchddp": {"pytorchddp": {"enabled": True}}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--distribution", choices=sorted(DISTRIBUTIONS), default="torch_distributed")
    args = parser.parse_args()
    session = sagemaker.Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded to the job's S3 input
        channel = generate(Path(tmp) / "training")
        training = session.upload_data(str(channel), key_prefix="examples/torch_ddp/training")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role=sagemaker.get_execution_role(),
        framework_version="2.2.0",
        py_version="py310",
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        distribution=DISTRIBUTIONS[args.distribution],
        hyperparameters={},
        base_job_name="torch-ddp",
        sagemaker_session=session,
    )
    estimator.fit({"training": training})


if __name__ == "__main__":
    main()
