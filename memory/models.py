"""What is remembered. One table holds episodes, facts and rules so that one
hybrid query (pgvector HNSW + tsvector GIN) searches across kinds; the columns
that only one kind uses stay empty for the others."""

from __future__ import annotations

import collections.abc
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast
from django.db.models.lookups import Exact
from pgvector import HalfVector
from pgvector.django import CosineDistance, HalfVectorField, HnswIndex, VectorField

from memory import scoring
from policy.document import BOUNDARY_CLASSES, DEFAULT_BOUNDARY_CLASS

if TYPE_CHECKING:
    from policy.caller import Caller

EMBEDDING_DIM = 384

# The HNSW graphs index each vector at half precision (issue 13): the column keeps
# the model's float32 vector, the graphs its float16 copy, which is about half
# the size and cheaper to build, grow and walk, at almost the same recall
# against the exact top 10 (bench/graph_cost.py measures it). A read walks a graph only when it
# orders by the same expression; raw SQL (table alias m) spells it GRAPH_VECTOR_SQL.
GRAPH_VECTOR_SQL = f"m.embedding::halfvec({EMBEDDING_DIM})"


def graph_vector() -> Cast:
    """The expression the HNSW graphs index: the embedding at half precision."""
    return Cast("embedding", HalfVectorField(dimensions=EMBEDDING_DIM))


def graph_distance(vector: Sequence[float]) -> CosineDistance:
    """Cosine distance to ``vector`` as the graphs compute it (an ORM read that
    orders by it walks a graph instead of sorting every candidate)."""
    return CosineDistance(graph_vector(), HalfVector([float(x) for x in vector]))


class Kind(models.TextChoices):
    EPISODE = "episode", "Episode"
    FACT = "fact", "Fact"
    RULE = "rule", "Rule"
    # roampal's `books`: a chunk of an ingested reference document.
    DOCUMENT = "document", "Document chunk"


# The kinds the conflict check looks at: statements that can restate or
# contradict one another. An episode repeats by nature (what consolidation
# looks for); a document's chunks are one text cut in pieces, whose overlaps
# would fill the review queue and hold the worker for nothing.
CONFLICT_CHECKED_KINDS = (Kind.FACT, Kind.RULE)


class Collection(models.TextChoices):
    """roampal v0.3.5's collections, a property of a memory (not a kind): working
    and history are episodes (TTL 24 h / 30 d), patterns are rules, memory_bank
    facts, books document chunks. Empty for memories other dialects stored."""

    NONE = "", "None"
    WORKING = "working", "Working"
    HISTORY = "history", "History"
    PATTERNS = "patterns", "Patterns"
    MEMORY_BANK = "memory_bank", "Memory bank"
    BOOKS = "books", "Books"


# A memory another dialect stored has no collection of its own; roampal sees it
# as the collection of its kind (and never moves it: the lifecycle manages only
# memories that roampal stored).
COLLECTION_OF_KIND = {"episode": "history", "fact": "memory_bank", "rule": "patterns", "document": "books"}


class _Collected(Protocol):
    @property
    def collection(self) -> str: ...
    @property
    def kind(self) -> str: ...


def collection_of(memory: _Collected) -> str:
    return memory.collection or COLLECTION_OF_KIND.get(memory.kind, "")


class Validity(models.TextChoices):
    ACTIVE = "active", "Active"
    SUPERSEDED = "superseded", "Superseded"
    RETRACTED = "retracted", "Retracted"


class Maturity(models.TextChoices):
    CANDIDATE = "candidate", "Candidate"
    ESTABLISHED = "established", "Established"
    PROVEN = "proven", "Proven"
    ANTI_PATTERN = "anti_pattern", "Anti-pattern"


class EmbeddingStatus(models.TextChoices):
    READY = "ready", "Ready"
    PENDING = "pending", "Pending"
    FAILED = "failed", "Failed"


def effective_confidence_sql(table: str, now_placeholder: str) -> str:
    """scoring.effective_confidence over one memory_memory row, in SQL:
    confidence * exp(-decay_rate * days since last confirmation)."""
    return (
        f"{table}.confidence * exp(-{table}.decay_rate * greatest(0, extract(epoch from ({now_placeholder} - "
        f"coalesce({table}.last_confirmed_at, {table}.created_at))) / 86400.0))"
    )


def retrievable_q(now: object) -> Q:
    """The one definition of "retrievable": active and not past its TTL. As a Q so
    that aggregates can count with it (``Count(..., filter=retrievable_q(now))``);
    querysets use ``MemoryQuerySet.retrievable``. memory.retrieval's SQL WHERE
    clause states the same rule for the raw channel queries."""
    return Q(validity=Validity.ACTIVE) & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))


