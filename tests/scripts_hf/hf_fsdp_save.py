"""The Hugging Face docs' FSDP fine-tuning path on SageMaker, as users write it: ``Trainer`` with
``fsdp="full_shard auto_wrap"``, checkpoints every 2 steps to /opt/ml/checkpoints (synced to the
job's checkpoint S3 URI), ``save_model`` to SM_MODEL_DIR (a FULL_STATE_DICT gather with
``offload_to_cpu`` and ``rank0_only``, accelerate's default).

Run twice with the same checkpoint location, as a spot-interrupted job is restarted: the first run
(no checkpoint yet) trains 4 steps and saves ``trained/``; the second finds the checkpoints SageMaker
restored into every host's /opt/ml/checkpoints, resumes from the last one (``resume_from_checkpoint
=True``) for 2 more steps and saves ``resumed/``. (Within one job a resume fails on algo-2, here as
on SageMaker: each instance's /opt/ml/checkpoints is its own disk, and rank 0 wrote the model.)

Each rank writes, for the test's oracle, the logits its FSDP model gives on a fixed input after
training (every rank runs the forward: FSDP's all-gathers need them all). A tiny BERT from its
config (no hub download: hosts have no egress)."""

import json
import os

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

MODEL_DIR = os.environ.get("SM_MODEL_DIR", "/opt/ml/model")
CHECKPOINTS = "/opt/ml/checkpoints"
RANK = int(os.environ.get("RANK", "0"))


class Tokens(torch.utils.data.Dataset):
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 64, (64, 8), generator=gen)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(8, dtype=torch.long),
                "labels": torch.tensor(i % 2)}


def arguments(steps: int) -> TrainingArguments:
    return TrainingArguments(output_dir=CHECKPOINTS, per_device_train_batch_size=4, max_steps=steps,
                             save_strategy="steps", save_steps=2, logging_steps=1, report_to=[],
                             disable_tqdm=True, dataloader_num_workers=0, learning_rate=1e-2,
                             fsdp="full_shard auto_wrap",
                             fsdp_config={"transformer_layer_cls_to_wrap": ["BertLayer"]})


def logits(trainer: Trainer, name: str) -> None:
    """This rank's logits on a fixed input, from the trained FSDP model, for the test's oracle."""
    probe = torch.arange(16).reshape(2, 8) % 64
    model = trainer.model_wrapped
    model.eval()
    with torch.no_grad():
        out = model(input_ids=probe.to(trainer.args.device),
                    attention_mask=torch.ones_like(probe).to(trainer.args.device)).logits
    with open(os.path.join(MODEL_DIR, f"{name}-rank-{RANK}.json"), "w") as f:
        json.dump({"rank": RANK, "logits": out.cpu().tolist(), "step": trainer.state.global_step,
                   "losses": {e["step"]: e["loss"] for e in trainer.state.log_history if "loss" in e}}, f)


def main() -> None:
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    restarted = os.path.isdir(CHECKPOINTS) and any(n.startswith("checkpoint-") for n in os.listdir(CHECKPOINTS))
    name, steps = ("resumed", 6) if restarted else ("trained", 4)
    torch.manual_seed(1 if restarted else 0)  # another initialisation on restart: what resume loads replaces it
    trainer = Trainer(model=BertForSequenceClassification(config), args=arguments(steps), train_dataset=Tokens())
    trainer.train(resume_from_checkpoint=restarted)
    trainer.save_model(os.path.join(MODEL_DIR, name))
    logits(trainer, name)


if __name__ == "__main__":
    main()
