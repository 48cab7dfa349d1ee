"""The embedder runtime (memory/embeddings.py) without the database: ONNX and
PyTorch compute the same vectors, the query cache, micro-batching of concurrent
requests, the circuit breaker, and one error type for every failure."""

from __future__ import annotations

import hashlib
import threading

import numpy as np
import pytest

from memory.embeddings import CircuitBreaker, LocalEmbedder, MicroBatcher, ResilientEmbedder
from memory.errors import EmbeddingUnavailable

TEXTS = [
    "what does Maria like to eat",
    "Yesterday Tom went hiking in the Alps and felt relieved. Follow up with Omar about the budget.",
    "Always confirm the deployment checklist before deploying to production.",
    "",
    "ünïcödé, emoji 🙂 and punctuation!?",
    "a very long memory " * 300,  # past the 256-token window: both must truncate the same way
]


def fake_vector(text: str) -> list[float]:
    """A deterministic unit vector per text, so a mixed-up split shows."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "little")
    v = np.random.default_rng(seed).standard_normal(384)
    return (v / np.linalg.norm(v)).tolist()


class CountingEmbedder:
    model_name = "fake-model"
    dimensions = 384

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [fake_vector(t) for t in texts]


class RaisingEmbedder:
    model_name = "fake-model"
    dimensions = 384

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc
        self.calls = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        raise self.exc


def resilient(inner, **kwargs) -> ResilientEmbedder:  # type: ignore[no-untyped-def]
    kwargs.setdefault("breaker", CircuitBreaker(failures=3, cooldown=60.0))
    kwargs.setdefault("window", 0.0)
    kwargs.setdefault("max_batch", 64)
    kwargs.setdefault("cache_size", 4)
    return ResilientEmbedder(inner, **kwargs)


@pytest.mark.slow
def test_onnx_and_torch_compute_the_same_model():
    onnx = LocalEmbedder(backend="onnx")
    torch = LocalEmbedder(backend="torch")
    a = np.asarray(onnx.embed(TEXTS))
    b = np.asarray(torch.embed(TEXTS))
    assert onnx.backend == "onnx" and torch.backend == "torch"
    assert onnx.model_name == torch.model_name  # one name recorded per memory for both paths
    assert a.shape == b.shape == (len(TEXTS), 384)
    cosines = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosines.min() > 0.999, cosines
    # The batch order (ONNX sorts by length to limit padding) does not change a text's vector.
    single = np.asarray(onnx.embed([TEXTS[1]]))[0]
    assert float(single @ a[1]) > 0.9999


@pytest.mark.slow
def test_a_small_pass_runs_on_the_calling_thread_and_a_large_one_on_every_stream_with_the_same_vectors(
    monkeypatch,
):
    import threading

    from memory.embeddings import OnnxBackend, _model_dir, onnx_model_path

    model_dir = _model_dir()
    path = onnx_model_path(model_dir)
    if not path.exists():
        LocalEmbedder(backend="onnx").embed(["export the graph"])
    streams, single = OnnxBackend(path, model_dir, threads=2), OnnxBackend(path, model_dir, threads=1)
    assert streams._session.get_session_options().intra_op_num_threads == 1
    ran_on: list[str] = []
    real_run = type(streams._session).run

    def run(session, *args, **kwargs):
        ran_on.append(threading.current_thread().name)
        return real_run(session, *args, **kwargs)

    monkeypatch.setattr(type(streams._session), "run", run)
    streams.embed(TEXTS[: OnnxBackend.SMALL_PASS])
    assert ran_on == [threading.current_thread().name]
    # Three chunks per stream, shorter texts first: each of the two streams runs some.
    texts = [f"{TEXTS[i % len(TEXTS)]} {'more ' * (i % 7)}{i}" for i in range(OnnxBackend.CHUNK * 6)]
    ran_on.clear()
    on_two_streams = np.asarray(streams.embed(texts))
    assert len(ran_on) == 6 and set(ran_on) == {threading.current_thread().name, "onnx-stream"}
    # A vector does not depend on how many streams computed its pass: stored and queried texts compare equal.
    ran_on.clear()
    assert np.array_equal(on_two_streams, np.asarray(single.embed(texts)))
    assert set(ran_on) == {threading.current_thread().name}
    # Eight texts on two streams: two passes of four, not one pass on one thread while the other core idles.
    ran_on.clear()
    streams.embed(texts[:8])
    assert len(ran_on) == 2


def test_a_failing_stream_raises_on_the_calling_thread_and_the_others_stop(monkeypatch):
    from memory.embeddings import OnnxBackend, _model_dir, onnx_model_path

    model_dir = _model_dir()
    path = onnx_model_path(model_dir)
    if not path.exists():
        LocalEmbedder(backend="onnx").embed(["export the graph"])
    backend = OnnxBackend(path, model_dir, threads=2)
    calls: list[int] = []

    def run(session, *args, **kwargs):
        calls.append(1)
        raise RuntimeError("the runtime failed")

    monkeypatch.setattr(type(backend._session), "run", run)
    texts = [f"text {i}" for i in range(OnnxBackend.CHUNK * 8)]
    with pytest.raises(RuntimeError, match="the runtime failed"):
        backend.embed(texts)
    assert len(calls) <= 2  # one failure per stream at most, not one per chunk


def test_onnx_failure_falls_back_to_torch(monkeypatch):
    from memory import embeddings

    def broken(*args, **kwargs):
        raise RuntimeError("onnxruntime is not installed")

    monkeypatch.setattr(embeddings, "OnnxBackend", broken)
    local = LocalEmbedder(backend="onnx")
    [vector] = local.embed(["fallback"])
    assert local.backend == "torch" and len(vector) == 384


def test_int8_precision_records_its_own_model_name():
    from memory.embedtext import embedding_identity

    fp32 = LocalEmbedder(backend="onnx")
    int8 = LocalEmbedder(backend="onnx", precision="int8")
    assert fp32.model_name == "all-MiniLM-L6-v2"
    assert int8.model_name == "all-MiniLM-L6-v2+int8"
    # The identity stored per vector differs in every text version, so the re-embed sweep catches up.
    for version in ("plain", "ctx1short"):
        for in_session in (True, False):
            assert embedding_identity(int8.model_name, in_session=in_session, version=version) != embedding_identity(
                fp32.model_name, in_session=in_session, version=version
            )
    with pytest.raises(ValueError):
        LocalEmbedder(precision="fp16")
    with pytest.raises(ValueError):
        LocalEmbedder(backend="torch", precision="int8")


def test_int8_failure_does_not_fall_back_to_torch(monkeypatch, tmp_path):
    from memory import embeddings

    def broken(*args, **kwargs):
        raise RuntimeError("onnxruntime is not installed")

    monkeypatch.setattr(embeddings, "onnx_model_path", lambda model_dir=None: tmp_path / "m.onnx")
    monkeypatch.setattr(embeddings, "export_onnx", lambda *args, **kwargs: None)
    monkeypatch.setattr(embeddings, "quantize_onnx", lambda *args, **kwargs: None)
    monkeypatch.setattr(embeddings, "OnnxBackend", broken)
    local = LocalEmbedder(backend="onnx", precision="int8")
    with pytest.raises(RuntimeError):
        local.embed(["no fp32 vectors under the int8 name"])
    assert not local.loaded


@pytest.mark.slow
def test_int8_graph_gives_unit_vectors_close_to_fp32():
    fp32 = LocalEmbedder(backend="onnx")
    int8 = LocalEmbedder(backend="onnx", precision="int8")
    a = np.asarray(fp32.embed(TEXTS))
    b = np.asarray(int8.embed(TEXTS))
    assert int8.backend == "onnx"
    assert b.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-4)
    cosines = (a * b).sum(axis=1)
    assert cosines.min() > 0.97, cosines
    assert cosines.max() < 0.99999, cosines  # it is the quantized graph, not the fp32 one again
    # Ranking survives: each text's nearest neighbour among the others is the same.
    self_match = 2 * np.eye(len(TEXTS))
    assert ((a @ a.T) - self_match).argmax(1).tolist() == ((b @ b.T) - self_match).argmax(1).tolist()


def test_query_cache_answers_repeats_without_the_model():
    inner = CountingEmbedder()
    embedder = resilient(inner, cache_size=2)
    first = embedder.embed_query("alpha")
    assert embedder.embed_query("alpha") == first
    assert len(inner.calls) == 1
    embedder.embed_query("beta")
    embedder.embed_query("gamma")  # evicts alpha (least recently used)
    embedder.embed_query("alpha")
    assert [c[0] for c in inner.calls] == ["alpha", "beta", "gamma", "alpha"]
    first.append(1.0)  # a caller mutating its list does not poison the cache
    assert len(embedder.embed_query("alpha")) == 384


def test_requests_waiting_together_share_one_forward_pass():
    release = threading.Event()
    passes: list[list[str]] = []

    def run(texts: list[str]) -> list[list[float]]:
        passes.append(list(texts))
        if len(passes) == 1:
            release.wait(30)  # the first pass is "running" while the others arrive
        return [fake_vector(t) for t in texts]

    batcher = MicroBatcher(run, window=0.0, max_batch=64)
    first = batcher.submit(["t0"])
    while not passes:  # the dispatcher picked up the first request
        threading.Event().wait(0.01)
    waiting = [batcher.submit([f"t{i}", f"u{i}"]) for i in range(1, 8)]
    release.set()
    assert first.result(30) == [fake_vector("t0")]
    for i, future in enumerate(waiting, start=1):
        assert future.result(30) == [fake_vector(f"t{i}"), fake_vector(f"u{i}")]
    assert len(passes) == 2 and len(passes[1]) == 14  # seven requests, one pass


def test_concurrent_callers_each_get_their_own_vectors():
    inner = CountingEmbedder()
    embedder = resilient(inner, window=0.002)
    results: dict[str, list[float]] = {}
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            for j in range(5):
                text = f"caller {i} text {j}"
                results[text] = embedder.embed([text], timeout=30)[0]
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert len(results) == 80 and all(v == fake_vector(k) for k, v in results.items())
    assert sum(len(c) for c in inner.calls) == 80
    assert embedder.batcher.passes == len(inner.calls) <= 80


@pytest.mark.parametrize(
    "exc",
    [
        RuntimeError("CUDA out of memory"),
        OSError("model.safetensors: no such file"),  # a model-load error
        ValueError("Expecting value: line 1 column 1 (char 0)"),  # malformed JSON
        KeyError("data"),
        EmbeddingUnavailable("endpoint said 503"),
    ],
)
def test_any_failure_is_reported_as_embedding_unavailable(exc):
    embedder = resilient(RaisingEmbedder(exc))
    with pytest.raises(EmbeddingUnavailable):
        embedder.embed(["x"], timeout=5)
    with pytest.raises(EmbeddingUnavailable):
        embedder.embed_query("x")


def test_a_query_started_early_is_embedded_meanwhile_and_fails_only_when_awaited():
    """embed_query_later (issue 13: reads run their keyword channel while the query
    is embedded): the work starts at once, the wait returns the vector (cached
    like embed_query's), and a failure surfaces at the wait, counted by the breaker."""
    inner = CountingEmbedder()
    embedder = resilient(inner)
    wait = embedder.embed_query_later("alpha")
    assert wait() == fake_vector("alpha") and inner.calls == [["alpha"]]
    assert embedder.embed_query_later("alpha")() == fake_vector("alpha") and len(inner.calls) == 1  # cached
    breaker = CircuitBreaker(failures=1, cooldown=60.0)
    failing = resilient(RaisingEmbedder(RuntimeError("boom")), breaker=breaker)
    wait = failing.embed_query_later("beta")  # does not raise yet
    with pytest.raises(EmbeddingUnavailable):
        wait()
    assert breaker.state == "open"


def test_wrong_vector_size_is_a_failure():
    class Short(CountingEmbedder):
        def embed(self, texts):
            return [[0.0] * 12 for _ in texts]

    with pytest.raises(EmbeddingUnavailable, match="wrong size"):
        resilient(Short()).embed(["x"], timeout=5)


def test_breaker_opens_after_repeated_failures_and_probes_after_cooldown():
    now = [0.0]
    breaker = CircuitBreaker(failures=3, cooldown=30.0, clock=lambda: now[0])
    inner = RaisingEmbedder(RuntimeError("down"))
    embedder = resilient(inner, breaker=breaker)
    for _ in range(3):
        with pytest.raises(EmbeddingUnavailable):
            embedder.embed(["x"], timeout=5)
    assert breaker.state == "open" and inner.calls == 3
    for _ in range(10):  # open: fail fast, the embedder is not called at all
        with pytest.raises(EmbeddingUnavailable, match="paused after repeated failures"):
            embedder.embed(["x"], timeout=5)
    assert inner.calls == 3

    now[0] = 31.0  # half-open: one probe goes through; it fails, so the breaker re-opens
    with pytest.raises(EmbeddingUnavailable, match="down"):
        embedder.embed(["x"], timeout=5)
    assert inner.calls == 4 and breaker.state == "open"

    now[0] = 62.0  # the embedder has recovered: the probe succeeds and closes the breaker
    embedder.inner = CountingEmbedder()
    embedder.batcher._run = embedder.inner.embed
    assert len(embedder.embed(["x"], timeout=5)[0]) == 384
    assert breaker.state == "closed"


def test_a_hanging_embedder_costs_a_bounded_wait_then_nothing(settings):
    settings.MEMPROJ_EMBEDDER = {**settings.MEMPROJ_EMBEDDER, "QUERY_TIMEOUT_SECONDS": 0.2}
    stop = threading.Event()
    calls = []

    class Hanging(CountingEmbedder):
        def embed(self, texts):
            calls.append(texts)
            stop.wait(60)
            return [fake_vector(t) for t in texts]

    embedder = resilient(Hanging(), breaker=CircuitBreaker(failures=2, cooldown=600.0))
    try:
        for _ in range(2):
            with pytest.raises(EmbeddingUnavailable, match="did not answer"):
                embedder.embed_query("hello")  # waits QUERY_TIMEOUT_SECONDS
        for _ in range(20):
            with pytest.raises(EmbeddingUnavailable, match="paused after repeated failures"):
                embedder.embed_query("hello")
        assert len(calls) == 1  # the second request was still queued behind the hung pass
    finally:
        stop.set()


def test_an_idle_dispatcher_exits_and_the_next_request_restarts_it(monkeypatch):
    monkeypatch.setattr(MicroBatcher, "IDLE_EXIT_SECONDS", 0.05)
    batcher = MicroBatcher(lambda texts: [fake_vector(t) for t in texts], window=0.0)
    assert batcher.submit(["one"]).result(30) == [fake_vector("one")]
    while batcher._pid != -1:  # the dispatcher notices it is idle and leaves
        threading.Event().wait(0.02)
    assert batcher.submit(["two"]).result(30) == [fake_vector("two")]


class GatedEmbedder(CountingEmbedder):
    """Holds every forward pass until released, so callers can pile up."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        self.release.wait(30)
        return [fake_vector(t) for t in texts]


@pytest.mark.parametrize("cache_size", [0, 4])
def test_reads_of_one_query_in_flight_share_its_forward_pass(cache_size):
    inner = GatedEmbedder()
    embedder = resilient(inner, cache_size=cache_size)
    waits = [embedder.embed_query_later("same question") for _ in range(3)]
    other = embedder.embed_query_later("another question")
    inner.release.set()
    assert [w() for w in waits] == [fake_vector("same question")] * 3
    assert other() == fake_vector("another question")
    assert sorted(t for call in inner.calls for t in call) == ["another question", "same question"]
    # Once answered, the query is no longer in flight: with no cache, a new read embeds again.
    embedder.embed_query("same question")
    assert sum(call.count("same question") for call in inner.calls) == (1 if cache_size else 2)


def test_a_failed_pass_fails_every_read_that_shared_it():
    inner = RaisingEmbedder(RuntimeError("model crashed"))
    embedder = resilient(inner, breaker=CircuitBreaker(failures=2, cooldown=60.0))
    waits = [embedder.embed_query_later("q") for _ in range(2)]
    for wait in waits:
        with pytest.raises(EmbeddingUnavailable):
            wait()
    assert inner.calls == 1
    # The breaker counted one failure (the pass), not one per waiting read (two would open it).
    assert embedder.breaker.allow()
