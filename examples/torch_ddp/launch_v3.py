"""Launch ``torch_ddp`` with the SageMaker Python SDK v3 (``ModelTrainer``).

On SageMaker: ``python torch_ddp/launch_v3.py [--distributed torchrun|mpi]`` (with AWS credentials
and a role). On the emulator (an environment with ``sagemaker>=3``, e.g. ``nox -s tests_sdk3``'s):
``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch examples/torch_ddp/launch_v3.py
[--distributed torchrun|mpi]``. The same ``train.py`` as the v2 launcher: nccl, ``.cuda()``,
``DDP(device_ids=[local_rank])``; v3's drivers run it under ``torchrun`` or ``mpirun``.

With ``--distributed mpi`` the SDK's own MPI driver (3.27.0) starts ``-np <processes per node>``
ranks, not hosts x processes: they all run on algo-1 and algo-2 stays idle. That is what SageMaker
runs too; the emulator flags it.
"""

import argparse
import sys
import tempfile
from pathlib import Path

from sagemaker.core.helper.session_helper import Session, get_execution_role
from sagemaker.core.training.configs import Compute, InputData, SourceCode
from sagemaker.train import ModelTrainer
from sagemaker.train.distributed import MPI, Torchrun

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.data import generate

HERE = Path(__file__).resolve().parent
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"
DISTRIBUTED = {"torchrun": Torchrun, "mpi": MPI}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--distributed", choices=sorted(DISTRIBUTED), default="torchrun")
    args = parser.parse_args()
    session = Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded by ModelTrainer
        channel = generate(Path(tmp) / "training")
        trainer = ModelTrainer(
            training_image=IMAGE,
            source_code=SourceCode(source_dir=str(HERE), entry_script="train.py"),
            compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=2),
            distributed=DISTRIBUTED[args.distributed](),
            hyperparameters={"epochs": 2},
            role=get_execution_role(),
            base_job_name=f"torch-ddp-v3-{args.distributed}",
            sagemaker_session=session,
        )
        trainer.train(input_data_config=[InputData(channel_name="training", data_source=str(channel))])
    print("model artifact:", trainer._latest_training_job.model_artifacts.s3_model_artifacts)


if __name__ == "__main__":
    main()
