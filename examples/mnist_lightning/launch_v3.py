"""Launch ``mnist_lightning`` with the SageMaker Python SDK v3 (``ModelTrainer``, ``Torchrun()``).

On SageMaker: ``python mnist_lightning/launch_v3.py`` (with AWS credentials and a role). On the
emulator (an environment with ``sagemaker>=3``):
``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch examples/mnist_lightning/launch_v3.py``.
The same ``train.py`` as the v2 launcher's ``ddp`` backend: Lightning 2.x ``DDPStrategy``,
``accelerator="gpu"``, ``devices=SM_NUM_GPUS``; v3's torchrun driver starts one rank per GPU.
"""

import sys
import tempfile
from pathlib import Path

from sagemaker.core.helper.session_helper import Session, get_execution_role
from sagemaker.core.training.configs import Compute, InputData, SourceCode
from sagemaker.train import ModelTrainer
from sagemaker.train.distributed import Torchrun

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from examples.data import generate

HERE = Path(__file__).resolve().parent
IMAGE = "763104351884.dkr.ecr.us-west-2.amazonaws.com/pytorch-training:2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker"


def main():
    session = Session()
    with tempfile.TemporaryDirectory() as tmp:  # generated data, uploaded by ModelTrainer
        channel = generate(Path(tmp) / "training")
        trainer = ModelTrainer(
            training_image=IMAGE,
            source_code=SourceCode(source_dir=str(HERE), entry_script="train.py"),
            compute=Compute(instance_type="ml.p4d.24xlarge", instance_count=2),
            distributed=Torchrun(),
            hyperparameters={"backend": "ddp"},
            role=get_execution_role(),
            base_job_name="mnist-lightning-v3",
            sagemaker_session=session,
        )
        trainer.train(input_data_config=[InputData(channel_name="training", data_source=str(channel))])
    print("model artifact:", trainer._latest_training_job.model_artifacts.s3_model_artifacts)


if __name__ == "__main__":
    main()
