"""Two gloo processes on CPU must give the same loss, gradients and training run as one process on the global batch.

This file is both the pytest module and the worker script. The test starts two workers with the environment that
`torchrun --nproc_per_node=2 tests/test_distributed.py OUT` would give them (RANK, WORLD_SIZE, MASTER_ADDR/PORT;
launching them directly saves the launcher's start-up time), each rank writes its results under OUT, and the test
compares them with the same computation done in a single process. Running the torchrun command by hand works too.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn
import torch.nn.functional as F

from hierbench.training import distributed as D
from hierbench.training import trainer as T
from hierbench.recipes import recipe_run as J

B, K, WORLD = 4, 2, 2  # global batch, hard negatives per caption, ranks
try:
    import hierbench.recipes.registry  # noqa: F401

    RECIPE = "degla"
except ImportError:
    RECIPE = None
# the ViT twin of the default preset: world-tiny's ResNet tower has BatchNorm, whose per-rank statistics on CPU
# make two processes differ slightly from one (train warns; on CUDA it switches to SyncBatchNorm)
RECIPE_KW = dict(
    data=J.WorldData(n_train=16, cache_dir=False),
    arch="world-tiny-vit",
    steps=2,
    batch_size=8,
    log_every=1,
    quiet=True,
    device="cpu",
)


class LinearDual(nn.Module):
    "A tiny dual encoder: linear image and text maps to 4-d unit vectors, learned log logit scale."

    def __init__(self):
        super().__init__()
        self.img, self.txt = nn.Linear(6, 4), nn.Linear(5, 4)
        self.logit_scale = nn.Parameter(torch.tensor(1.5))


def global_batch():
    "Images (B,6), captions (B,5), sample-major negatives (B·K,5): row i·K+k = k-th negative of sample i."
    g = torch.Generator().manual_seed(1)
    return torch.randn(B, 6, generator=g), torch.randn(B, 5, generator=g), torch.randn(B * K, 5, generator=g)


def embed(model, img, txt, neg):
    return (
        F.normalize(model.img(img), dim=-1),
        F.normalize(model.txt(txt), dim=-1),
        F.normalize(model.txt(neg), dim=-1),
    )


def negclip_local_anchors(model, img, txt, neg):
    """NegCLIP loss of this rank's anchors against all gathered columns, averaged over the local anchors.
    image→text columns: [all positives ; all negatives] (B + B·K); text→image columns: all images (B)."""
    v, t, tn = embed(model, img, txt, neg)
    V = D.gather_features(v)
    T_all, TN_all = D.gather_with_negatives(t, tn)
    s = model.logit_scale.exp()
    y = D.local_labels(len(v))
    i2t = F.cross_entropy(s * v @ torch.cat([T_all, TN_all]).T, y)
    t2i = F.cross_entropy(s * t @ V.T, y)
    return 0.5 * (i2t + t2i), {"i2t": i2t, "t2i": t2i}, (T_all, TN_all)


def negclip_gathered_global(model, img, txt, neg):
    "The other valid convention: every rank computes the full single-process loss on the gathered features."
    from hierbench.recipes.losses import hard_negative_contrastive, CosineSimilarity

    v, t, tn = embed(model, img, txt, neg)
    T_all, TN_all = D.gather_with_negatives(t, tn)
    return hard_negative_contrastive(D.gather_features(v), T_all, TN_all, model.logit_scale.exp(), CosineSimilarity())


def item_dataset(n=16):
    g = torch.Generator().manual_seed(2)
    return [
        dict(img=torch.randn(6, generator=g), txt=torch.randn(5, generator=g), neg=torch.randn(K, 5, generator=g))
        for _ in range(n)
    ]


def train_loss(model, batch, teacher=None):
    loss, terms, _ = negclip_local_anchors(model, batch["img"], batch["txt"], batch["neg"].flatten(0, 1))
    return loss, terms


def train_cfg(run_dir):
    return T.TrainConfig(
        steps=3,
        batch_size=B,
        lr=0.05,
        warmup_steps=1,
        log_every=1,
        ckpt_every=2,
        run_dir=str(run_dir),
        quiet=True,
        device="cpu",
    )


def _grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def one_step(fn, rank=0, world=1):
    "Loss and gradients of `fn` on this rank's shard of the global batch (gradients averaged over ranks)."
    torch.manual_seed(0)
    model = LinearDual()
    img, txt, neg = global_batch()
    b = B // world
    out = fn(
        model, img[rank * b : (rank + 1) * b], txt[rank * b : (rank + 1) * b], neg[rank * b * K : (rank + 1) * b * K]
    )
    loss = out[0] if isinstance(out, tuple) else out
    loss.backward()
    D.allreduce_gradients(model.parameters())
    reduced = loss.detach().clone()
    if world > 1:
        torch.distributed.all_reduce(reduced)
        reduced /= world
    return reduced, _grads(model), (out[2] if isinstance(out, tuple) else None)


def worker(out: Path):
    info = D.init_distributed()
    assert info.world_size == WORLD, info
    res = {}
    res["loss"], res["grads"], (res["pos"], res["neg"]) = one_step(negclip_local_anchors, info.rank, info.world_size)
    res["pos"], res["neg"] = res["pos"].detach(), res["neg"].detach()
    try:
        res["global_loss"], res["global_grads"], _ = one_step(negclip_gathered_global, info.rank, info.world_size)
    except ImportError:
        pass
    torch.manual_seed(0)
    model = LinearDual()
    T.train(model, train_loss, item_dataset(), train_cfg(out / "dist_run"))
    res["weights"] = {k: v.clone() for k, v in model.state_dict().items()}
    if RECIPE is not None:  # end to end: a real recipe (hard negatives, IGC/TGC, EMA teacher) on the world
        J.train_recipe(RECIPE, out / "recipe_dist", **RECIPE_KW)
    torch.save(res, out / f"rank{info.rank}.pt")
    torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_port_in(lo: int, hi: int) -> int:
    "A free port in [lo, hi) (srun's rendezvous port is derived from the job id, in 10000-29999)."
    import random as _random

    for port in _random.Random().sample(range(lo, hi), 200):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError(f"no free port in [{lo}, {hi})")


TORCH_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def launch_env(rank: int, port: int, launcher: str) -> dict:
    "The environment of worker `rank`: torchrun's variables, or only those srun sets (no torchrun variable at all)."
    env = {k: v for k, v in os.environ.items() if k not in TORCH_VARS and not k.startswith("SLURM_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join(sys.path))
    if launcher == "torchrun":
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(WORLD),
            LOCAL_WORLD_SIZE=str(WORLD),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
    else:  # `srun --ntasks=2` on one node called localhost; the port follows from the job id
        job_id = 2_000_000 + port - 10_000
        env.update(
            SLURM_PROCID=str(rank),
            SLURM_LOCALID=str(rank),
            SLURM_NTASKS=str(WORLD),
            SLURM_STEP_NUM_TASKS=str(WORLD),
            SLURM_JOB_NODELIST="localhost",
            SLURM_STEP_NODELIST="localhost",
            SLURM_JOB_ID=str(job_id),
            SLURM_STEP_ID="0",
            SLURM_NODEID="0",
        )
    return env


def launch(out: Path, timeout: float = 120, launcher: str = "torchrun"):
    "Start WORLD worker processes with the environment torchrun (or srun) gives them."
    port = _free_port() if launcher == "torchrun" else _free_port_in(10_000, 30_000)
    procs = []
    for rank in range(WORLD):
        env = launch_env(rank, port, launcher)
        procs.append(
            subprocess.Popen(
                [sys.executable, __file__, str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        logs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-4000:]


@pytest.mark.parametrize("launcher", ["torchrun", "srun"])
def test_two_processes_match_one(tmp_path, launcher):
    launch(tmp_path, launcher=launcher)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]

    # single process on the global batch
    loss, grads, (pos, neg) = one_step(negclip_local_anchors)
    img, txt, negs = global_batch()
    torch.manual_seed(0)
    _, t_ref, tn_ref = embed(LinearDual(), img, txt, negs)
    for r in ranks:
        # gathered layout: [all positives ; all negatives], negatives still sample-major
        torch.testing.assert_close(r["pos"], t_ref.detach(), rtol=0, atol=1e-6)
        torch.testing.assert_close(r["neg"], tn_ref.detach(), rtol=0, atol=1e-6)
        torch.testing.assert_close(r["loss"], loss, rtol=1e-6, atol=1e-6)
        for n, g in grads.items():
            torch.testing.assert_close(r["grads"][n], g, rtol=1e-5, atol=1e-6, msg=n)
    assert any(g.abs().max() > 1e-3 for g in grads.values())

    if "global_loss" in ranks[0]:
        gl, gg, _ = one_step(negclip_gathered_global)
        torch.testing.assert_close(gl, loss, rtol=1e-6, atol=1e-6)  # both conventions are the same loss
        for r in ranks:
            torch.testing.assert_close(r["global_loss"], gl, rtol=1e-6, atol=1e-6)
            for n, g in gg.items():
                torch.testing.assert_close(r["global_grads"][n], g, rtol=1e-5, atol=1e-6, msg=n)

    # the trainer: same logged losses and final weights as a one-process run with the same seed
    torch.manual_seed(0)
    model = LinearDual()
    T.train(model, train_loss, item_dataset(), train_cfg(tmp_path / "single_run"))
    single, multi = T.read_metrics(tmp_path / "single_run"), T.read_metrics(tmp_path / "dist_run")
    assert [m["step"] for m in multi] == [1, 2, 3]
    for a, b in zip(single, multi):
        for k in ("loss", "i2t", "t2i", "grad_norm", "lr"):
            assert abs(a[k] - b[k]) <= 1e-5 * max(1.0, abs(a[k])), (a["step"], k)
    for r in ranks:
        for k, v in model.state_dict().items():
            torch.testing.assert_close(r["weights"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    if RECIPE is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # fine-tune recipe without init checkpoint
            J.train_recipe(RECIPE, tmp_path / "recipe_single", **RECIPE_KW)
        single, multi = T.read_metrics(tmp_path / "recipe_single"), T.read_metrics(tmp_path / "recipe_dist")
        assert len(single) == len(multi) == 2
        for a, b in zip(single, multi):
            for k in ("loss", "contrastive", "igc", "tgc", "distill", "grad_norm"):
                assert abs(a[k] - b[k]) <= 1e-4 * max(1.0, abs(a[k])), (RECIPE, a["step"], k, a[k], b[k])
    state = torch.load(T.latest_checkpoint(tmp_path / "dist_run") / "state.pt", weights_only=True)
    assert len(state["rng"]) == WORLD  # every rank's generators are saved for resume


# ---------------------------------------------------------------- srun's environment


@pytest.mark.parametrize(
    "nodelist, hosts",
    [
        ("node01", ["node01"]),
        ("node[01-04]", ["node01", "node02", "node03", "node04"]),
        ("a[1,3-4],b7", ["a1", "a3", "a4", "b7"]),
        ("gpu[098-101]", ["gpu098", "gpu099", "gpu100", "gpu101"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("x[2]-ib,y", ["x2-ib", "y"]),
    ],
)
def test_expand_nodelist(nodelist, hosts):
    assert D.expand_nodelist(nodelist) == hosts
    if not __import__("shutil").which("scontrol"):
        assert D.first_host(nodelist) == hosts[0]


@pytest.mark.parametrize(
    "bad, why",
    [
        ("", "bad host ''"),
        ("n[1-", "unbalanced"),
        ("n]1[", "unbalanced"),
        ("n[a-b]", "bad range 'a-b'"),
        ("n[3-1]", "bad range '3-1'"),
        ("a,,b", "bad host ''"),
    ],
)
def test_expand_nodelist_refuses(bad, why):
    with pytest.raises(ValueError, match=__import__("re").escape(why)):
        D.expand_nodelist(bad)


def test_launch_env_rules():
    task = dict(
        SLURM_PROCID="1",
        SLURM_LOCALID="1",
        SLURM_NTASKS="2",
        SLURM_STEP_NUM_TASKS="2",
        SLURM_JOB_NODELIST="n[5-6]",
        SLURM_JOB_ID="123",
    )
    assert D.launch_env(task) == dict(RANK="1", WORLD_SIZE="2", LOCAL_RANK="1", MASTER_ADDR="n5", MASTER_PORT="10123")
    assert D.launch_env({**task, "SLURM_STEP_NODELIST": "m9"})["MASTER_ADDR"] == "m9"  # the step's hosts first
    assert D.launch_env({**task, "WORLD_SIZE": "2", "RANK": "0"}) == {}  # torchrun wins
    assert D.launch_env({**task, "SLURM_STEP_NUM_TASKS": "1"}) == {}  # one task: no process group
    batch_step = {k: v for k, v in task.items() if k != "SLURM_STEP_NUM_TASKS"}
    with pytest.warns(UserWarning, match="not an srun task"):
        assert D.launch_env(batch_step) == {}
    with pytest.raises(ValueError, match="SLURM_JOB_ID=None"):
        D.launch_env({k: v for k, v in task.items() if k != "SLURM_JOB_ID"})


if __name__ == "__main__":
    worker(Path(sys.argv[1]))
