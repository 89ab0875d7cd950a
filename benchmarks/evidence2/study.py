"""The Evidence 2 study (issue 14) as data: study.yaml parsed and checked, the training problems,
the run names, directories and `tagrpo train` / `tagrpo eval` commands. run.py executes them,
summarize.py reads what they wrote; neither decides a setting of its own.

Layout of an output directory OUT (pilot candidates get the same layout under OUT/pilot/NAME/):

    OUT/train.yaml                    shared tagrpo train config (the study's `train` section)
    OUT/data/train-Q.jsonl            the Q training questions (arms 1, 3-6)
    OUT/data/train-scaled.jsonl       scale*Q questions, the first Q of each difficulty are Q's (arm 2)
    OUT/eval-data/arith-<set>.jsonl   held-out sets: train-form, heldout-form, harder
    OUT/runs/a<id>-<name>-s<seed>/    run directories (metrics.jsonl, checkpoints/, final/)
    OUT/eval/<run>.json, base.json    tagrpo eval documents
    OUT/logs/, OUT/times.json         logs of every job, wall time of every job segment
"""

from __future__ import annotations

import copy
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
STUDY_FILE = HERE / "study.yaml"
EVAL_SETS = ("train-form", "heldout-form", "harder")
DATA_KINDS = ("Q", "scaled")
PER_RUN = ("output_dir", "seed", "train_data")  # set by the driver, never by study.yaml


class StudyError(ValueError):
    pass


@dataclass(frozen=True)
class Arm:
    id: int
    name: str
    data: str  # "Q" or "scaled"
    set: dict
    tests: str = ""


@dataclass(frozen=True)
class Job:
    """One training run: an arm with a seed."""

    arm: Arm
    seed: int

    @property
    def name(self) -> str:
        return f"a{self.arm.id}-{self.arm.name}-s{self.seed}"


def load_study(path: str | Path = STUDY_FILE) -> dict:
    doc = yaml.safe_load(Path(path).read_text())
    check_study(doc)
    return doc


def check_study(doc: dict) -> None:
    """Raise StudyError naming what is wrong."""
    for key in ("study", "train", "arms", "eval", "compare", "pilot"):
        if not isinstance(doc.get(key), dict if key != "arms" else list):
            raise StudyError(f"study.yaml: section '{key}' is missing or has the wrong type")
    s = doc["study"]
    check_mix(s["difficulty_mix"], "study.difficulty_mix")
    if len(set(s["seeds"])) != len(s["seeds"]) or not s["seeds"]:
        raise StudyError("study.seeds must be distinct and non-empty")
    if s["questions"] < 1 or s["scale"] < 1:
        raise StudyError("study.questions must be >= 1 and study.scale >= 1")
    bad = [k for k in doc["train"] if k in PER_RUN]
    if bad:
        raise StudyError(f"train: {bad} are set per run by run.py, not in study.yaml")
    ids = [a["id"] for a in doc["arms"]]
    if len(set(ids)) != len(ids):
        raise StudyError(f"arm ids must be distinct, got {ids}")
    for a in doc["arms"]:
        if a.get("data") not in DATA_KINDS:
            raise StudyError(f"arm {a['id']}: data must be one of {DATA_KINDS}, got {a.get('data')!r}")
        if any(k in PER_RUN or k == "steps" for k in a.get("set", {})):
            raise StudyError(f"arm {a['id']}: seed, steps, data and output_dir are the same for every arm")
    for a, b in doc["compare"]["pairs"]:
        if a not in ids or b not in ids:
            raise StudyError(f"compare.pairs: ({a}, {b}) names an arm that does not exist")
    if doc["study"]["validity"]["arm"] not in ids:
        raise StudyError("study.validity.arm names an arm that does not exist")
    ev = doc["eval"]
    if ev["samples"] < max(ev["ks"]):
        raise StudyError(f"eval.samples ({ev['samples']}) must be >= every k in eval.ks {ev['ks']}")
    for c in doc["pilot"]["candidates"]:
        check_mix(c.get("difficulty_mix", s["difficulty_mix"]), f"pilot candidate {c['name']}")