# The kinds with an HNSW graph of their own besides the graph of every memory.
KINDS_WITH_OWN_GRAPH: tuple[str, ...] = (Kind.FACT.value, Kind.RULE.value, Kind.DOCUMENT.value)

# The graph of every memory is GRAPH_GROUPS graphs, each of the memories of the
# tenants that memproj_graph_group (migration 0041: a hash of the tenant id)
# puts in it. A tenant-filtered walk of one graph shared by every tenant visits
# the other tenants' nodes too: in a small tenant beside large ones, most of the
# nodes it visits are filtered out. In its group's graph a tenant shares the
# walk only with the tenants hashed to the same group. A read names its group
# (``in_graph_group_of``) so that the planner can take that graph's partial index.
GRAPH_GROUPS = 16
GRAPH_GROUP_SQL = "memproj_graph_group(m.tenant_id) = memproj_graph_group(%(tenant)s::uuid)"


def graph_group(tenant: models.Expression | models.F | None = None) -> models.Func:
    """The graph group of a tenant id (by default a memory's own tenant): the
    expression the group graphs' predicates use."""
    tenant = models.F("tenant_id") if tenant is None else tenant
    return models.Func(tenant, function="memproj_graph_group", output_field=models.IntegerField())


def in_graph_group_of(tenant_id: uuid.UUID) -> Q:
    """The memories of ``tenant_id``'s graph group. The tenant's id is a constant
    of the statement, so the planner folds its group to a number and can match
    the group graph's predicate (raw SQL spells it GRAPH_GROUP_SQL)."""
    return Q(Exact(graph_group(), graph_group(models.Value(tenant_id, output_field=models.UUIDField()))))


def graph_group_of(tenant_id: uuid.UUID) -> int:
    """The graph group of ``tenant_id`` computed here, as memproj_graph_group
    computes it in the database (migration 0041): the last byte of the UUID,
    modulo GRAPH_GROUPS."""
    return tenant_id.bytes[15] % GRAPH_GROUPS


def graph_group_name(group: int) -> str:
    return f"memory_embedding_hnsw_g{group:02d}"


def kind_graph_name(kind: str) -> str:
    return f"memory_{kind}_hnsw"


def vector_graph_names() -> list[str]:
    """Every HNSW graph of memories: one per graph group, then one per kind with its own."""
    return [graph_group_name(g) for g in range(GRAPH_GROUPS)] + [kind_graph_name(k) for k in KINDS_WITH_OWN_GRAPH]


def _hnsw_graph(name: str, condition: Q | None = None) -> HnswIndex:
    """An HNSW graph of ``graph_vector()`` (cosine, the vector channel's metric),
    of every memory or of the rows ``condition`` selects."""
    return HnswIndex(
        OpClass(graph_vector(), name="halfvec_cosine_ops"), name=name, m=16, ef_construction=64, condition=condition
    )


def _kind_hnsw(kind: str) -> HnswIndex:
    """The HNSW graph of one kind's active memories; the planner takes it for any
    read whose filter names the kind and validity 'active', as every vector read does."""
    return _hnsw_graph(kind_graph_name(kind), Q(kind=kind, validity="active"))


def kind_search_gin_name(kind: str) -> str:
    return f"memory_{kind}_search_gin"


def keyword_index_names() -> list[str]:
    """Every GIN index of memories' words: of every memory, and one per kind."""
    return ["memory_search_vector_gin", *(kind_search_gin_name(k) for k in Kind.values)]


def _kind_search_gin(kind: str) -> GinIndex:
    """The keyword channel's index of one kind: the words of that kind's active
    memories. In the index of every memory alone, a read of some kinds gave
    every match of the others to the heap to be filtered out, one row at a time
    (a query whose words are common among a large tenant's facts sent ~10,000
    of them there for a read of its episodes, rules and documents)."""
    condition = Q(kind=kind, validity="active")
    return GinIndex(fields=["search_vector"], name=kind_search_gin_name(kind), condition=condition)


