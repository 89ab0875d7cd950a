"""`tagrpo export verl`, the verl reward function and the TA-GRPO settings: the parts of
`tagrpo.integrations.verl` that need no verl (they run in the main environment and in .venv-verl).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.integrations.verl.data import read_verl_parquet, verl_rows, write_verl_parquet
from tagrpo.integrations.verl.reward import compute_score
from tagrpo.integrations.verl.settings import TASettings, check_parquet_neighbors

ROWS = [
    {"id": "a", "question": "Tom has 3 apples and buys 5 more. How many?", "answer": "He has 3 + 5 = 8.\n#### 8",
     "neighbors": ["Tom buys 5 apples; he had 3. How many now?", "With 3 apples plus 5 bought, count Tom's apples.", "x"]},
    {"id": "b", "question": "What is 12 plus 7?", "answer": "19", "neighbors": ["Compute 7 + 12.", "Add twelve and seven.", "y"]},
]


def test_verl_rows_layout_one_row_per_family():
    out = verl_rows(ROWS, num_neighbors=2, system="Be brief.", data_source="tagrpo/gsm8k")
    assert len(out) == 2
    r = out[0]
    assert r["data_source"] == "tagrpo/gsm8k" and r["ability"] == "math"
    assert r["prompt"][0] == {"role": "system", "content": "Be brief."}
    user = r["prompt"][1]
    assert user["role"] == "user" and user["content"].startswith(ROWS[0]["question"] + "\n")
    assert "\\boxed{}" in user["content"]
    assert r["reward_model"] == {"style": "rule", "ground_truth": "8"}  # GSM8K `#### 8` -> 8
    assert r["extra_info"] == {"index": 0, "id": "a", "question": ROWS[0]["question"],
                               "neighbors": ROWS[0]["neighbors"][:2], "split": "train"}
    assert [x["extra_info"]["index"] for x in out] == [0, 1]
    assert verl_rows(ROWS, num_neighbors=0)[1]["extra_info"]["neighbors"] == []


def test_verl_rows_refuses_missing_neighbors_and_bad_template():
    with pytest.raises(TagrpoError, match=r"row 1 \(id 'b'\) has 3 neighbor\(s\).*fewer than --n 4"):
        verl_rows([ROWS[0] | {"neighbors": ["1", "2", "3", "4"]}, ROWS[1]], num_neighbors=4)
    with pytest.raises(TagrpoError, match="must contain"):
        verl_rows(ROWS, num_neighbors=1, template="no placeholder")


def test_parquet_round_trip_and_neighbor_check(tmp_path):
    path = tmp_path / "train.parquet"
    write_verl_parquet(path, verl_rows(ROWS, num_neighbors=3))
    back = read_verl_parquet(path)
    assert back[1]["extra_info"]["neighbors"] == ROWS[1]["neighbors"]
    assert back[0]["prompt"][0]["role"] == "user"
    check_parquet_neighbors(str(path), 3)
    with pytest.raises(TagrpoError, match="row 0 has 3 neighbors.*fewer than tagrpo.num_neighbors=4"):
        check_parquet_neighbors(str(path), 4)
    with pytest.raises(TagrpoError, match="parquet"):
        write_verl_parquet(tmp_path / "x.jsonl", back)


def test_export_command_writes_verl_parquet(tmp_path):
    src = tmp_path / "neighbors.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    out = tmp_path / "verl" / "train.parquet"
    cmd = [sys.executable, "-m", "tagrpo.cli", "export", "verl", "--input", str(src), "--output", str(out), "--n", "2"]
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "wrote 2 families (N=2)" in done.stdout
    rows = read_verl_parquet(out)
    assert rows[0]["data_source"] == "tagrpo/neighbors" and len(rows[0]["extra_info"]["neighbors"]) == 2
    bad = subprocess.run(cmd[:-1] + ["5"], check=False, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "fewer than --n 5" in bad.stderr and "Traceback" not in bad.stderr
    helped = subprocess.run([sys.executable, "-m", "tagrpo.cli", "export", "verl", "--help"], check=False,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--n" in helped.stdout


def test_reward_function_scores_with_math_reward():
    assert compute_score("tagrpo/x", "so the total is \\boxed{19}.", "19", {}) == 1.0
    assert compute_score("tagrpo/x", "so the total is \\boxed{18}.", "19", {}) == 0.0
    assert compute_score(data_source="d", solution_str="\\boxed{\\frac{1}{2}}", ground_truth="0.5") == 1.0
    assert compute_score("d", "\\boxed{8}", ["7", "8"]) == 1.0
    assert compute_score("d", "", "19") == 0.0


@pytest.mark.parametrize("algorithm,n,variants", [
    ("ta-grpo", 8, [0, 0, 1, 1, 2, 2, 3, 3]),
    ("ta-grpo-unanchored", 8, [0, 0, 1, 1, 2, 2, 3, 3]),
    ("grpo-matched", 8, [0] * 8),
    ("grpo", 2, [0, 0]),
])
def test_settings_family_size_and_variant_of_session(algorithm, n, variants):
    ta = TASettings(algorithm=algorithm, num_neighbors=3, samples_per_variant=2)
    assert ta.family_size == n
    assert [ta.variant_of(s) for s in range(n)] == variants
    assert ta.anchored == (algorithm == "ta-grpo")


def test_settings_refuse_bad_values():
    with pytest.raises(TagrpoError, match="is not one of"):
        TASettings(algorithm="dapo")
    with pytest.raises(TagrpoError, match="samples_per_variant must be >= 1"):
        TASettings(samples_per_variant=0)
    with pytest.raises(TagrpoError, match="use tagrpo.algorithm=grpo"):
        TASettings(algorithm="ta-grpo", num_neighbors=0)


def test_family_uniform_metrics_q0_view_and_family_view():
    from tagrpo.integrations.verl.metrics import family_uniform_metrics

    # family a: q0 all wrong, a neighbor right -> q0 uniform (all wrong), family not uniform
    # family b: everything right -> uniform in both views (all correct)
    uid = ["a"] * 6 + ["b"] * 6
    variant = [0, 0, 1, 1, 2, 2] * 2
    scores = [0, 0, 1, 0, 0, 0] + [1] * 6
    m = family_uniform_metrics(uid, variant, scores)
    assert m["uniform/q0_uniform"] == 1.0 and m["uniform/q0_all_wrong"] == 0.5 and m["uniform/q0_all_correct"] == 0.5
    assert m["uniform/family_uniform"] == 0.5 and m["uniform/family_all_wrong"] == 0.0
    assert m["uniform/family_all_correct"] == 0.5
    assert m["rewards/q0_mean"] == 0.5 and m["rewards/neighbors_mean"] == pytest.approx(5 / 8)
