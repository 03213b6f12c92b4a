"""A tiny BERT (2 layers, hidden 64, random weights) fine-tuned for sentence classification with
Lightning 2.x ``DDPStrategy``; ``--backend ddp`` or ``--backend smddp`` as in ``mnist_lightning``.

The tokenizer is a ``BertTokenizerFast`` built from a vocabulary file written here from the
training text: nothing is downloaded from the Hugging Face hub.
"""

import argparse
import json
import os
import tempfile

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import DDPStrategy
from torch.utils.data import DataLoader, TensorDataset
from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def load(channel):
    with open(os.path.join(channel, "text.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    words = sorted({w for r in rows for w in r["text"].split()})
    vocab = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\n".join(SPECIAL + words) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    enc = tokenizer([r["text"] for r in rows], padding="max_length", truncation=True,
                    max_length=16, return_tensors="pt")
    labels = torch.tensor([r["label"] for r in rows])
    return tokenizer, TensorDataset(enc["input_ids"], enc["attention_mask"], labels)


class TinyBert(pl.LightningModule):
    def __init__(self, vocab_size, lr):
        super().__init__()
        config = BertConfig(vocab_size=vocab_size, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=128,
                            max_position_embeddings=32, num_labels=2)
        self.model = BertForSequenceClassification(config)
        self.lr = lr
        self.losses = []

    def training_step(self, batch, batch_idx):
        ids, mask, labels = batch
        loss = self.model(input_ids=ids, attention_mask=mask, labels=labels).loss
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


def strategy_for(backend):
    if backend == "smddp":
        import smdistributed.dataparallel.torch.torch_smddp  # noqa: F401
        from pytorch_lightning.plugins.environments import LightningEnvironment

        env = LightningEnvironment()
        env.world_size = lambda: int(os.environ["WORLD_SIZE"])
        env.global_rank = lambda: int(os.environ["RANK"])
        num_nodes = int(os.environ["WORLD_SIZE"]) // int(os.environ["SM_NUM_GPUS"])
        return DDPStrategy(cluster_environment=env, process_group_backend="smddp",
                           accelerator="gpu"), num_nodes
    return DDPStrategy(process_group_backend="nccl"), len(os.environ["SM_HOSTS"].split(","))


def save_metrics(folder, **values):
    """What the example matrix judges, as a file in output.tar.gz: read from a file, it cannot be
    split the way mpirun's --tag-output may split a printed line."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.json"), "w") as f:
        json.dump(values, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["ddp", "smddp"], default="ddp")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--model-dir", default=os.environ.get("SM_MODEL_DIR", "/opt/ml/model"))
    parser.add_argument("--output-data-dir", default=os.environ.get("SM_OUTPUT_DATA_DIR", "/opt/ml/output/data"))
    parser.add_argument("--data-dir", default=os.environ.get("SM_CHANNEL_TRAINING", "data"))
    args = parser.parse_args()

    pl.seed_everything(0)
    tokenizer, dataset = load(args.data_dir)
    strategy, num_nodes = strategy_for(args.backend)
    # The strategy already names the accelerator under smddp (AWS's pattern); Lightning refuses both.
    accelerator = "auto" if args.backend == "smddp" else "gpu"
    trainer = pl.Trainer(accelerator=accelerator, devices=int(os.environ["SM_NUM_GPUS"]),
                         num_nodes=num_nodes, strategy=strategy, max_epochs=args.epochs,
                         enable_progress_bar=False, enable_checkpointing=False, logger=False,
                         enable_model_summary=False)
    model = TinyBert(tokenizer.vocab_size, args.lr)
    world_size = int(os.environ["WORLD_SIZE"])  # read before fit: LightningEnvironment.teardown deletes it
    trainer.fit(model, DataLoader(dataset, batch_size=args.batch_size, shuffle=True))
    if trainer.global_rank == 0:
        print(f"world_size={world_size} num_nodes={num_nodes}")
        print(f"first_loss={model.losses[0]:.4f}")
        print(f"last_loss={np.mean(model.losses[-5:]):.4f}")
        save_metrics(args.output_data_dir, first_loss=model.losses[0], last_loss=float(np.mean(model.losses[-5:])),
                     world_size=world_size, gpus_per_host=int(os.environ["SM_NUM_GPUS"]), torch=torch.__version__,
                     lightning=pl.__version__)
        model.model.save_pretrained(args.model_dir)
        tokenizer.save_pretrained(args.model_dir)


if __name__ == "__main__":
    main()