class MemoryQuerySet(models.QuerySet["Memory"]):
    def for_caller(self, caller: Caller) -> MemoryQuerySet:
        """The one place where the tenant boundary is applied to memories."""
        return self.filter(tenant_id=caller.tenant_id)

    def in_collections(self, collections: Sequence[str]) -> MemoryQuerySet:
        """Memories of these roampal collections, stored or derived from the kind."""
        kinds = [kind for kind, name in COLLECTION_OF_KIND.items() if name in collections]
        return self.filter(Q(collection__in=list(collections)) | Q(collection="", kind__in=kinds))

    def retrievable(self, now: object) -> MemoryQuerySet:
        """Active and not past its TTL: what retrieval may return."""
        return self.filter(retrievable_q(now))

    def in_scopes(self, scope: str | None) -> MemoryQuerySet:
        """As in the butlers memory module, a scope argument means the caller's scope plus 'global'."""
        if not scope:
            return self
        return self.filter(scope__in=sorted({"global", scope}))

    def visible_in(self, boundary_classes: frozenset[str] | Sequence[str]) -> MemoryQuerySet:
        """Boundary-first (issue 11): only memories of these boundary classes
        (``policy.boundary.boundary_for(...).visible``)."""
        return self.filter(boundary_class__in=sorted(boundary_classes))

    def without_vectors(self) -> MemoryQuerySet:
        return self.defer("embedding", "search_vector")

    def nearest_first(
        self, vector: Sequence[float], *, tenant_id: uuid.UUID, max_distance: float | None = None
    ) -> MemoryQuerySet:
        """The memories with a vector (within ``max_distance``), nearest to
        ``vector`` first (annotated ``distance``), of ``tenant_id``'s graph
        group, whose graph the planner can then walk (the caller filters by
        that tenant as well)."""
        nearest = self.filter(in_graph_group_of(tenant_id), embedding__isnull=False).annotate(
            distance=graph_distance(vector)
        )
        if max_distance is not None:
            nearest = nearest.filter(distance__lte=max_distance)
        return nearest.order_by("distance", "id")

    def with_effective_confidence(self, now: datetime) -> MemoryQuerySet:
        sql = effective_confidence_sql('"memory_memory"', "%s")
        return self.annotate(effective_confidence=RawSQL(sql, [now], output_field=models.FloatField()))  # noqa: S611

    def in_fact_state(self, state: str, now: datetime) -> MemoryQuerySet:
        """Active facts whose effective confidence puts them in ``state``
        (active / fading / expired, thresholds from memory.scoring)."""
        bounds = {
            "active": Q(effective_confidence__gte=scoring.FADING_BELOW),
            "fading": Q(effective_confidence__gte=scoring.EXPIRED_BELOW, effective_confidence__lt=scoring.FADING_BELOW),
            "expired": Q(effective_confidence__lt=scoring.EXPIRED_BELOW),
        }
        if state not in bounds:
            raise ValueError(f"unknown fact state {state!r}")
        return (
            self.filter(kind=Kind.FACT, validity=Validity.ACTIVE).with_effective_confidence(now).filter(bounds[state])
        )


class OccurredAtField(models.DateTimeField):
    """A timestamp that defaults to the row's ``created_at`` at insert: Django
    fills the fields of an INSERT in declaration order, so ``created_at`` (an
    ``auto_now_add``) already holds its value when this one asks for it."""

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = getattr(model_instance, self.attname, None)
        if value is None:
            value = getattr(model_instance, "created_at", None)
            setattr(model_instance, self.attname, value)
        return value


