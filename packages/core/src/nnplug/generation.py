"""Autoregressive decoding of a text model exported with its key/value cache in optimum's
layout.

The layout (what ``optimum-cli export onnx --task text-generation-with-past`` writes):

- inputs ``input_ids`` [batch, seq], ``attention_mask`` [batch, past + seq], optionally
  ``position_ids`` [batch, seq], and per layer ``past_key_values.<i>.key`` and
  ``past_key_values.<i>.value`` [batch, kv_heads, past, head_dim];
- outputs ``logits`` [batch, seq, vocab] and per layer ``present.<i>.key`` and
  ``present.<i>.value`` [batch, kv_heads, past + seq, head_dim].

The model runs once on the prompt, with pasts of length 0, and once per new token, each step's
presents fed back as the next step's pasts::

    from nnplug.generation import generate

    tokens = generate(session, [1, 2, 3], max_new_tokens=16)

``session`` is anything with onnxruntime's ``get_inputs`` / ``get_outputs`` / ``run``
(``nnplug.InferenceSession``, ``nnplug.onnxruntime.InferenceSession``, onnxruntime's own) or
an :class:`nnplug.Network`. The layer count, head counts, head sizes and dtypes are read from the
model's inputs. On nnplug the caches stay where the backend made them between steps (see
:class:`Decoder`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError, ModelError
from .last_logits import last_position_logits  # noqa: F401 - part of this module's API

INPUT_IDS, ATTENTION_MASK, POSITION_IDS, LOGITS = (
    "input_ids", "attention_mask", "position_ids", "logits")
PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")
PRESENT = "present.{}.{}"

_DTYPES = {"float": np.float32, "float16": np.float16, "double": np.float64,
           "int64": np.int64, "int32": np.int32}


# -- the layout -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Port:
    """One input or output as the loop needs it: name, numpy dtype, shape (ints, names of
    symbolic dims, None)."""

    name: str
    dtype: np.dtype | None
    shape: tuple | None


@dataclass(frozen=True)
class CacheLayout:
    """What :func:`read_layout` found: the names to feed and fetch and the caches' shapes."""

    input_ids: Port
    attention_mask: Port
    position_ids: Port | None
    pasts: tuple[tuple[Port, Port], ...]
    """Per layer (key, value) inputs, layer 0 first."""
    presents: tuple[str, ...]
    """Per layer present key and value output names, in the order of ``pasts`` flattened."""
    logits: Port

    @property
    def layers(self) -> int:
        return len(self.pasts)

    @property
    def vocab(self) -> int | None:
        d = self.logits.shape[-1] if self.logits.shape else None
        return d if isinstance(d, int) else None

    def empty_pasts(self, batch: int) -> dict[str, np.ndarray]:
        """Pasts of length 0: what the first step (the prompt) is fed."""
        return {p.name: np.zeros((batch, p.shape[1], 0, p.shape[3]), p.dtype)
                for pair in self.pasts for p in pair}


def _dtype_of_type(type_string: str) -> np.dtype | None:
    m = re.fullmatch(r"tensor\((\w+)\)", type_string or "")
    dt = _DTYPES.get(m.group(1)) if m else None
    return np.dtype(dt) if dt is not None else None


def _ports(args) -> list[Port]:
    """Ports of nnplug ValueInfos or onnxruntime NodeArgs."""
    ports = []
    for a in args:
        if hasattr(a, "dtype"):  # nnplug.ValueInfo
            dtype = np.dtype(a.dtype) if a.dtype is not None else None
            ports.append(Port(a.name, dtype, tuple(a.shape) if a.shape is not None else None))
        else:  # NodeArg: type "tensor(float)", shape a list
            shape = a.shape if isinstance(a.shape, (list, tuple)) else None
            ports.append(Port(a.name, _dtype_of_type(a.type), tuple(shape) if shape else shape))
    return ports