def check_mix(mix: dict, where: str) -> None:
    if not mix or any(int(d) not in range(1, 6) or f < 0 for d, f in mix.items()):
        raise StudyError(f"{where}: difficulties 1..5 with fractions >= 0, got {mix}")
    if not math.isclose(sum(mix.values()), 1.0, abs_tol=1e-6):
        raise StudyError(f"{where}: fractions must sum to 1, got {sum(mix.values())}")


def arms(doc: dict) -> list[Arm]:
    return [Arm(int(a["id"]), str(a["name"]), a["data"], dict(a.get("set") or {}), a.get("tests", "")) for a in doc["arms"]]


def pilot_study(doc: dict, candidate: dict) -> dict:
    """The study as a pilot candidate runs it: its difficulty mix, its steps (default: the
    pilot's), its `set`."""
    out = copy.deepcopy(doc)
    out["study"]["difficulty_mix"] = candidate.get("difficulty_mix", doc["study"]["difficulty_mix"])
    out["train"].update(candidate.get("set") or {})
    out["train"]["steps"] = int(candidate.get("steps", doc["pilot"]["steps"]))
    return out


def pilot_seeds(doc: dict) -> list[int]:
    """The seeds a pilot trains: `pilot.seeds` (a list), else the one `pilot.seed`."""
    p = doc["pilot"]
    return [int(s) for s in p["seeds"]] if "seeds" in p else [int(p["seed"])]


def jobs(doc: dict, arm_ids=None, seeds=None) -> list[Job]:
    """Seed-major order: every arm of seed 0, then of seed 1, ... (paired results come early)."""
    by_id = {a.id: a for a in arms(doc)}
    unknown = set(arm_ids or ()) - set(by_id)
    if unknown:
        raise StudyError(f"no arm {sorted(unknown)}; arms are {sorted(by_id)}")
    use_seeds = doc["study"]["seeds"] if seeds is None else list(seeds)
    return [Job(by_id[i], s) for s in use_seeds for i in by_id if arm_ids is None or i in arm_ids]


def split_counts(total: int, mix: dict) -> dict[int, int]:
    """Questions per difficulty, largest remainder: sums to `total` exactly."""
    raw = {int(d): total * f for d, f in mix.items()}
    out = {d: math.floor(v) for d, v in raw.items()}
    for d in sorted(raw, key=lambda d: (out[d] - raw[d], d))[: total - sum(out.values())]:
        out[d] += 1
    return out


def distinct_problems(n: int, difficulty: int, seed: int) -> list[dict]:
    """The first n generated problems with distinct arithmetic (names and wording aside)."""
    from tagrpo.data.arith import generate_problems
    from tagrpo.data.arith_eval import math_key

    m = max(n, 1)
    while True:
        seen, rows = set(), []
        for r in generate_problems(m, difficulty, seed, id_prefix="e2"):
            if (k := math_key(r["structure"])) not in seen:
                seen.add(k)
                rows.append(r)
        if len(rows) >= n:
            return rows[:n]
        if m > 64 * n + 4096:
            raise StudyError(f"difficulty {difficulty} has only ~{len(rows)} distinct problems; asked for {n} "
                             "(lower study.questions or scale, or move the mix to higher difficulties)")
        m *= 2


def training_rows(doc: dict) -> dict[str, list[dict]]:
    """{"Q": rows, "scaled": rows}; Q's rows are the first ones of each difficulty in `scaled`."""
    s = doc["study"]
    q, big = s["questions"], round(s["scale"] * s["questions"])
    nq, nb = split_counts(q, s["difficulty_mix"]), split_counts(big, s["difficulty_mix"])
    pools = {d: distinct_problems(max(nq[d], nb[d]), d, s["problems_seed"]) for d in nq}
    return {"Q": [r for d in sorted(nq) for r in pools[d][: nq[d]]],
            "scaled": [r for d in sorted(nb) for r in pools[d][: nb[d]]]}