class Memory(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="memories")
    principal = models.ForeignKey(
        "policy.Principal", null=True, blank=True, on_delete=models.SET_NULL, related_name="memories"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices)
    content = models.TextField()
    content_hash = models.CharField(max_length=71)

    # Partitions inside a tenant: butler/session (episodes), scope (a
    # butler's scope and 'global'), namespace (langmem-style path segments).
    butler = models.CharField(max_length=100, blank=True)
    session_id = models.CharField(max_length=200, blank=True)
    scope = models.CharField(max_length=100, default="global")
    namespace = ArrayField(models.CharField(max_length=200), default=list, blank=True)
    tags = ArrayField(models.CharField(max_length=64), default=list, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    source = models.CharField(max_length=32, blank=True)
    collection = models.CharField(max_length=16, choices=Collection.choices, blank=True, default="", db_default="")
    # pce-memory v0.14.0's boundary class (public / internal / pii / secret). The tenant
    # policy decides which classes a read may see and which come back redacted;
    # retrieval filters on it in SQL (boundary-first, issue 11).
    boundary_class = models.CharField(
        max_length=16,
        choices=[(c, c) for c in BOUNDARY_CLASSES],
        default=DEFAULT_BOUNDARY_CLASS,
        db_default=DEFAULT_BOUNDARY_CLASS,
    )

    importance = models.FloatField(default=5.0)
    confidence = models.FloatField(default=1.0)
    permanence = models.CharField(max_length=16, blank=True)
    decay_rate = models.FloatField(default=0.0)
    last_confirmed_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    # Facts: the state (active / fading / expired by effective confidence) last
    # recorded, and when decay will next change it; the decay sweep reads only
    # rows whose time has come (see scoring.fact_state_schedule).
    fact_state = models.CharField(max_length=16, blank=True, db_default="")
    fact_state_changes_at = models.DateTimeField(null=True, blank=True)

    # Facts: supersession key. A fact without one (both empty: memento's
    # memories) is never superseded automatically; a LangGraph store item's key
    # is its subject, with an empty predicate.
    subject = models.CharField(max_length=200, blank=True)
    predicate = models.CharField(max_length=200, blank=True)
    validity = models.CharField(max_length=16, choices=Validity.choices, default=Validity.ACTIVE)
    superseded_by = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="supersedes"
    )

    # Outcome counters, one set for every dialect's feedback (memory.outcomes):
    # successes are fractional (roampal's partial = 0.5), applied_count is
    # roampal's `uses`, outcome_score its learned score, utility pce's critic.
    maturity = models.CharField(max_length=16, choices=Maturity.choices, blank=True)
    success_count = models.FloatField(default=0.0)
    harmful_count = models.IntegerField(default=0)
    applied_count = models.IntegerField(default=0)
    effectiveness_score = models.FloatField(default=0.0)
    last_applied_at = models.DateTimeField(null=True, blank=True)
    outcome_score = models.FloatField(default=0.5, db_default=0.5)
    utility = models.FloatField(default=0.0, db_default=0.0)

    reference_count = models.IntegerField(default=0)
    last_referenced_at = models.DateTimeField(null=True, blank=True)
    # When a reader last got this memory back from a search, list, recall or
    # get (memento's accessed_at); null means never since it was stored.
    accessed_at = models.DateTimeField(null=True, blank=True)
    consolidated_at = models.DateTimeField(null=True, blank=True)

    embedding = VectorField(dimensions=EMBEDDING_DIM, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, blank=True)
    embedding_status = models.CharField(max_length=16, choices=EmbeddingStatus.choices, default=EmbeddingStatus.PENDING)
    embedding_attempts = models.IntegerField(default=0)
    embedding_error = models.TextField(blank=True)
    # Populated by PostgreSQL itself, so no write path can forget it; the SQL
    # function (migrations 0010, 0043) folds Unicode variants, then is ``english``
    # plus character bigrams for CJK runs.
    search_vector = models.GeneratedField(
        expression=models.Func(models.F("content"), function="memproj_search_vector"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    # When what is remembered happened: created_at unless a writer knows better (an
    # imported episode is dated when it happened upstream, not when it was imported).
    # Declared after created_at so that its default is the row's own created_at; a
    # trigger (migration 0038) keeps the same rule for rows written outside the ORM.
    occurred_at = OccurredAtField()

    objects = MemoryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        verbose_name_plural = "memories"
        indexes = [
            # The graph of every memory, one per graph group: reads that include
            # episodes, the bulk kind.
            *(_hnsw_graph(graph_group_name(group), Q(Exact(graph_group(), group))) for group in range(GRAPH_GROUPS)),
            # And one graph per minority kind, of its active memories (issue 13).
            # In the graph of every memory, a read of facts walked past the
            # episodes near its query one by one (thousands of rows for a few
            # dozen facts, in a tenant of many episodes). Reads of these kinds only walk their own graphs
            # (memory.retrieval: one probe per kind); a fact or rule write
            # inserts into two graphs, an episode into one.
            *(_kind_hnsw(kind) for kind in KINDS_WITH_OWN_GRAPH),
            # The keyword channel: the words of every memory, and of each kind's
            # active memories (episodes too). A read of some kinds writes them as
            # ORed equalities (memory.retrieval.keyword_kinds_sql), so the planner
            # may take the union of their indexes; it takes the index of every
            # memory where that costs less (small tenants, reads of every kind).
            GinIndex(fields=["search_vector"], name="memory_search_vector_gin"),
            *(_kind_search_gin(kind) for kind in Kind.values),
            models.Index(fields=["tenant", "kind", "validity", "-created_at"], name="memory_tenant_kind_idx"),
            models.Index(fields=["tenant", "content_hash"], name="memory_tenant_hash_idx"),
            models.Index(
                fields=["embedding_status"],
                name="memory_embedding_pending_idx",
                condition=~Q(embedding_status="ready"),
            ),
            models.Index(
                fields=["expires_at"], name="memory_expiry_idx", condition=Q(kind="episode", validity="active")
            ),
            # The expiry sweep: every kind with a TTL (memory.services.sweeps.memories_expire).
            models.Index(fields=["expires_at"], name="memory_expires_at_idx", condition=Q(expires_at__isnull=False)),
            # The roampal lifecycle sweep and collection listings (days_back without a query).
            models.Index(
                fields=["tenant", "collection", "-occurred_at"],
                name="memory_collection_idx",
                condition=~Q(collection=""),
            ),
            # A session's latest turns (memory.embedtext: the previous turn an
            # episode is embedded with; one probe per store).
            models.Index(
                fields=["tenant", "session_id", "-created_at"],
                name="memory_session_turn_idx",
                condition=Q(kind="episode", validity="active") & ~Q(session_id=""),
            ),
            models.Index(
                fields=["fact_state_changes_at"],
                name="memory_fact_state_due_idx",
                condition=Q(kind="fact", validity="active", fact_state_changes_at__isnull=False),
            ),
        ]
        constraints = [
            # Supersession as in the butlers memory module: at most one active fact per subject+predicate
            # (inside a tenant and namespace). The service serialises writers with
            # an advisory lock; this index is the backstop that makes a race
            # impossible rather than unlikely. Keyless facts are not keyed.
            models.UniqueConstraint(
                fields=["tenant", "namespace", "subject", "predicate"],
                condition=Q(kind="fact", validity="active") & ~Q(subject=""),
                name="memory_one_active_fact_per_key",
            ),
            models.CheckConstraint(condition=Q(kind__in=Kind.values), name="memory_kind_valid"),
            models.CheckConstraint(condition=Q(validity__in=Validity.values), name="memory_validity_valid"),
            models.CheckConstraint(
                condition=Q(boundary_class__in=BOUNDARY_CLASSES), name="memory_boundary_class_valid"
            ),
            models.CheckConstraint(
                condition=Q(importance__gte=0) & Q(importance__lte=10), name="memory_importance_range"
            ),
            models.CheckConstraint(
                condition=Q(confidence__gte=0) & Q(confidence__lte=1), name="memory_confidence_range"
            ),
            models.CheckConstraint(condition=Q(decay_rate__gte=0), name="memory_decay_rate_nonnegative"),
            # A predicate needs a subject; a fact may have neither (keyless).
            models.CheckConstraint(
                condition=~Q(kind="fact") | ~Q(subject="") | Q(predicate=""),
                name="memory_fact_key_shape",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}: {self.content[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Reads return redacted copies of pii-like classes (memory.selectors.memories.
        # boundary_apply); writing one back would replace the stored text for good.
        if getattr(self, "_memproj_redacted", False):
            raise RuntimeError(f"memory {self.id} was redacted for a read and cannot be saved; reload it first.")
        super().save(*args, **kwargs)

    @classmethod
    def from_db(
        cls, db: str | None, field_names: collections.abc.Collection[str], values: collections.abc.Collection[Any]
    ) -> Memory:
        """A loaded row without ``Model.__init__``, which sets its ~50 columns
        one ``setattr`` at a time, a visible share of a search's Python time
        (every search builds its results this way). The columns go straight into the
        instance, the others stay deferred, as Django's own ``from_db`` leaves
        them. The same object while Memory has no init signal listener, no
        ``__init__`` of its own and only plain deferred attributes as columns
        (tests/memory/test_memory_from_db.py checks all three)."""
        memory = cls.__new__(cls)
        state = ModelState()
        state.adding = False
        state.db = db
        memory._state = state
        memory.__dict__.update(zip(field_names, values, strict=True))
        return memory


class MemoryEvent(models.Model):
    """Append-only, tamper-evident audit log. The service's database role may
    only read and insert (memproj/dbroles.py); triggers (migrations 0002, 0026)
    refuse UPDATE, DELETE and TRUNCATE except inside the purge function; each
    row carries a hash chained to its tenant's previous row and a MAC of that
    hash, written by the one writer (memory/services/events.py) and checked by
    ``manage.py audit_verify``."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="memory_events")
    # No foreign key: the audit trail must outlive what it describes.
    memory_id = models.UUIDField(null=True, blank=True, db_index=True)
    memory_kind = models.CharField(max_length=16, blank=True)
    event_type = models.CharField(max_length=64)
    actor_principal_id = models.UUIDField(null=True, blank=True)
    # The API token (policy.ApiToken's id) the call came with, which tells a
    # principal's tokens apart; None for what no token asked for (background
    # tasks, the admin, management commands). No foreign key either: the event
    # and its hashed content must outlive a deleted token.
    actor_token_id = models.UUIDField(null=True, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    # sha256 hex of the tenant's previous event ('' for its first) and of this one.
    prev_hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    hash = models.CharField(max_length=64, blank=True, default="", editable=False)
    # Which recipe ``hash`` follows (memory/services/events.py::event_hash): 1
    # for the events written before the token was hashed, 2 since (migration 0040).
    hash_version = models.PositiveSmallIntegerField(db_default=1, editable=False)
    # HMAC-SHA256 of ``hash`` with the audit key, which the database never sees
    # (memory/services/events.py): set by the writer in the append's transaction.
    mac = models.CharField(max_length=64, blank=True, db_default="", editable=False)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="memory_event_tenant_idx"),
            # The chain's head: a tenant's last event.
            models.Index(fields=["tenant", "-id"], name="memory_event_chain_idx"),
            # What one token did (the admin's token filter), newest first.
            models.Index(
                fields=["actor_token_id", "-id"],
                name="memory_event_token_idx",
                condition=Q(actor_token_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.memory_id or ''}"


class FollowUpKind(models.TextChoices):
    EMBED = "embed", "Embed"
    CONFLICT_CHECK = "conflict_check", "Conflict check"


class FollowUp(models.Model):
    """Outbox (issue 15): background work a write needs, recorded in the write's
    own transaction, so a committed write never loses its follow-up when the
    broker is down. Enqueued after commit (best effort), done by the worker,
    and drained by a sweep; ``done_at`` marks it done exactly once."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="followups")
    # No foreign key: a purge deletes the memory; its follow-up then finds nothing to do.
    memory_id = models.UUIDField()
    kind = models.CharField(max_length=32, choices=FollowUpKind.choices)
    payload = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    attempts = models.PositiveIntegerField(default=0)
    done_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            # One open follow-up of a kind per memory: recording it again is a no-op.
            models.UniqueConstraint(
                fields=["memory_id", "kind"], condition=Q(done_at__isnull=True), name="followup_one_open"
            )
        ]
        indexes = [models.Index(fields=["created_at"], condition=Q(done_at__isnull=True), name="followup_open_idx")]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_id}{'' if self.done_at is None else ' (done)'}"


class ConflictKind(models.TextChoices):
    DUPLICATE = "duplicate", "Duplicate"
    CONTRADICTION = "contradiction", "Contradiction"


class ConflictStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACCEPTED = "accepted", "Accepted"
    DISMISSED = "dismissed", "Dismissed"


class ConflictCandidateQuerySet(models.QuerySet["ConflictCandidate"]):
    def for_caller(self, caller: Caller) -> ConflictCandidateQuerySet:
        return self.filter(tenant_id=caller.tenant_id)

    def open(self) -> ConflictCandidateQuerySet:
        return self.filter(status=ConflictStatus.OPEN)


class ConflictCandidate(models.Model):
    """A likely near-duplicate or contradiction found by the background conflict
    check, waiting for a person (admin) or a tool to accept or dismiss it.
    Accepting means ``memory`` (the newer one) supersedes ``other``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="conflict_candidates")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="conflicts")
    other = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="conflicts_as_other")
    kind = models.CharField(max_length=16, choices=ConflictKind.choices)
    similarity = models.FloatField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    status = models.CharField(max_length=16, choices=ConflictStatus.choices, default=ConflictStatus.OPEN)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.UUIDField(null=True, blank=True, help_text="Principal id of whoever resolved it.")

    objects = ConflictCandidateQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [models.Index(fields=["tenant", "status", "-created_at"], name="conflict_tenant_status_idx")]
        constraints = [
            # The check runs again on redelivery; one row per pair keeps it idempotent.
            models.UniqueConstraint(fields=["memory", "other"], name="conflict_one_per_pair"),
            models.CheckConstraint(condition=~Q(memory=models.F("other")), name="conflict_distinct_memories"),
            models.CheckConstraint(condition=Q(kind__in=ConflictKind.values), name="conflict_kind_valid"),
            models.CheckConstraint(condition=Q(status__in=ConflictStatus.values), name="conflict_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_id} ~ {self.other_id} ({self.status})"


class OutcomeReport(models.Model):
    """One outcome signal as received, so that a client's retry (pce's
    (claim_id, time bucket) idempotency, or any dialect's idempotency key) is
    applied once: the unique key makes a second report a no-op."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="outcome_reports")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="outcome_reports")
    signal = models.CharField(max_length=16)
    idempotency_key = models.CharField(max_length=200, blank=True)
    actor_principal_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "idempotency_key"],
                condition=~Q(idempotency_key=""),
                name="outcome_report_idempotent",
            )
        ]

    def __str__(self) -> str:
        return f"{self.signal} {self.memory_id}"


class LinkKind(models.TextChoices):
    DERIVED_FROM = "derived_from", "Derived from"


class MemoryLinkQuerySet(models.QuerySet["MemoryLink"]):
    def for_caller(self, caller: Caller) -> MemoryLinkQuerySet:
        return self.filter(tenant_id=caller.tenant_id)


class MemoryLink(models.Model):
    """A directed edge between two memories of one tenant, e.g. a consolidated
    fact -> each episode it was derived from."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="memory_links")
    from_memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="links_out")
    to_memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="links_in")
    kind = models.CharField(max_length=32, choices=LinkKind.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MemoryLinkQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["from_memory", "to_memory", "kind"], name="memory_link_unique"),
            models.CheckConstraint(condition=~Q(from_memory=models.F("to_memory")), name="memory_link_not_self"),
        ]

    def __str__(self) -> str:
        return f"{self.from_memory_id} -{self.kind}-> {self.to_memory_id}"


class ExchangeQuerySet(models.QuerySet["Exchange"]):
    def for_caller(self, caller: Caller) -> ExchangeQuerySet:
        return self.filter(tenant_id=caller.tenant_id)


class Exchange(models.Model):
    """One turn of a hooked conversation (roampal's session transcripts): the
    memories the KNOWN CONTEXT block surfaced for it, the exchange as the Stop
    hook reported it, and whether the model scored it. Kept 7 days (as
    roampal v0.3.5 keeps them), then deleted by the retention sweep; what matters lives on as
    the working memory ``memory_id``."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="exchanges")
    principal_id = models.UUIDField(null=True, blank=True)
    conversation_id = models.CharField(max_length=200)
    user_message = models.TextField(blank=True)
    assistant_response = models.TextField(blank=True)
    transcript = models.TextField(blank=True)
    surfaced_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    memory_id = models.UUIDField(null=True, blank=True)
    # The earlier turn this turn's prompt asked the model to score (score_response marks it).
    scores = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    completed_at = models.DateTimeField(null=True, blank=True)
    scored_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = ExchangeQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "conversation_id", "-id"], name="exchange_conversation_idx")]

    def __str__(self) -> str:
        return f"{self.conversation_id} #{self.id}"