def describe(model) -> tuple[list[Port], list[Port]]:
    """(inputs, outputs) of a session or an :class:`nnplug.Network`."""
    if hasattr(model, "get_inputs") and hasattr(model, "get_outputs"):
        return _ports(model.get_inputs()), _ports(model.get_outputs())
    if hasattr(model, "inputs") and hasattr(model, "run_tensors"):
        return _ports(model.inputs), _ports(model.outputs)
    raise ArgumentTypeError(
        f"generate() drives an InferenceSession (nnplug's, nnplug.onnxruntime's or "
        f"onnxruntime's) or an nnplug.Network, not {type(model).__name__}")


def read_layout(inputs: list[Port], outputs: list[Port]) -> CacheLayout:
    """The model's cache layout, or a ModelError naming everything that does not fit."""
    by_in = {p.name: p for p in inputs}
    by_out = {p.name: p for p in outputs}
    problems = []
    layers: dict[int, dict[str, Port]] = {}
    for p in inputs:
        m = PAST.fullmatch(p.name)
        if m:
            layers.setdefault(int(m.group(1)), {})[m.group(2)] = p
    for name in (INPUT_IDS, ATTENTION_MASK):
        if name not in by_in:
            problems.append(f"no input {name!r}")
    if LOGITS not in by_out:
        problems.append(f"no output {LOGITS!r}")
    if not layers:
        problems.append("no inputs 'past_key_values.<i>.key' / 'past_key_values.<i>.value' "
                        "(a model exported without its cache: optimum's --task text-generation "
                        "instead of text-generation-with-past)")
    count = max(layers, default=-1) + 1
    pasts, presents = [], []
    for i in range(count):
        pair = layers.get(i, {})
        for kind in ("key", "value"):
            name = f"past_key_values.{i}.{kind}"
            if kind not in pair:
                problems.append(f"no input {name!r} (the model has layers 0..{count - 1})")
                continue
            why = _cache_problem(pair[kind])
            if why:
                problems.append(f"input {name!r} {why}")
            present = PRESENT.format(i, kind)
            if present not in by_out:
                problems.append(f"no output {present!r} for input {name!r}")
            presents.append(present)
        if len(pair) == 2:
            pasts.append((pair["key"], pair["value"]))
    known = {INPUT_IDS, ATTENTION_MASK, POSITION_IDS}
    extra = [p.name for p in inputs if p.name not in known and not PAST.fullmatch(p.name)]
    if extra:
        problems.append(f"input(s) {', '.join(map(repr, extra))} that the layout does not have "
                        f"(it feeds only {INPUT_IDS}, {ATTENTION_MASK}, {POSITION_IDS} and the "
                        f"pasts; a merged decoder with use_cache_branch is not supported)")
    for name in (INPUT_IDS, ATTENTION_MASK, POSITION_IDS):
        p = by_in.get(name)
        if p is not None and p.dtype not in (np.dtype(np.int64), np.dtype(np.int32)):
            problems.append(f"input {name!r} is {p.dtype or 'of unknown type'}, not int64 or int32")
    if problems:
        have_in = ", ".join(p.name for p in inputs) or "none"
        have_out = ", ".join(p.name for p in outputs) or "none"
        raise ModelError(
            "the model is not a decoder with optimum's key/value cache layout: "
            + "; ".join(problems)
            + f". Its inputs: {have_in}. Its outputs: {have_out}. Export it with optimum "
              f"(optimum-cli export onnx --task text-generation-with-past) or as "
              f"docs/decoding.md describes")
    return CacheLayout(by_in[INPUT_IDS], by_in[ATTENTION_MASK], by_in.get(POSITION_IDS),
                       tuple(pasts), tuple(presents), by_out[LOGITS])


def _cache_problem(p: Port) -> str | None:
    if p.dtype is None or p.dtype.kind != "f":
        return f"is {p.dtype or 'of unknown type'}, not a float type"
    if p.shape is None or len(p.shape) != 4:
        return (f"has shape {list(p.shape) if p.shape is not None else 'unknown'}, not "
                f"[batch, kv_heads, past, head_dim]")
    if not (isinstance(p.shape[1], int) and isinstance(p.shape[3], int)):
        return (f"has shape {list(p.shape)}: the head count (dim 1) and head size (dim 3) "
                f"must be fixed numbers to make its first, empty past")
    return None


