"""The verl agent loop that samples from neighbors and anchors every log-prob on q0.

Checked against verl 0.9.1 (`verl/experimental/agent_loop/{agent_loop,single_turn_agent_loop}.py`,
`verl/trainer/ppo/v1/agent_loop_tq.py`). Importing this module imports verl.

How it differs from verl's `SingleTurnAgentLoop` (its parent, which does the generation):

- Session s of a dataset row (one of rollout.n = (N+1)*G copies under the row's uid) is
  generated from variant v = s // G: q0 for v = 0, neighbor `extra_info.neighbors[v-1]` otherwise.
  The neighbor replaces q0's text (`extra_info.question`) inside the last user message, so the
  template and system prompt stay; without `question` it replaces the whole user message.
- For `ta-grpo` and `ta-grpo-separate`, a neighbor session then reports **q0's** prompt token
  ids (q0's messages through the same Continuous Token builder verl uses) as its prompt, and no
  sampler log-probs. verl
  builds input_ids = q0 + response, attention_mask and position_ids from this (v0:
  `AgentLoopWorker._agent_loop_postprocess`; v1: `AgentLoopWorkerTQ._agent_loop_postprocess`,
  including its prompt/sequence length tags), so old, reference and current log-probs are all
  log pi(o | q0). `ta-grpo-unanchored` keeps q_n's ids (the authors' public code);
  `grpo` / `grpo-matched` never read neighbors.
- The variant is added to `extra_fields["ta_variant"]` (the uniform-group metrics read it, and
  `ta-grpo-separate`'s advantage hook groups by it; that algorithm's loop refuses to run unless
  tagrpo's task runner built the trainer, `settings.check_hooked`).
- Multimodal prompts (a processor, non-text content) are refused: neighbors are text.

The session id: verl's v1 trainer passes `session_id` (0..n-1) to every agent loop. The legacy v0
trainer does not; `TAGRPOAgentLoopManager` (set as `rollout.agent.agent_loop_manager_class`)
numbers the copies of each uid into the non-tensor field `tagrpo_session` before dispatch.
"""

from __future__ import annotations

import copy
from typing import Any

from tagrpo.integrations.verl._deps import TAGRPOVerlError, require_verl

require_verl("tagrpo.integrations.verl.agent_loop")

import numpy as np
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from tagrpo.integrations.verl.settings import AGENT_NAME, SESSION_KEY, TASettings, check_hooked

__all__ = ["TAGRPOAgentLoop", "TAGRPOAgentLoopManager", "session_numbers", "variant_messages"]


def variant_messages(messages: list[dict], neighbor: str, question: str | None = None) -> list[dict]:
    """q_n's chat messages: q0's `messages` with q0's text (`question`) replaced by `neighbor`
    inside the last user message, or that message's whole content replaced when `question` is
    absent from it."""
    if not isinstance(neighbor, str) or not neighbor.strip():
        raise TAGRPOVerlError(f"a neighbor must be a non-empty string, got {neighbor!r}")
    out = copy.deepcopy([dict(m) for m in messages])
    users = [i for i, m in enumerate(out) if m.get("role") == "user"]
    if not users:
        raise TAGRPOVerlError(
            f"the prompt has no 'user' message to reword; roles: {[m.get('role') for m in out]}"
        )
    content = out[users[-1]].get("content")
    if not isinstance(content, str):
        raise TAGRPOVerlError(
            "the last user message's content is not text (multimodal content?); TA-GRPO on verl "
            "supports text prompts only"
        )
    new = content.replace(question, neighbor, 1) if question and question in content else neighbor
    out[users[-1]]["content"] = new
    return out


def session_numbers(uids: Any) -> np.ndarray:
    """Copy number of each row inside its uid, in row order: [a, a, b, a, b] -> [0, 1, 0, 2, 1]."""
    seen: dict[Any, int] = {}
    out = np.empty(len(uids), dtype=np.int64)
    for i, uid in enumerate(uids):
        out[i] = seen.get(uid, 0)
        seen[uid] = out[i] + 1
    return out


def _session(kwargs: dict) -> int:
    for key in ("session_id", SESSION_KEY):
        if kwargs.get(key) is not None:
            return int(kwargs[key])
    raise TAGRPOVerlError(
        "the agent loop got no session id. verl's v1 trainer passes `session_id`; with the legacy "
        "trainer (trainer.use_v1=false) set actor_rollout_ref.rollout.agent.agent_loop_manager_class="
        "tagrpo.integrations.verl.agent_loop.TAGRPOAgentLoopManager"
    )


@register(AGENT_NAME)
class TAGRPOAgentLoop(SingleTurnAgentLoop):
    """`SingleTurnAgentLoop` generating session s from q_{s // G} and reporting q0's prompt ids."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.ta = TASettings.from_config(self.config)
        check_hooked(self.config, self.ta)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        if self.processor is not None:
            raise TAGRPOVerlError(
                "TA-GRPO on verl supports text-only models: the model has a multimodal processor. "
                "Neighbors are text rewordings, so an image/video/audio prompt has none"
            )
        messages = list(kwargs["raw_prompt"])
        variant = self.ta.variant_of(_session(kwargs))
        if variant == 0:
            output = await super().run(sampling_params, **kwargs)
        else:
            info = kwargs.get("extra_info") or {}
            neighbors = info.get("neighbors")
            if neighbors is None or len(neighbors) < variant:
                have = 0 if neighbors is None else len(neighbors)
                raise TAGRPOVerlError(
                    f"row {info.get('index', '?')} (id {info.get('id', '?')!r}) has {have} neighbors in "
                    f"extra_info.neighbors but session needs neighbor {variant} (tagrpo.num_neighbors="
                    f"{self.ta.num_neighbors}); export the data with `tagrpo export verl --n "
                    f"{self.ta.num_neighbors}`"
                )
            neighbor = variant_messages(messages, str(neighbors[variant - 1]), info.get("question"))
            output = await super().run(sampling_params, **{**kwargs, "raw_prompt": neighbor})
            if self.ta.anchored:
                # the anchor: q0's tokens, built exactly as the parent builds a q0 prompt
                output.prompt_ids = await self.ct_build_initial_tokens(messages)
        if self.ta.anchored:
            # no sampler log-probs in any session: those of neighbor sessions are on q_n, and verl
            # stacks the field only when every row of a batch has it
            output.response_logprobs = None
        output.extra_fields["ta_variant"] = variant
        return output


class TAGRPOAgentLoopManager(AgentLoopManager):
    """verl's v0 `AgentLoopManager` plus the session number of each row (`tagrpo_session`): the
    v0 trainer repeats each row rollout.n times under one uid and passes no session id. In
    validation every row is its question's own (session 0, q0)."""

    def generate_sequences(self, prompts):
        if prompts.meta_info.get("validate", False) or "uid" not in prompts.non_tensor_batch:
            sessions = np.zeros(len(prompts), dtype=np.int64)
        else:
            sessions = session_numbers(prompts.non_tensor_batch["uid"])
        prompts.non_tensor_batch[SESSION_KEY] = sessions
        return super().generate_sequences(prompts)
