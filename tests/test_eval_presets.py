"""`tagrpo eval --preset paper`: the paper's evaluation conventions (n=128, T=0.6, top-p 0.95,
3072 new tokens, pass@k for k = 1..128 in powers of two, raw-text prompt without the chat
template), each overridable by its flag, validated with errors that name the flag and the value;
the raw-text prompt checked on the token ids the engine receives (tiny random model)."""

from __future__ import annotations

import json

import pytest

from tagrpo.errors import TagrpoError
from tagrpo.eval.benchmarks import MATH_TEMPLATE
from tagrpo.eval.presets import PRESETS, powers_of_two, resolve_eval_settings

PAPER_KS = [1, 2, 4, 8, 16, 32, 64, 128]
QUESTIONS = [{"id": "a", "question": "What is 1 + 1?", "answer": "2"},
             {"id": "b", "question": "Tom has 3 apples and buys 5 more. How many apples does he have?", "answer": "8"}]


def test_paper_preset_values():
    s = resolve_eval_settings("paper")
    assert s == {"preset": "paper", "n": 128, "k": PAPER_KS, "temperature": 0.6, "top_p": 0.95,
                 "max_new_tokens": 3072, "chat_template": False}
    assert resolve_eval_settings("  Paper ")["preset"] == "paper"  # case and blanks do not matter
    assert set(PRESETS) == {"paper"}


def test_no_preset_keeps_the_cpu_defaults():
    assert resolve_eval_settings(None) == {"preset": None, "n": 4, "k": [1, 2, 4], "temperature": 0.6, "top_p": 0.95,
                                           "max_new_tokens": 256, "chat_template": True}
    # without a preset the default k stays 1,2,4 (k > n is refused, as before presets existed)
    with pytest.raises(TagrpoError, match=r"--k 4 is larger than --n 2"):
        resolve_eval_settings(None, n=2)


def test_explicit_flags_override_the_preset():
    s = resolve_eval_settings("paper", n=16, temperature=0.7, top_p=0.9, max_new_tokens=512, chat_template=True)
    assert s["n"] == 16 and s["k"] == [1, 2, 4, 8, 16]  # k follows n when --k is not given
    assert (s["temperature"], s["top_p"], s["max_new_tokens"], s["chat_template"]) == (0.7, 0.9, 512, True)
    assert resolve_eval_settings("paper", k="8,1")["k"] == [1, 8]
    assert resolve_eval_settings("paper", n=100)["k"] == [1, 2, 4, 8, 16, 32, 64]
    assert resolve_eval_settings(None, chat_template=False)["chat_template"] is False


def test_powers_of_two():
    assert powers_of_two(1) == [1] and powers_of_two(128) == PAPER_KS and powers_of_two(127) == PAPER_KS[:-1]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"k": "1,256"}, r"--k 256 is larger than --n 128"),
    ({"n": 8, "k": "16"}, r"--k 16 is larger than --n 8"),
    ({"n": 0}, r"--n must be >= 1, got 0"),
    ({"temperature": 0}, r"--temperature 0 makes the n samples identical"),
    ({"temperature": -0.5}, r"--temperature must be > 0, got -0.5"),
    ({"top_p": 0}, r"--top-p must be in \(0, 1\], got 0"),
    ({"top_p": 1.5}, r"--top-p must be in \(0, 1\], got 1.5"),
    ({"max_new_tokens": 0}, r"--max-new-tokens must be >= 1, got 0"),
    ({"k": "1,x"}, r"--k '1,x': expected a comma-separated list of integers"),
])
def test_invalid_values_are_refused(kwargs, message):
    with pytest.raises(TagrpoError, match=message):
        resolve_eval_settings("paper", **kwargs)


def test_unknown_preset_names_the_choices():
    with pytest.raises(TagrpoError, match=r"--preset 'papers' is not a preset; choose one of paper"):
        resolve_eval_settings("papers")


# --- the CLI -------------------------------------------------------------------------------
def _invoke(args: list[str]):
    from typer.testing import CliRunner

    from tagrpo.cli import app

    return CliRunner().invoke(app, ["eval", *args])


def _data(tmp_path):
    p = tmp_path / "two.jsonl"
    p.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    return p


def _raw_ids(tok, question):
    return tok(MATH_TEMPLATE.format(question=question), add_special_tokens=True)["input_ids"]