class EntityType(models.TextChoices):
    """pce-memory v0.14.0's entity types."""

    ACTOR = "Actor", "Actor"
    ARTIFACT = "Artifact", "Artifact"
    EVENT = "Event", "Event"
    CONCEPT = "Concept", "Concept"


class EntityQuerySet(models.QuerySet["Entity"]):
    def for_caller(self, caller: Caller) -> EntityQuerySet:
        return self.filter(tenant_id=caller.tenant_id)


class Entity(models.Model):
    """A node of the tenant's knowledge graph (pce-memory v0.14.0). Entities with the same
    canonical key are one entity: a second mention merges its attributes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="entities")
    type = models.CharField(max_length=16, choices=EntityType.choices)
    name = models.CharField(max_length=500)
    canonical_key = models.CharField(max_length=500)
    attrs = models.JSONField(default=dict, blank=True)
    claims = models.ManyToManyField(Memory, related_name="entities", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = EntityQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        verbose_name_plural = "entities"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "canonical_key"], name="entity_one_per_canonical_key"),
            models.CheckConstraint(condition=Q(type__in=EntityType.values), name="entity_type_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.type} {self.name}"


class Relation(models.Model):
    """A typed edge between two entities, with the claim that evidences it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="relations")
    src = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_out")
    dst = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_in")
    type = models.CharField(max_length=200)
    props = models.JSONField(default=dict, blank=True)
    evidence = models.ForeignKey(Memory, null=True, blank=True, on_delete=models.SET_NULL, related_name="relations")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["src", "dst", "type"], name="relation_one_per_typed_pair"),
        ]

    def __str__(self) -> str:
        return f"{self.src_id} -{self.type}-> {self.dst_id}"


