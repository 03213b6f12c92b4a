"""Launch ``mnist_single`` as the SageMaker Python SDK would.

On SageMaker: ``python mnist_single/launch.py``
(with AWS credentials and a role). On the emulator:
``python -m emulator launch examples/mnist_single/launch.py``.
One CPU host, plain torch, no distribution.
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


def main():
    parser = argparse.ArgumentParser()
    parser.parse_args()
    session = sagemaker.Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded to the job's S3 input
        channel = generate(Path(tmp) / "training")
        training = session.upload_data(str(channel), key_prefix="examples/mnist_single/training")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role=sagemaker.get_execution_role(),
        framework_version="2.2.0",
        py_version="py310",
        instance_type="ml.m5.xlarge",
        instance_count=1,
        hyperparameters={},
        base_job_name="mnist-single",
        sagemaker_session=session,
    )
    estimator.fit({"training": training})


if __name__ == "__main__":
    main()