# -- running one step -------------------------------------------------------------------------
class _Calls:
    """Every step through ``run``: the API all sessions share."""

    def __init__(self, session, names: list[str]):
        self.session, self.names = session, names

    def __call__(self, feeds: dict) -> list:
        return self.session.run(self.names, feeds)


class _Tensors:
    """An nnplug Network: outputs stay where their backend made them (Tensors), fed back as
    they are."""

    def __init__(self, net, names: list[str]):
        self.net, self.names = net, names

    def __call__(self, feeds: dict) -> list:
        out = self.net.run_tensors(feeds, self.names)
        return [out[n] for n in self.names]


class _Bound:
    """An nnplug InferenceSession through its IO binding: every output bound where its backend
    makes it, so the presents come back as Tensors (on the device, for a device backend) and
    are bound as the next step's pasts without a copy to the host and back."""

    def __init__(self, session, names: list[str]):
        from .session import InferenceSession, IOBinding

        self.session, self.names = session, names
        self.binding = IOBinding(session)  # nnplug's own, also under nnplug.onnxruntime's class
        self._run = InferenceSession.run_with_iobinding
        for n in names:
            self.binding.bind_output(n)

    def __call__(self, feeds: dict) -> list:
        self.binding.clear_binding_inputs()
        for name, value in feeds.items():
            self.binding.bind_input(name, value)
        self._run(self.session, self.binding)
        return self.binding.get_outputs()


def _host(value) -> np.ndarray:
    return value if isinstance(value, np.ndarray) else np.asarray(value.numpy())


class Decoder:
    """Runs a cache-layout model step by step: :meth:`start` on the prompt, :meth:`step` per
    token; both return the logits of each row's last position, [batch, vocab], as numpy.

    ``io_binding``: on an ``nnplug.InferenceSession``, run through its IO binding so the
    presents are bound as the next pasts where the backend left them (a device backend's
    caches stay on the device). None (the default) uses it when a backend the session runs on
    keeps its values off the host, where it saves two copies of every cache a step; on the
    host it saves nothing (see docs/decoding.md).
    """

    def __init__(self, model, *, io_binding: bool | None = None):
        inputs, outputs = describe(model)
        self.layout = read_layout(inputs, outputs)
        names = [LOGITS, *self.layout.presents]
        from .network import Network
        from .session import InferenceSession

        if isinstance(model, Network):
            self._run = _Tensors(model, names)
        elif isinstance(model, InferenceSession) and (
                io_binding if io_binding is not None else _off_host(model)):
            self._run = _Bound(model, names)
        elif io_binding:
            raise InvalidArgumentError(
                f"io_binding=True needs an nnplug.InferenceSession, not {type(model).__module__}."
                f"{type(model).__name__}")
        else:
            self._run = _Calls(model, names)
        self.io_binding = isinstance(self._run, _Bound)
        self.batch = 0
        self.past_length = 0
        self._pasts: dict = {}
        self._past_names = [p.name for pair in self.layout.pasts for p in pair]

    def start(self, prompt_ids) -> np.ndarray:
        """Run the prompt ([seq] or [batch, seq] token ids) with empty pasts."""
        ids = _ids(prompt_ids, self.layout)
        self.batch, seq = ids.shape
        self.past_length = 0
        self._pasts = self.layout.empty_pasts(self.batch)
        return self._advance(ids)

    def step(self, tokens) -> np.ndarray:
        """Run one token per row ([batch] ids) over the cache."""
        if not self.batch:
            raise InvalidArgumentError("Decoder.step before Decoder.start: run the prompt first")
        ids = np.asarray(tokens)
        if ids.size != self.batch:
            raise InvalidArgumentError(f"Decoder.step takes one token per row: {self.batch}, "
                                       f"not {ids.size}")
        return self._advance(_ids(ids.reshape(self.batch, 1), self.layout))

    def _advance(self, ids: np.ndarray) -> np.ndarray:
        lay, (batch, seq) = self.layout, ids.shape
        total = self.past_length + seq
        feeds = {lay.input_ids.name: ids.astype(lay.input_ids.dtype, copy=False),
                 lay.attention_mask.name: np.ones((batch, total), lay.attention_mask.dtype)}
        if lay.position_ids is not None:
            pos = np.arange(self.past_length, total, dtype=lay.position_ids.dtype).reshape(1, seq)
            # every row the same positions (a copy only for batches: broadcast_to's view and
            # its copy were a tenth of a small step's Python)
            feeds[lay.position_ids.name] = pos if batch == 1 else np.repeat(pos, batch, axis=0)
        feeds.update(self._pasts)
        logits, *presents = self._run(feeds)
        self._pasts = dict(zip(self._past_names, presents))
        self.past_length = total
        last = _host(logits)
        if last.ndim != 3 or last.shape[0] != batch or last.shape[1] not in (seq, 1):
            raise ModelError(f"output {lay.logits.name!r} is {list(last.shape)}; the layout "
                             f"needs [batch, seq, vocab] = [{batch}, {seq}, vocab] (or "
                             f"[{batch}, 1, vocab]: the last position's, see "
                             f"last_position_logits)")
        return last[:, -1, :]


