"""Launch ``bert_lightning`` as the SageMaker Python SDK would.

On SageMaker: ``python bert_lightning/launch.py [--backend ddp|smddp]``
(with AWS credentials and a role). On the emulator:
``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch
examples/bert_lightning/launch.py [--backend ddp|smddp]``.
A tiny random-weight BERT with Lightning 2.x ``DDPStrategy``: ``ddp`` on ml.g5.12xlarge, ``smddp`` on
ml.p4d.24xlarge (the SageMaker data parallelism library supports ml.p4d.24xlarge and
ml.p4de.24xlarge, not g5: AWS SageMaker Developer Guide, "Supported frameworks, AWS Regions, and
instances types" of the SMDDP library).
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
DISTRIBUTIONS = {"ddp": {"torch_distributed": {"enabled": True}},
                 "smddp": {"smdistributed": {"dataparallel": {"enabled": True}}}}
INSTANCE_TYPES = {"ddp": "ml.g5.12xlarge", "smddp": "ml.p4d.24xlarge"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=sorted(DISTRIBUTIONS), default="ddp")
    args = parser.parse_args()
    session = sagemaker.Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded to the job's S3 input
        channel = generate(Path(tmp) / "training")
        training = session.upload_data(str(channel), key_prefix="examples/bert_lightning/training")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE),
        role=sagemaker.get_execution_role(),
        framework_version="2.2.0",
        py_version="py310",
        instance_type=INSTANCE_TYPES[args.backend],
        instance_count=2,
        distribution=DISTRIBUTIONS[args.backend],
        hyperparameters={"backend": args.backend},
        base_job_name="bert-lightning",
        sagemaker_session=session,
    )
    estimator.fit({"training": training})


if __name__ == "__main__":
    main()
