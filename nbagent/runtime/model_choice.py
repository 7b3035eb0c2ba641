"""Choosing the model: a litellm model by name, or an offline one (scripted, a function, a replay of a run).

`ModelOptions` groups what `Agent` is told about its model; `choose_model` turns it into the settings the model
layer calls with (llm.ModelSettings) and, for an offline model, the model object registered with the provider.
A replay also brings the decider that answers as the recording did, and says whether the recording named
its calls itself (approval.identify).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from nbagent.models.base import LocalModel
from nbagent.models.reply import ModelSettings

if TYPE_CHECKING:
    from nbagent.gate.deciders import Decider
    from nbagent.store import Store


class ModelOptions(BaseModel):
    """The model an agent calls and how: each field is the `Agent` keyword of the same name (`params` is
    `model_params`).

    - `model`: any litellm model (`provider/name`); optional with `script`, `function` or `replay`.
    - `script`: turns for the offline scripted model (a path, or the turns themselves).
    - `function`: a Python function that plays the model (`nbagent/function`).
    - `local_model`: an offline model object (models.base.LocalModel), used as given.
    - `replay`: a run id: replay that run's recorded model replies (and, unless a decider is given, its decisions).
    - `api_base`, `api_key`: where and with what the model is called (the key is redacted from every event).
    - `timeout`: the deadline of a model call (seconds, to its reply's end, streamed or not); `max_retries`,
      `retry_base`, `retry_cap`: retries of transient failures, waiting `retry_base * 2**n` seconds up to
      `retry_cap` (also the backoff of tool retries).
    - `params`: further litellm arguments (temperature, max_tokens...).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: str | None = None
    script: Any = None
    function: Callable[..., Any] | None = None
    local_model: LocalModel | None = None
    replay: str | None = None
    api_base: str | None = None
    api_key: str | None = None
    timeout: float = 120.0
    max_retries: int = 4
    retry_base: float = 0.5
    retry_cap: float = 20.0
    params: dict[str, Any] = Field(default_factory=dict)


@dataclass
class ChosenModel:
    """What `choose_model` decided: the call settings, the offline model (and its provider key), whether the
    recorded calls keep the model's ids (a recording from before nbagent named calls), a replay's decider."""

    settings: ModelSettings
    local: LocalModel | None = None
    local_key: str | None = None
    legacy_ids: bool = False
    decider: Decider | None = None


def choose_model(options: ModelOptions, store: Store, *, with_decider: bool = True) -> ChosenModel:
    """The model `options` name, in this precedence: a replay, a script, a function, then `model`/`local_model`
    (`with_decider`: a replay also brings the decider that answers as the recording did). Raises ValueError when
    none is named."""
    model = options.model
    local: LocalModel | None = options.local_model
    legacy_ids = False
    decider: Decider | None = None
    if options.replay is not None:
        from nbagent.gate.deciders import RecordedDecider
        from nbagent.models.replay import ReplayModel
        from nbagent.runtime.recording import recorded_calls, recorded_events

        recording = recorded_calls(store, options.replay)
        local = ReplayModel(recording, source=f"run {options.replay}")
        # a recording from before nbagent named the calls itself is replayed with the model's ids, so the
        # replayed requests are the recorded ones; keys stay unique in the run either way (approval.identify)
        legacy_ids = any(c.call_ids is None and c.response_calls for c in recording)
        if with_decider:
            decider = RecordedDecider.from_events(recorded_events(store, options.replay), options.replay)
        model = "nbagent/replay"
    elif options.script is not None:
        from nbagent.models.scripted import ScriptedModel

        local = ScriptedModel(options.script)
        model = model or "nbagent/scripted"
    elif options.function is not None:
        from nbagent.models.function import FunctionModel

        local = FunctionModel(options.function)
        model = model or "nbagent/function"
    if model is None:
        raise ValueError("no model: pass model='provider/name' (any litellm model), or script=PATH for the "
                         "offline scripted model")
    local_key: str | None = None
    if local is not None:
        from nbagent.models.provider import register_local

        local_key = register_local(local)
    settings = ModelSettings(
        model=model, api_base=options.api_base, api_key=SecretStr(options.api_key) if options.api_key else None,
        timeout=options.timeout, max_retries=options.max_retries, retry_base=options.retry_base,
        retry_cap=options.retry_cap, params=options.params,
    )
    return ChosenModel(settings=settings, local=local, local_key=local_key, legacy_ids=legacy_ids, decider=decider)


__all__ = ["ChosenModel", "ModelOptions", "choose_model"]
