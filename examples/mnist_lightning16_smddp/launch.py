"""Launch ``mnist_lightning16_smddp`` as a 2022 SageMaker notebook did.

On SageMaker: ``python examples/mnist_lightning16_smddp/launch.py`` (AWS credentials and a role).
On the emulator: ``SAGEMAKER_EMULATOR_GPUS_PER_HOST=2 python -m emulator launch
examples/mnist_lightning16_smddp/launch.py`` (docker backend: torch 1.12.1 image, see README.md).
"""

from pathlib import Path

import sagemaker
from sagemaker.pytorch import PyTorch

HERE = Path(__file__).resolve().parent


def main():
    session = sagemaker.Session()
    training = session.upload_data(str(HERE / "data" / "training"),
                                   key_prefix="examples/mnist_lightning16_smddp/training")
    estimator = PyTorch(
        entry_point="train.py",
        source_dir=str(HERE / "code"),
        role=sagemaker.get_execution_role(),
        framework_version="1.12.1",
        py_version="py38",
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        distribution={"smdistributed": {"dataparallel": {"enabled": True}}},
        hyperparameters={"epochs": 2},
        base_job_name="mnist-lightning16-smddp",
        sagemaker_session=session,
    )
    estimator.fit({"training": training})


if __name__ == "__main__":
    main()