class ActiveContext(models.Model):
    """A ranked snapshot of claims for one query (pce-memory v0.14.0's activate), paged by
    cursor until it expires; an expired context's cursor answers 410."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="active_contexts")
    principal_id = models.UUIDField(null=True, blank=True)
    query = models.TextField()
    items = models.JSONField(default=list, help_text="[[memory id, score, breakdown], ...] best first")
    params = models.JSONField(default=dict, blank=True)
    policy_version = models.CharField(max_length=32, blank=True)
    expires_at = models.DateTimeField(db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"ac {self.id}"


class IdempotencyKey(models.Model):
    """A write's idempotency key and the answer it got (memory.services.idempotency):
    a retry with the same key and arguments gets this answer back instead of
    writing again. Scoped to the tenant, the principal and the tool it was sent
    to; written in the transaction of the write itself; deleted by the
    idempotency-keys-expire sweep once ``expires_at`` has passed."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="+")
    # The zero UUID for a caller without a principal, so the key stays unique (NULLs never collide).
    principal_id = models.UUIDField()
    scope = models.CharField(max_length=200, help_text="surface:dialect.tool")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the canonical JSON of the request")
    # The answer as the JSON text it was sent as (jsonb would reorder its keys); empty while the write runs.
    answer = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "principal_id", "scope", "key"], name="idempotency_key_unique_per_scope"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.scope} {self.key}"