def rule_neighbor_shortfall(doc: dict, rows: list[dict], seeds) -> list[str]:
    """Rows for which the rule backend finds fewer than N neighbors (the trainer would skip them,
    so an arm with `neighbors: rules` would train on fewer questions than the others)."""
    from tagrpo.train.data import rule_neighbors

    n = int(doc["train"].get("num_neighbors", 3))
    if not any(a.set.get("neighbors") == "rules" for a in arms(doc)):
        return []
    out = []
    for seed in seeds:
        got = rule_neighbors(rows, n, list(range(len(rows))), seed)
        short = [rows[i]["id"] for i in range(len(rows)) if len(got.get(i, [])) < n]
        if short:
            out.append(f"seed {seed}: the rule backend finds fewer than {n} neighbors for {len(short)} of {len(rows)} "
                       f"questions ({', '.join(map(str, short[:3]))}...): the rules arm would train on fewer questions")
    return out


@dataclass(frozen=True)
class Layout:
    out: Path

    @property
    def train_yaml(self) -> Path:
        return self.out / "train.yaml"

    def data(self, kind: str) -> Path:
        return self.out / "data" / f"train-{kind}.jsonl"

    def eval_data(self, kind: str) -> Path:
        return self.out / "eval-data" / f"arith-{kind}.jsonl"

    def run_dir(self, job: Job) -> Path:
        return self.out / "runs" / job.name

    def eval_out(self, name: str) -> Path:
        return self.out / "eval" / f"{name}.json"

    def log(self, name: str) -> Path:
        return self.out / "logs" / f"{name}.log"

    @property
    def times(self) -> Path:
        return self.out / "times.json"


def tagrpo_exe() -> str:
    return str(Path(sys.executable).parent / "tagrpo")


def run_settings(doc: dict, job: Job, layout: Layout) -> dict:
    """Every config field this run must have: the shared ones, the arm's, the per-run ones."""
    return {**doc["train"], **job.arm.set, "output_dir": str(layout.run_dir(job)), "seed": job.seed,
            "train_data": str(layout.data(job.arm.data))}


def fmt_value(v) -> str:
    return yaml.safe_dump(v, default_flow_style=True).strip().removesuffix("...").strip()


def config_mismatch(expected: dict, actual: dict) -> list[str]:
    """Fields of a run's config.yaml that differ from what the study asks for (output_dir aside;
    train_data by file name, so a moved OUT still matches)."""
    out = []
    for k, v in expected.items():
        a = actual.get(k)
        if k == "output_dir":
            continue
        if k == "train_data":
            v, a = Path(str(v)).name, Path(str(a)).name
        same = math.isclose(float(v), float(a), rel_tol=1e-9) if isinstance(v, (int, float)) and not isinstance(v, bool) \
            and isinstance(a, (int, float)) and not isinstance(a, bool) else v == a
        if not same:
            out.append(f"{k}: run has {a!r}, study asks {v!r}")
    return out


def train_command(doc: dict, job: Job, layout: Layout) -> list[str]:
    per_run = {**job.arm.set, "output_dir": str(layout.run_dir(job)), "seed": job.seed, "train_data": str(layout.data(job.arm.data))}
    sets = [a for k, v in per_run.items() for a in ("--set", f"{k}={fmt_value(v)}")]
    return [tagrpo_exe(), "train", "--config", str(layout.train_yaml), *sets]


def resume_command(job: Job, layout: Layout) -> list[str]:
    return [tagrpo_exe(), "train", "--resume", str(layout.run_dir(job))]


def eval_command(doc: dict, model: str, data: list[Path], out: Path, *, samples: int | None = None,
                 ks: list[int] | None = None) -> list[str]:
    from tagrpo.train.config import TrainConfig

    ev, tr = doc["eval"], doc["train"]
    samples = samples or ev["samples"]
    ks = [k for k in (ks or ev["ks"]) if k <= samples]
    cmd = [tagrpo_exe(), "eval", "--model", model]
    for p in data:
        cmd += ["--data", str(p)]
    cmd += ["--n", str(samples), "--k", ",".join(map(str, ks)), "--temperature", str(ev["temperature"]),
            "--top-p", str(ev["top_p"]), "--max-new-tokens", str(ev.get("max_new_tokens", tr.get("max_new_tokens", 64))),
            "--seed", str(ev["seed"]), "--batch-size", str(ev["batch_size"]), "--dtype", ev["dtype"],
            "--template", tr.get("prompt_template", TrainConfig.prompt_template), "--quiet", "-o", str(out)]
    if not ev.get("diversity", True):
        cmd.append("--no-diversity")
    return cmd