def _chat_ids(tok, question):
    text = tok.apply_chat_template([{"role": "user", "content": MATH_TEMPLATE.format(question=question)}],
                                   add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


@pytest.fixture
def recording_engine(monkeypatch):
    """Replace the built-in engine by one that records every call and answers at once (question
    'a' correctly in one sample of four), so the full preset (128 x 3072) costs nothing."""
    from tagrpo.rollout import Completion

    calls = []

    class Recording:
        def __init__(self, model, tokenizer, max_batch_size=64, dtype="fp32", **kw):
            self.tokenizer = tokenizer

        def generate(self, prompts, params):
            calls.append((prompts, params))
            return [Completion(token_ids=[5, 6, 7], text=f"so \\boxed{{{2 if j % 4 == 0 else 0}}}", finished=True)
                    for j in range(len(prompts))]

    monkeypatch.setattr("tagrpo.rollout.HFGenerateEngine", Recording)
    return calls


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tagrpo.models import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


def test_cli_preset_paper_applies_every_value(tmp_path, tiny_model, recording_engine):
    from transformers import AutoTokenizer

    out = tmp_path / "eval.json"
    res = _invoke(["--preset", "paper", "--model", tiny_model, "--data", str(_data(tmp_path)), "--output", str(out),
                   "--quiet", "--no-diversity"])
    assert res.exit_code == 0, res.output
    doc = json.loads(out.read_text())
    s = doc["settings"]
    assert (s["preset"], s["n"], s["k"], s["temperature"], s["top_p"], s["max_new_tokens"], s["chat_template"]) == (
        "paper", 128, PAPER_KS, 0.6, 0.95, 3072, False)
    r = doc["models"][0]["benchmarks"]["two"]
    assert list(r["pass@k"]) == [str(k) for k in PAPER_KS] and r["n_samples"] == 128
    assert r["prompt_format"] == "raw"
    # question a: 32 correct of 128 (scored by the last \boxed{} through math_reward); b: none
    assert [q["n_correct"] for q in r["questions"]] == [32, 0]
    assert r["pass@k"]["1"] == pytest.approx(0.125) and r["pass@k"]["128"] == pytest.approx(0.5)
    # what the engine received: the sampling parameters and 128 raw-text prompts per question
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert all(p.temperature == 0.6 and p.top_p == 0.95 and p.max_new_tokens == 3072 and p.do_sample
               for _, p in recording_engine)
    prompts = [p for batch, _ in recording_engine for p in batch]
    assert prompts == [_raw_ids(tok, q["question"]) for q in QUESTIONS for _ in range(128)]
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assert all(im_start not in p for p in prompts) and prompts[0] != _chat_ids(tok, QUESTIONS[0]["question"])


def test_cli_flags_override_the_preset(tmp_path, tiny_model, recording_engine):
    from transformers import AutoTokenizer

    out = tmp_path / "eval.json"
    res = _invoke(["--preset", "paper", "--n", "8", "--temperature", "0.8", "--top-p", "0.9", "--max-new-tokens", "16",
                   "--chat-template", "--model", tiny_model, "--data", str(_data(tmp_path)), "--output", str(out),
                   "--quiet", "--no-diversity"])
    assert res.exit_code == 0, res.output
    s = json.loads(out.read_text())["settings"]
    assert (s["preset"], s["n"], s["k"], s["temperature"], s["top_p"], s["max_new_tokens"], s["chat_template"]) == (
        "paper", 8, [1, 2, 4, 8], 0.8, 0.9, 16, True)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    prompts = [p for batch, _ in recording_engine for p in batch]
    assert prompts == [_chat_ids(tok, q["question"]) for q in QUESTIONS for _ in range(8)]
    assert all(p.temperature == 0.8 and p.top_p == 0.9 and p.max_new_tokens == 16 for _, p in recording_engine)


def test_cli_refusals_name_the_values(tmp_path):
    # refused before the (missing) model or data is touched
    args = ["--model", str(tmp_path / "no-model"), "--data", str(tmp_path / "no-data.jsonl")]
    res = _invoke(["--preset", "paper", "--k", "1,256", *args])
    assert res.exit_code == 2 and "--k 256 is larger than --n 128" in res.output
    res = _invoke(["--preset", "paper", "--system", "You are a helpful assistant.", *args])
    assert res.exit_code == 2 and "--system needs the chat template" in res.output
    res = _invoke(["--preset", "nope", *args])
    assert res.exit_code == 2 and "--preset 'nope' is not a preset; choose one of paper" in res.output
    assert "Traceback" not in res.output


def test_raw_prompt_reaches_the_real_engine(tmp_path, tiny_model, monkeypatch):
    """The preset on the tiny random model with the built-in engine (n and length cut down): the
    ids given to HFGenerateEngine.generate are the raw text's, and sampling really runs."""
    from transformers import AutoTokenizer

    from tagrpo.rollout import HFGenerateEngine

    seen = []

    class Spy(HFGenerateEngine):
        def generate(self, prompts, params):
            seen.extend(prompts)
            return super().generate(prompts, params)

    monkeypatch.setattr("tagrpo.rollout.HFGenerateEngine", Spy)
    out = tmp_path / "eval.json"
    res = _invoke(["--preset", "paper", "--n", "2", "--max-new-tokens", "4", "--model", tiny_model, "--data",
                   str(_data(tmp_path)), "--output", str(out), "--quiet", "--no-diversity", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    tok = AutoTokenizer.from_pretrained(tiny_model)
    assert seen == [_raw_ids(tok, q["question"]) for q in QUESTIONS for _ in range(2)]
    r = json.loads(out.read_text())["models"][0]["benchmarks"]["two"]
    assert all(0 < s["tokens"] <= 4 for q in r["questions"] for s in q["samples"])


def test_evaluate_chat_template_switch():
    """`evaluate(chat_template=False)` builds raw-text ids; True keeps the chat template."""
    from tagrpo.eval import evaluate
    from tagrpo.models import make_tiny_tokenizer
    from tagrpo.rollout import Completion, SamplingParams

    tok = make_tiny_tokenizer()
    seen = []

    class Engine:
        def generate(self, prompts, params):
            seen.append(prompts)
            return [Completion(token_ids=[1], text="\\boxed{2}", finished=True) for _ in prompts]

    params = SamplingParams(temperature=0.6, top_p=0.95, max_new_tokens=8, seed=0)
    res = evaluate(None, tok, QUESTIONS, 1, [1], params, engine=Engine(), diversity=False, chat_template=False)
    assert seen[-1] == [_raw_ids(tok, q["question"]) for q in QUESTIONS] and res["prompt_format"] == "raw"
    res = evaluate(None, tok, QUESTIONS, 1, [1], params, engine=Engine(), diversity=False)
    assert seen[-1] == [_chat_ids(tok, q["question"]) for q in QUESTIONS] and res["prompt_format"] == "chat"
    assert seen[-1][0][0] == tok.convert_tokens_to_ids("<|im_start|>")
    with pytest.raises(TagrpoError, match="--system needs the chat template"):
        evaluate(None, tok, QUESTIONS, 1, [1], params, engine=Engine(), system="be brief", chat_template=False)
