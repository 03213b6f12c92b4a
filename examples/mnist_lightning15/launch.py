"""Launch ``mnist_lightning15`` as the SageMaker Python SDK would.

On SageMaker: ``python mnist_lightning15/launch.py [--backend ddp|smddp]``
(with AWS credentials and a role). On the emulator:
``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch
examples/mnist_lightning15/launch.py [--backend ddp|smddp]``.
Lightning 1.5 ``DDPPlugin``; builds ``wheels/`` (the repacked wheel, see README.md) first.
"""

import argparse
import sys
import tempfile
from pathlib import Path

import sagemaker
from sagemaker.pytorch import PyTorch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.data import generate
from examples.mnist_lightning15.repack_wheel import ensure as ensure_wheel

HERE = Path(__file__).resolve().parent
DISTRIBUTIONS = {"ddp": {"torch_distributed": {"enabled": True}},
                 "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=sorted(DISTRIBUTIONS), default="ddp")
    args = parser.parse_args()
    ensure_wheel()  # wheels/ ships with source_dir; requirements.txt finds it there
    session = sagemaker.Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded to the job's S3 input
        channel = generate(Path(tmp) / "training")
        training = session.upload_data(str(channel), key_prefix="examples/mnist_lightning15/training")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role=sagemaker.get_execution_role(),
        framework_version="2.2.0",
        py_version="py310",
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        distribution=DISTRIBUTIONS[args.backend],
        hyperparameters={"backend": args.backend},
        base_job_name="mnist-lightning15",
        sagemaker_session=session,
    )
    estimator.fit({"training": training})


if __name__ == "__main__":
    main()