class MemoryAliasQuerySet(models.QuerySet["MemoryAlias"]):
    def for_caller(self, caller: Caller) -> MemoryAliasQuerySet:
        return self.filter(tenant_id=caller.tenant_id)


class MemoryAlias(models.Model):
    """Another system's id for a memory (``memory_bank_1a2b3c4d`` from roampal,
    ``clm_...`` from pce-memory, a mem0 or Memento UUID): written by an import
    (memory.services.imports) so the ids a client already holds keep naming the
    same memory through every dialect, and so a second run of the same import
    recognises what it already brought in. ``system`` names the upstream the id
    comes from (the importer's name)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("policy.Tenant", on_delete=models.CASCADE, related_name="memory_aliases")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="aliases")
    system = models.CharField(max_length=32)
    alias = models.CharField(max_length=300)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MemoryAliasQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "memory aliases"
        constraints = [
            models.UniqueConstraint(fields=["tenant", "system", "alias"], name="memory_alias_unique_per_system"),
        ]
        indexes = [
            models.Index(fields=["tenant", "alias"], name="memory_alias_lookup_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.system}:{self.alias} -> {self.memory_id}"


class RefusedCallSurface(models.TextChoices):
    MCP = "mcp", "MCP"
    HTTP = "http", "REST (/api/<toolset>/<tool>)"


class RefusedCall(models.Model):
    """One tool call an authenticated caller was refused (a coded error: a
    validation error, a permission or boundary refusal, a duplicate, a storage
    failure, ...), written by memory.services.refusals after the answer was
    decided and outside any transaction of the call. The audit log
    (MemoryEvent) records what changed; a refusal changed nothing, so it is
    kept here instead. Append-only in the app: nothing updates or deletes a
    row (the admin shows them read-only). No argument values are kept, only
    the names of the arguments sent, bounded. Growth is bounded by the
    per-token rate limit (policy/middleware.py); there is no retention sweep,
    as there is none for the audit log."""

    id = models.BigAutoField(primary_key=True)
    # The caller's own tenant (the token's), even for an admin's elevated call.
    # An id, not a foreign key: a row records an attempt, not tenant state (the
    # isolation digests of tests/harness/rows.py compare every table with a
    # tenant relation before and after a refused call); scoped by it all the same.
    tenant_id = models.UUIDField()
    # Who was refused: an id, as the audit log names its actors, so that no
    # row ever fails for its caller; a principal's purge deletes its rows.
    principal_id = models.UUIDField(null=True, blank=True)
    # The API token of the call (policy.ApiToken's id); no foreign key: the row outlives a deleted token.
    token_id = models.UUIDField(null=True, blank=True)
    toolset = models.CharField(max_length=32)
    tool = models.CharField(max_length=100)
    # The code the client was answered (the dialect's vocabulary, e.g. pce's
    # VALIDATION_ERROR) and the core code behind it (INVALID_ARGUMENT).
    code = models.CharField(max_length=64)
    core_code = models.CharField(max_length=64, blank=True, default="")
    message = models.CharField(max_length=500, blank=True, default="")
    surface = models.CharField(max_length=8, choices=RefusedCallSurface.choices)
    # The id the answer named (pce's envelope request_id), else the JSON-RPC request id; "" if none.
    request_id = models.CharField(max_length=100, blank=True, default="")
    # The names of the arguments sent (never their values), at most 32 of 64 characters each.
    argument_names = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant_id", "-id"], name="refused_call_tenant_idx"),
            models.Index(
                fields=["token_id", "-id"], name="refused_call_token_idx", condition=Q(token_id__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return f"{self.toolset}.{self.tool} {self.code}"
