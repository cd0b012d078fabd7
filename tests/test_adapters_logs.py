"""The monitor inside the real trainers (Lightning, Hugging Face), and the loss logs they and the user write
(CSV, trainer_state.json, TensorBoard) read back and judged by ``nqf compare --log``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

import nqf
from nqf.errors import NQFError
from test_forecast import _iris, _loop, _net

TOLERANCE = 0.10


def test_lightning_callback_feeds_the_monitor():
    L = pytest.importorskip("lightning.pytorch")
    X, Y = _iris()
    net = _net(1e-3).float()

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.5)

    monitor = nqf.watch(net, X, Y, lr=0.5)
    lines = []
    cb = monitor.lightning_callback(echo=lines.append)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X.float(), Y.float()), batch_size=150)
    trainer = L.Trainer(
        max_steps=int(1.3 * monitor.predicted_steps[-1]),
        accelerator="cpu",
        logger=False,
        callbacks=[cb],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Module(), loader)
    err = (monitor.measured_steps - monitor.predicted_steps) / monitor.predicted_steps
    assert np.all(np.abs(err) < TOLERANCE), err
    assert cb.status.phase == "done" and any("drop 1 came at step" in s for s in lines)


def test_hf_callback_and_trainer_state(tmp_path):
    tr = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    X, Y = _iris()
    net = _net(1e-3).float()

    class Data(torch.utils.data.Dataset):
        def __len__(self):
            return 150

        def __getitem__(self, i):
            return {"x": X[i].float(), "labels": Y[i].float()}

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, x, labels=None):
            out = self.net(x)
            return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

    monitor = nqf.watch(net, X, Y, lr=0.5)
    cb = monitor.hf_callback(echo=None)
    args = tr.TrainingArguments(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=150,
        report_to=[],
        max_steps=int(1.3 * monitor.predicted_steps[-1]),
        logging_steps=1,
        use_cpu=True,
        save_strategy="no",
        learning_rate=0.5,
        lr_scheduler_type="constant",
        optim="sgd",
        max_grad_norm=0.0,
        disable_tqdm=True,
        dataloader_drop_last=False,
    )
    trainer = tr.Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[cb])
    trainer.train()
    err = (monitor.measured_steps - monitor.predicted_steps) / monitor.predicted_steps
    assert np.all(np.abs(err) < TOLERANCE), err
    trainer.state.save_to_json(str(tmp_path / "trainer_state.json"))  # the library's own writer
    log = nqf.app._data.read_loss_log(tmp_path / "trainer_state.json")
    assert log.format == "trainer_state" and log.steps.size >= 30
    j = monitor.forecast.judge(log.steps - 1, log.loss)  # logged at step n: the loss of the weights after n − 1
    assert j.passed, j.lines()


def test_tensorboard_and_csv_logs(tmp_path):
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    X, Y = _iris()
    fc = nqf.forecast(_net(1e-3), X, Y, lr=0.5)
    L = _loop(_net(1e-3), X, Y, 150, lr=0.5)
    with SummaryWriter(str(tmp_path / "tb")) as w:
        for k, v in enumerate(L):
            w.add_scalar("train/loss", v, k)
            w.add_scalar("lr", 0.5, k)
    tb = nqf.app._data.read_loss_log(tmp_path / "tb")
    assert tb.format == "tensorboard" and tb.key == "train/loss" and tb.steps.size == 150
    np.testing.assert_allclose(tb.loss, L, rtol=1e-6)  # float32 in the event file
    assert fc.judge(tb.steps, tb.loss).passed
    csv = tmp_path / "log.csv"
    csv.write_text("epoch,step,val_loss,loss\n" + "".join(f"0,{k},,{v}\n" for k, v in enumerate(L)) + "0,3,0.5,\n")
    got = nqf.app._data.read_loss_log(csv)
    np.testing.assert_allclose(got.loss, L) and np.testing.assert_array_equal(got.steps, np.arange(150))


@pytest.mark.parametrize(
    "name, text, match",
    [
        ("a.csv", "", "empty"),
        ("a.csv", "epoch,acc\n1,0.5\n", "no step column"),
        ("a.csv", "step,loss\n1,abc\n", "not a number"),
        ("a.csv", "step,loss\n1,0.5\n", "at least two"),
        ("s.json", "{", "not valid JSON"),
        ("s.json", '{"log_history": [{"eval_loss": 1, "step": 1}]}', "no 'loss'"),
        ("a.txt", "1 2\n", "not a log nqf reads"),
    ],
)
def test_bad_logs_one_error(tmp_path, name, text, match):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(NQFError, match=match):
        nqf.app._data.read_loss_log(p)


def test_compare_cli(tmp_path, monkeypatch):
    """``nqf compare --log``: a model file (the user's start), the data, a CSV log: the figure, the verdict; a bad
    log is one line and exit 2 with nothing written."""
    from nqf.app._cli import app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model.py").write_text(
        "import torch\n\ndef make():\n    net = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), "
        "torch.nn.Linear(64, 3))\n    with torch.no_grad():\n        for p in net.parameters():\n"
        "            p.mul_(1e-3)\n    return net\n"
    )
    X, Y = _iris()
    torch.manual_seed(0)  # what nqf's factory call does first (--seed 0)
    exec_ns: dict = {}
    exec((tmp_path / "model.py").read_text(), exec_ns)
    net = exec_ns["make"]().double()
    L = _loop(net, X, Y, 150, lr=0.5)
    (tmp_path / "run.csv").write_text("step,loss\n" + "".join(f"{k},{v}\n" for k, v in enumerate(L)))
    args = ["compare", "--model", "model.py:make", "--data", "iris", "--log", "run.csv", "--lr", "0.5"]
    r = CliRunner().invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    body = json.loads(r.stdout)
    assert body["judgement"]["passed"] and (tmp_path / "run.csv.forecast.png").stat().st_size > 10_000
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 2 and "--figure" in again.stderr  # the figure exists: not overwritten silently
    (tmp_path / "bad.csv").write_text("when,what\n1,2\n")
    bad = CliRunner().invoke(app, [*args[:-4], "--log", "bad.csv", "--lr", "0.5", "--figure", "b.png"])
    assert bad.exit_code == 2 and bad.stderr.count("\n") == 1 and "no step column" in bad.stderr
    assert not (tmp_path / "b.png").exists()
