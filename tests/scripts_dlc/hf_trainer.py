"""A Hugging Face job as the Hugging Face DLC runs it: ``transformers.Trainer`` on a ``datasets``
dataset, launched by torchrun (``torch_distributed``). The model is built from a config (no hub
download: hosts have no egress), tiny, and trained for a few steps; each rank reports what it saw."""

import json
import os

import datasets
import torch
import transformers
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


def main():
    config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=16, num_labels=2)
    model = BertForSequenceClassification(config)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 64, (64, 8), generator=gen).tolist()
    data = datasets.Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * 8] * 64,
                                       "labels": [i % 2 for i in range(64)]})
    args = TrainingArguments(output_dir=os.environ.get("SM_MODEL_DIR", "/tmp/out"), per_device_train_batch_size=4,
                             max_steps=2, logging_steps=1, save_strategy="no", report_to=[],
                             disable_tqdm=True, dataloader_num_workers=0)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    result = trainer.train()
    state = trainer.state
    print("HF " + json.dumps({"rank": int(os.environ.get("RANK", "0")), "world": args.world_size,
                              "device": str(args.device), "steps": state.global_step,
                              "loss": result.training_loss, "transformers": transformers.__version__,
                              "datasets": datasets.__version__}), flush=True)


if __name__ == "__main__":
    main()