def _off_host(session) -> bool:
    """Whether a backend of the session keeps values in device memory."""
    backends = session._runtime.backends
    for bid in session._providers:  # backend ids (nnplug.onnxruntime's get_providers: names)
        info = backends.get(bid)
        if info is not None and str(info.device_type) != "cpu":
            return True
    return False


def _ids(values, layout: CacheLayout) -> np.ndarray:
    ids = np.asarray(values)
    if ids.ndim == 1:
        ids = ids[None, :]
    if ids.ndim != 2 or ids.shape[0] == 0 or ids.shape[1] == 0:
        raise InvalidArgumentError(f"token ids must be [seq] or [batch, seq] with at least one "
                                   f"token, not shape {list(ids.shape)}")
    if ids.dtype.kind not in "iu":
        raise InvalidArgumentError(f"token ids must be integers, not {ids.dtype}")
    vocab = layout.vocab
    bad = ids[(ids < 0) | (ids >= vocab)] if vocab else ids[ids < 0]
    if bad.size:
        span = f"0..{vocab - 1}" if vocab else ">= 0"
        raise InvalidArgumentError(f"token id {int(bad.flat[0])} is outside the model's "
                                   f"vocabulary ({span})")
    return ids.astype(np.int64, copy=False)


# -- choosing the next token ------------------------------------------------------------------
@dataclass(frozen=True)
class Sampling:
    """How the next token is drawn; :func:`generate`'s arguments, checked."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (isinstance(self.temperature, (int, float)) and self.temperature > 0):
            raise InvalidArgumentError(f"temperature must be a number > 0, not {self.temperature!r}")
        if not (isinstance(self.top_k, (int, np.integer)) and not isinstance(self.top_k, bool)
                and self.top_k >= 0):
            raise InvalidArgumentError(f"top_k must be an int >= 0 (0: no limit), not "
                                       f"{self.top_k!r}")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise InvalidArgumentError(f"top_p must be in (0, 1], not {self.top_p!r}")

    def probabilities(self, logits: np.ndarray) -> np.ndarray:
        """[batch, vocab] logits -> the distribution tokens are drawn from (float64): scaled by
        the temperature, cut to the top_k most likely, then to the fewest most likely whose
        total reaches top_p (transformers' order and rules)."""
        x = logits.astype(np.float64) / self.temperature
        if 0 < self.top_k < x.shape[-1]:
            kth = np.partition(x, -self.top_k, axis=-1)[:, -self.top_k][:, None]
            x = np.where(x < kth, -np.inf, x)
        x = x - x.max(axis=-1, keepdims=True)
        p = np.exp(x)
        p /= p.sum(axis=-1, keepdims=True)
        if self.top_p < 1:
            order = np.argsort(-p, axis=-1, kind="stable")
            sorted_p = np.take_along_axis(p, order, axis=-1)
            before = np.cumsum(sorted_p, axis=-1) - sorted_p  # mass of the likelier tokens
            drop = np.zeros_like(p, dtype=bool)
            np.put_along_axis(drop, order, before >= self.top_p, axis=-1)
            p = np.where(drop, 0.0, p)
            p /= p.sum(axis=-1, keepdims=True)
        return p

    def draw(self, logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One token per row: the inverse of each row's cumulative distribution at a uniform
        draw (one ``rng.random`` per row, so the same seed gives the same tokens)."""
        p = self.probabilities(logits)
        cdf = np.cumsum(p, axis=-1)
        u = rng.random(p.shape[0]) * cdf[:, -1]
        picks = np.array([np.searchsorted(c, x, side="right") for c, x in zip(cdf, u)])
        # a draw past the last kept token (rounding) takes the last token with mass
        last = p.shape[-1] - 1 - np.argmax(p[:, ::-1] > 0, axis=-1)
        return np.minimum(picks, last).astype(np.int64)


def _stop_ids(eos_token_id) -> list[int]:
    if eos_token_id is None:
        return []
    ids = [eos_token_id] if isinstance(eos_token_id, (int, np.integer)) else list(eos_token_id)
    for t in ids:
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or t < 0:
            raise InvalidArgumentError(f"eos_token_id must be token ids (ints >= 0), not {t!r}")
    return [int(t) for t in ids]


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    if seed is None or (isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)):
        return np.random.default_rng(seed)
    raise InvalidArgumentError(f"seed must be an int, a numpy Generator or None, not {seed!r}")


def generate(model, prompt_ids: Sequence[int] | np.ndarray, max_new_tokens: int, *,
             do_sample: bool = False, temperature: float | None = None,
             top_k: int | None = None, top_p: float | None = None,
             eos_token_id: int | Iterable[int] | None = None, pad_token_id: int | None = None,
             seed: int | np.random.Generator | None = None,
             io_binding: bool | None = None) -> np.ndarray:
    """Generate up to ``max_new_tokens`` tokens after ``prompt_ids`` with a model in optimum's
    cache layout (see the module's docstring); the new tokens, int64.

    - ``prompt_ids``: [seq] token ids (the result is [new]) or [batch, seq], rows of equal
      length (the result is [batch, new]).
    - greedy (the most likely token) by default; ``do_sample=True`` draws from the softmax of
      the logits after ``temperature`` (default 1), ``top_k`` (0: all) and ``top_p`` (1: all).
      ``seed`` (an int or a ``numpy.random.Generator``): the same seed gives the same tokens.
    - ``eos_token_id``: one id or several; a row stops after it makes one (the stop token is
      the last of its result). With a batch, rows that stopped are fed and filled with
      ``pad_token_id`` (default: the first stop token) until every row has stopped.
    - ``io_binding``: see :class:`Decoder`.
    """
    if not isinstance(max_new_tokens, (int, np.integer)) or isinstance(max_new_tokens, bool) \
            or max_new_tokens < 0:
        raise InvalidArgumentError(f"max_new_tokens must be an int >= 0, not {max_new_tokens!r}")
    if not do_sample and (temperature, top_k, top_p) != (None, None, None):
        raise InvalidArgumentError("temperature, top_k and top_p choose how tokens are sampled: "
                                   "pass do_sample=True with them (greedy decoding takes the "
                                   "most likely token)")
    sampling = Sampling(1.0 if temperature is None else temperature, top_k or 0,
                        1.0 if top_p is None else top_p) if do_sample else None
    stops = _stop_ids(eos_token_id)
    if pad_token_id is None:
        pad_token_id = stops[0] if stops else 0
    rng = _rng(seed) if do_sample else None
    decoder = Decoder(model, io_binding=io_binding)
    one_row = np.asarray(prompt_ids).ndim == 1
    ids = _ids(prompt_ids, decoder.layout)
    out = np.zeros((ids.shape[0], 0), np.int64)
    if max_new_tokens:
        logits = decoder.start(ids)
        done = np.zeros(ids.shape[0], bool)
        new = []
        for i in range(max_new_tokens):
            tok = sampling.draw(logits, rng) if sampling else logits.argmax(axis=-1)
            tok = np.where(done, pad_token_id, tok).astype(np.int64)
            new.append(tok)
            done |= np.isin(tok, stops)
            if done.all() or i + 1 == max_new_tokens:
                break
            logits = decoder.step(tok)
        out = np.stack(new, axis=1)
    return out[0] if one_row else out
